#include "server/core/quantile_sketch.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "server/core/state_wire.h"

namespace torchmon::server {

QuantileSketch::QuantileSketch(double relative_accuracy, size_t max_buckets)
    : alpha_(relative_accuracy),
      gamma_((1 + relative_accuracy) / (1 - relative_accuracy)),
      log_gamma_(std::log(gamma_)),
      max_buckets_(std::max<size_t>(max_buckets, 1)) {}

int32_t QuantileSketch::Index(double magnitude) const {
  return static_cast<int32_t>(std::ceil(std::log(magnitude) / log_gamma_));
}

double QuantileSketch::Value(int32_t index) const {
  // The point of bucket (γ^(i-1), γ^i] within relative error α of both ends.
  return 2 * std::pow(gamma_, index) / (gamma_ + 1);
}

void QuantileSketch::Store::Add(int32_t index, uint64_t n, size_t max_buckets) {
  if (counts.empty()) {
    offset = index;
    counts.assign(1, n);
    return;
  }
  const int64_t high = static_cast<int64_t>(offset) + static_cast<int64_t>(counts.size()) - 1;
  if (index < offset) {
    // counts.size() ≤ max_buckets, so lowest_kept ≤ offset.
    const int64_t lowest_kept = high - static_cast<int64_t>(max_buckets) + 1;
    if (index < lowest_kept) {
      collapsed = true;  // below what the bound keeps: into the lowest bucket it may hold
      index = static_cast<int32_t>(lowest_kept);
    }
    if (index < offset) {
      counts.insert(counts.begin(), static_cast<size_t>(offset - index), 0);
      offset = index;
    }
    counts[static_cast<size_t>(index - offset)] += n;
    return;
  }
  if (index > high) {
    counts.resize(static_cast<size_t>(index - offset) + 1, 0);
    if (counts.size() > max_buckets) {
      // Keep the top max_buckets; the lower ones merge into the lowest kept.
      const size_t drop = counts.size() - max_buckets;
      uint64_t folded = 0;
      for (size_t i = 0; i <= drop; ++i) folded += counts[i];
      counts.erase(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(drop));
      counts[0] = folded;
      offset += static_cast<int32_t>(drop);
      collapsed = true;
    }
  }
  counts[static_cast<size_t>(index - offset)] += n;
}

void QuantileSketch::Add(double x) {
  ++count_;
  if (std::isnan(x)) {
    ++nans_;
  } else if (std::isinf(x)) {
    ++(x > 0 ? positive_inf_ : negative_inf_);
  } else if (x == 0 || std::fabs(x) < std::numeric_limits<double>::min()) {
    ++zeros_;  // zero, and subnormals, whose logarithm the mapping cannot hold accurately
  } else if (x > 0) {
    positive_.Add(Index(x), 1, max_buckets_);
  } else {
    negative_.Add(Index(-x), 1, max_buckets_);
  }
}

void QuantileSketch::Merge(const QuantileSketch& other) {
  for (size_t i = 0; i < other.positive_.counts.size(); ++i) {
    if (other.positive_.counts[i] == 0) continue;
    positive_.Add(other.positive_.offset + static_cast<int32_t>(i), other.positive_.counts[i],
                  max_buckets_);
  }
  for (size_t i = 0; i < other.negative_.counts.size(); ++i) {
    if (other.negative_.counts[i] == 0) continue;
    negative_.Add(other.negative_.offset + static_cast<int32_t>(i), other.negative_.counts[i],
                  max_buckets_);
  }
  positive_.collapsed |= other.positive_.collapsed;
  negative_.collapsed |= other.negative_.collapsed;
  zeros_ += other.zeros_;
  positive_inf_ += other.positive_inf_;
  negative_inf_ += other.negative_inf_;
  nans_ += other.nans_;
  count_ += other.count_;
}

void QuantileSketch::Clear() {
  positive_.Clear();
  negative_.Clear();
  zeros_ = positive_inf_ = negative_inf_ = nans_ = count_ = 0;
}

double QuantileSketch::Quantile(double q) const {
  if (count_ == 0 || nans_ > 0) return std::numeric_limits<double>::quiet_NaN();
  q = std::clamp(q, 0.0, 1.0);
  const uint64_t rank = static_cast<uint64_t>(std::floor(q * static_cast<double>(count_ - 1)));
  uint64_t seen = negative_inf_;
  if (rank < seen) return -std::numeric_limits<double>::infinity();
  for (size_t i = negative_.counts.size(); i-- > 0;) {  // most negative first
    seen += negative_.counts[i];
    if (rank < seen) return -Value(negative_.offset + static_cast<int32_t>(i));
  }
  seen += zeros_;
  if (rank < seen) return 0;
  for (size_t i = 0; i < positive_.counts.size(); ++i) {
    seen += positive_.counts[i];
    if (rank < seen) return Value(positive_.offset + static_cast<int32_t>(i));
  }
  return std::numeric_limits<double>::infinity();
}

namespace {

void SaveCounts(state::Writer& out, int32_t offset, const std::vector<uint64_t>& counts) {
  out.Signed(offset);
  out.Varint(counts.size());
  for (uint64_t n : counts) out.Varint(n);
}

bool LoadCounts(state::Reader& in, size_t max_buckets, int32_t& offset,
                std::vector<uint64_t>& counts, const char* what) {
  const int64_t o = in.Signed(what);
  const size_t n = in.Count(what, 1);
  if (o < std::numeric_limits<int32_t>::min() || o > std::numeric_limits<int32_t>::max() ||
      n > max_buckets) {
    in.Fail(absl::StrCat(what, ": ", n, " buckets from ", o, " do not fit (at most ", max_buckets,
                         ")"));
    return false;
  }
  offset = static_cast<int32_t>(o);
  counts.resize(n);
  for (uint64_t& c : counts) c = in.Varint(what);
  return in.ok();
}

}  // namespace

void QuantileSketch::Save(state::Writer& out) const {
  out.Double(alpha_);
  out.Varint(max_buckets_);
  SaveCounts(out, positive_.offset, positive_.counts);
  out.Bool(positive_.collapsed);
  SaveCounts(out, negative_.offset, negative_.counts);
  out.Bool(negative_.collapsed);
  out.Varint(zeros_);
  out.Varint(positive_inf_);
  out.Varint(negative_inf_);
  out.Varint(nans_);
  out.Varint(count_);
}

bool QuantileSketch::Load(state::Reader& in) {
  const double alpha = in.Double("sketch accuracy");
  const uint64_t max_buckets = in.Varint("sketch bucket limit");
  if (!in.ok()) return false;
  if (!(alpha > 0 && alpha < 1) || max_buckets == 0 || max_buckets > (1u << 20)) {
    in.Fail(absl::StrCat("sketch: accuracy ", alpha, " and bucket limit ", max_buckets,
                         " are not a sketch's"));
    return false;
  }
  QuantileSketch s(alpha, static_cast<size_t>(max_buckets));
  if (!LoadCounts(in, s.max_buckets_, s.positive_.offset, s.positive_.counts,
                  "sketch positive buckets")) {
    return false;
  }
  s.positive_.collapsed = in.Bool("sketch positive collapsed");
  if (!LoadCounts(in, s.max_buckets_, s.negative_.offset, s.negative_.counts,
                  "sketch negative buckets")) {
    return false;
  }
  s.negative_.collapsed = in.Bool("sketch negative collapsed");
  s.zeros_ = in.Varint("sketch zeros");
  s.positive_inf_ = in.Varint("sketch +inf");
  s.negative_inf_ = in.Varint("sketch -inf");
  s.nans_ = in.Varint("sketch NaNs");
  s.count_ = in.Varint("sketch count");
  if (!in.ok()) return false;
  *this = std::move(s);
  return true;
}

}  // namespace torchmon::server

#include "server/core/native_histogram.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/core/state_wire.h"

namespace torchmon::server {
namespace {

// The top mantissa bits that pick a slice of [0.5, 1): narrower than the
// gap between two bounds at schema 8, so a slice holds at most one bound.
constexpr int kSliceBits = 10;

// For schema s in 1..8: the 2^s fractions 2^(j/2^s - 1), j = 0 .. 2^s - 1,
// the bucket bounds within one power of two as std::frexp scales it to
// [0.5, 1); and for each slice of [0.5, 1) by the top kSliceBits of the
// mantissa, the first bound at or above the slice's start.
struct SchemaTable {
  std::vector<double> fractions;
  std::array<uint16_t, 1 << kSliceBits> first_bound;
};

const std::array<SchemaTable, 9>* BuildTables() {
  auto* tables_ptr = new std::array<SchemaTable, 9>;  // never destroyed
  std::array<SchemaTable, 9>& tables = *tables_ptr;
  {
    for (int32_t s = 1; s <= 8; ++s) {
      SchemaTable& t = tables[static_cast<size_t>(s)];
      const int32_t n = 1 << s;
      for (int32_t j = 0; j < n; ++j) t.fractions.push_back(std::exp2(static_cast<double>(j) / n - 1));
      for (size_t slice = 0; slice < t.first_bound.size(); ++slice) {
        const double start = 0.5 + static_cast<double>(slice) / (2 << kSliceBits);
        t.first_bound[slice] = static_cast<uint16_t>(
            std::lower_bound(t.fractions.begin(), t.fractions.end(), start) - t.fractions.begin());
      }
    }
  }
  return tables_ptr;
}

// Built when the program starts: a lookup per sample without the guard of
// a function-local static.
const std::array<SchemaTable, 9>* const kTables = BuildTables();

inline const SchemaTable& Table(int32_t schema) { return (*kTables)[static_cast<size_t>(schema)]; }

// Index() for schema > 0 and a normal double m: m = frac · 2^exp with frac
// in [0.5, 1) sharing m's mantissa, read from the bits (std::frexp and a
// binary search were most of a sample's histogram time).
inline int32_t NormalIndex(double m, int32_t schema) {
  uint64_t bits;
  std::memcpy(&bits, &m, sizeof bits);
  const int exp = static_cast<int>((bits >> 52) & 0x7FF) - 1022;
  const uint64_t fraction_bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{0x3FE} << 52);
  double frac;
  std::memcpy(&frac, &fraction_bits, sizeof frac);
  const SchemaTable& t = Table(schema);
  // The first bound ≥ frac (bounds are inclusive): the slice's first
  // bound, or the one after it if frac is past it.
  size_t j = t.first_bound[static_cast<size_t>(bits >> (52 - kSliceBits)) & ((1 << kSliceBits) - 1)];
  if (j < t.fractions.size() && t.fractions[j] < frac) ++j;
  return static_cast<int32_t>(j) + (exp - 1) * (1 << schema);
}

const std::vector<double>& Fractions(int32_t schema) { return Table(schema).fractions; }

// Bucket i at schema s lies within bucket floor((i + 1) / 2) at s - 1.
int32_t CoarserIndex(int32_t index) {
  const int64_t i = static_cast<int64_t>(index) + 1;
  return static_cast<int32_t>(i >= 0 ? i / 2 : -((-i + 1) / 2));
}

}  // namespace

int32_t NativeHistogram::Index(double m, int32_t schema) {
  if (schema > 0 && m >= std::numeric_limits<double>::min()) return NormalIndex(m, schema);
  int exp = 0;
  const double frac = std::frexp(m, &exp);  // m = frac · 2^exp, frac in [0.5, 1)
  if (schema > 0) {
    const std::vector<double>& fractions = Fractions(schema);
    // The first bound ≥ frac: bounds are inclusive.
    const auto j = std::lower_bound(fractions.begin(), fractions.end(), frac) - fractions.begin();
    return static_cast<int32_t>(j) + (exp - 1) * (1 << schema);
  }
  int32_t index = frac == 0.5 ? exp - 1 : exp;  // at schema 0, 2^(exp-1) is the bound itself
  const int32_t shift = -schema;
  // Round up: bucket k at schema -n covers 2^n buckets of schema 0.
  const int64_t scaled = static_cast<int64_t>(index) + (int64_t{1} << shift) - 1;
  index = static_cast<int32_t>(scaled >= 0 ? scaled >> shift : -((-scaled + (int64_t{1} << shift) - 1) >> shift));
  return index;
}

int32_t NativeHistogram::InfiniteIndex(int32_t schema) {
  // 2^(index / 2^schema) reaches 2^1024, past the largest double.
  return schema >= 0 ? 1024 << schema : 1024 >> -schema;
}

double NativeHistogram::UpperBound(int32_t index, int32_t schema) {
  if (schema > 0) {
    const int32_t mask = (1 << schema) - 1;
    const double frac = Fractions(schema)[static_cast<size_t>(index & mask)];
    // Floor division, so negative indices land in the right power of two.
    const int32_t power = index >= 0 ? index >> schema : -((-index + mask) >> schema);
    return std::ldexp(frac, power + 1);
  }
  const int64_t power = static_cast<int64_t>(index) * (int64_t{1} << -schema);  // no shift of a negative
  return std::ldexp(1.0, static_cast<int>(std::clamp<int64_t>(power, -2000, 2000)));
}

void NativeHistogram::Add(double x) {
  ++count_;
  sum_ += x;
  if (std::isnan(x)) return;  // counted, in no bucket
  if (std::isinf(x)) {
    ++(x > 0 ? positive_inf_ : negative_inf_);
    return;
  }
  const double m = std::fabs(x);
  if (m <= kZeroThreshold) {
    ++zero_count_;
    return;
  }
  // Above the zero threshold m is a normal double.
  const int32_t index = schema_ > 0 ? NormalIndex(m, schema_) : Index(m, schema_);
  Buckets& store = x > 0 ? positive_ : negative_;
  // Almost always a bucket the store already spans.
  const uint64_t offset = static_cast<uint64_t>(static_cast<int64_t>(index) - store.offset);
  if (offset < store.counts.size()) {
    ++store.counts[offset];
    return;
  }
  AddToBucket(store, index);
}

void NativeHistogram::AddToBucket(Buckets& store, int32_t index) {
  const Buckets& other = &store == &positive_ ? negative_ : positive_;
  for (;;) {
    size_t width = 1;
    if (!store.counts.empty()) {
      const int64_t low = std::min<int64_t>(store.offset, index);
      const int64_t high =
          std::max<int64_t>(store.offset + static_cast<int64_t>(store.counts.size()) - 1, index);
      width = static_cast<size_t>(high - low + 1);
    }
    if (width + other.counts.size() <= kMaxBuckets || schema_ <= kMinSchema) break;
    Coarsen();
    index = CoarserIndex(index);
  }
  if (store.counts.empty()) {
    store.offset = index;
    store.counts.assign(1, 1);
    return;
  }
  if (index < store.offset) {
    store.counts.insert(store.counts.begin(), static_cast<size_t>(store.offset - index), 0);
    store.offset = index;
  } else if (static_cast<size_t>(index - store.offset) >= store.counts.size()) {
    store.counts.resize(static_cast<size_t>(index - store.offset) + 1, 0);
  }
  ++store.counts[static_cast<size_t>(index - store.offset)];
}

void NativeHistogram::Coarsen() {
  for (Buckets* store : {&positive_, &negative_}) {
    if (store->counts.empty()) continue;
    const int32_t offset = CoarserIndex(store->offset);
    const int32_t high =
        CoarserIndex(store->offset + static_cast<int32_t>(store->counts.size()) - 1);
    std::vector<uint64_t> counts(static_cast<size_t>(high - offset) + 1, 0);
    for (size_t j = 0; j < store->counts.size(); ++j) {
      counts[static_cast<size_t>(CoarserIndex(store->offset + static_cast<int32_t>(j)) - offset)] +=
          store->counts[j];
    }
    store->offset = offset;
    store->counts = std::move(counts);
  }
  --schema_;
}

void NativeHistogram::Save(state::Writer& out) const {
  out.Signed(schema_);
  for (const Buckets* b : {&positive_, &negative_}) {
    out.Signed(b->offset);
    out.Varint(b->counts.size());
    for (uint64_t n : b->counts) out.Varint(n);
  }
  out.Varint(count_);
  out.Varint(zero_count_);
  out.Varint(positive_inf_);
  out.Varint(negative_inf_);
  out.Double(sum_);
}

bool NativeHistogram::Load(state::Reader& in) {
  NativeHistogram h;
  const int64_t schema = in.Signed("histogram schema");
  if (schema < kMinSchema || schema > kInitialSchema) {
    in.Fail(absl::StrCat("histogram: schema ", schema, " is not one this build uses"));
    return false;
  }
  h.schema_ = static_cast<int32_t>(schema);
  for (Buckets* b : {&h.positive_, &h.negative_}) {
    const int64_t offset = in.Signed("histogram bucket offset");
    const size_t n = in.Count("histogram buckets", 1);
    if (offset < std::numeric_limits<int32_t>::min() / 2 ||
        offset > std::numeric_limits<int32_t>::max() / 2 || n > kMaxBuckets) {
      in.Fail(absl::StrCat("histogram: ", n, " buckets from ", offset, " do not fit"));
      return false;
    }
    b->offset = static_cast<int32_t>(offset);
    b->counts.resize(n);
    for (uint64_t& c : b->counts) c = in.Varint("histogram bucket");
  }
  h.count_ = in.Varint("histogram count");
  h.zero_count_ = in.Varint("histogram zeros");
  h.positive_inf_ = in.Varint("histogram +inf");
  h.negative_inf_ = in.Varint("histogram -inf");
  h.sum_ = in.Double("histogram sum");
  if (!in.ok()) return false;
  *this = std::move(h);
  return true;
}

}  // namespace torchmon::server

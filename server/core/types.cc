#include "server/core/types.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {

const std::string* FindLabel(const Labels& labels, absl::string_view key) {
  auto it = std::lower_bound(labels.begin(), labels.end(), key,
                             [](const auto& kv, absl::string_view k) { return kv.first < k; });
  return it != labels.end() && it->first == key ? &it->second : nullptr;
}

const char* AggregationName(Aggregation a) {
  switch (a) {
    case Aggregation::kValue: return "value";
    case Aggregation::kMean: return "mean";
    case Aggregation::kCount: return "count";
    case Aggregation::kSum: return "sum";
    case Aggregation::kMax: return "max";
    case Aggregation::kMin: return "min";
    case Aggregation::kQuantile: return "quantile";
  }
  return "unknown";
}

std::string AggregateName(const AggregateRef& ref) {
  if (ref.aggregation == Aggregation::kQuantile) return protocol::QuantileName(ref.quantile);
  return AggregationName(ref.aggregation);
}

bool StatSpec::Computes(const AggregateRef& ref) const {
  if (ref.aggregation != Aggregation::kQuantile) return Contains(aggregations, ref.aggregation);
  return std::find(quantiles.begin(), quantiles.end(), ref.quantile) != quantiles.end();
}

std::optional<double> ClosedWindow::Value(const AggregateRef& ref) const {
  if (ref.aggregation != Aggregation::kQuantile) {
    if (!Contains(aggregations, ref.aggregation)) return std::nullopt;
    return stats.Get(ref.aggregation);
  }
  for (const QuantileValue& q : quantiles) {
    if (q.quantile == ref.quantile) return q.value;
  }
  return std::nullopt;
}

QuantileList::QuantileList(std::vector<double> quantiles)
    : list_(quantiles.empty() ? nullptr
                              : std::make_unique<const std::vector<double>>(std::move(quantiles))) {}

// Built in place, with no moved-from vector to destroy: that destruction is
// what gcc 12 misreads.
QuantileList::QuantileList(std::initializer_list<double> quantiles)
    : list_(quantiles.size() == 0 ? nullptr : std::make_unique<const std::vector<double>>(quantiles)) {}

QuantileList::QuantileList(const QuantileList& other) : QuantileList(other.get()) {}

const std::vector<double>& QuantileList::Empty() {
  static const std::vector<double>* const empty = new std::vector<double>();
  return *empty;
}

const Labels& LabelSet::EmptyLabels() {
  static const Labels* const empty = new Labels();
  return *empty;
}

std::string SeriesKey::ToString() const {
  return absl::StrCat(stat, "{",
                      absl::StrJoin(labels, ",",
                                    [](std::string* out, const auto& kv) {
                                      absl::StrAppend(out, kv.first, "=\"", kv.second, "\"");
                                    }),
                      "}");
}

std::vector<std::string> StatSpec::AggregationNames() const {
  std::vector<std::string> names;
  for (Aggregation a : kAllAggregations) {
    if (Contains(aggregations, a)) names.push_back(AggregationName(a));
  }
  for (double q : quantiles) names.push_back(protocol::QuantileName(q));
  return names;
}

std::string StatSpec::ToString() const {
  const std::vector<std::string> names = AggregationNames();
  const auto duration = [](int64_t ms) {
    return ms % 1000 == 0 ? absl::StrCat(ms / 1000, "s") : absl::StrCat(ms, "ms");
  };
  std::string window = duration(window_ms);
  if (requested_window_ms != 0 && requested_window_ms != window_ms) {
    absl::StrAppend(&window, " (asked ", duration(requested_window_ms), ")");
  }
  return absl::StrCat("aggregations=[", absl::StrJoin(names, ","), "] window=", window,
                      " max_samples=",
                      max_samples == 0 ? std::string("unlimited") : absl::StrCat(max_samples),
                      histogram && quantiles.empty() ? " histogram" : "");
}

double WindowStats::Get(Aggregation a) const {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  switch (a) {
    case Aggregation::kValue: return last;
    case Aggregation::kMean: return accepted == 0 ? nan : sum / static_cast<double>(accepted);
    case Aggregation::kCount: return static_cast<double>(accepted);
    case Aggregation::kSum: return sum;
    case Aggregation::kMax: return saw_nan ? nan : max;
    case Aggregation::kMin: return saw_nan ? nan : min;
    case Aggregation::kQuantile: return nan;  // kept apart: ClosedWindow::Value
  }
  return nan;
}

}  // namespace torchmon::server

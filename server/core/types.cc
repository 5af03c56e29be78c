#include "server/core/types.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torchmon::server {

const char* AggregationName(Aggregation a) {
  switch (a) {
    case Aggregation::kValue: return "value";
    case Aggregation::kMean: return "mean";
    case Aggregation::kCount: return "count";
    case Aggregation::kSum: return "sum";
    case Aggregation::kMax: return "max";
    case Aggregation::kMin: return "min";
  }
  return "unknown";
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

std::string StatSpec::ToString() const {
  std::vector<const char*> names;
  for (Aggregation a : kAllAggregations) {
    if (Contains(aggregations, a)) names.push_back(AggregationName(a));
  }
  std::string window = window_ms % 1000 == 0 ? absl::StrCat(window_ms / 1000, "s")
                                             : absl::StrCat(window_ms, "ms");
  return absl::StrCat("aggregations=[", absl::StrJoin(names, ","), "] window=", window,
                      " max_samples=",
                      max_samples == 0 ? std::string("unlimited") : absl::StrCat(max_samples));
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
  }
  return nan;
}

}  // namespace torchmon::server

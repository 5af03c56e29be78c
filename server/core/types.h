// Value types of the aggregation core: series identity, stat definitions and
// the running state of one window. No I/O, no protobuf.
#ifndef TORCHMON_SERVER_CORE_TYPES_H_
#define TORCHMON_SERVER_CORE_TYPES_H_

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace torchmon::server {

class NativeHistogram;  // native_histogram.h

// Label pairs sorted by key, keys unique.
using Labels = std::vector<std::pair<std::string, std::string>>;

// The value of label `key` in `labels`, or null where it has none.
const std::string* FindLabel(const Labels& labels, absl::string_view key);

// An immutable Labels value whose copies share one allocation. The
// aggregator interns them, so the thousands of series of one rank hold one
// copy of its identity labels between them instead of one each. Reads like
// a const Labels; an empty set allocates nothing.
//
// Thread-safe: copies may be made, read and destroyed concurrently.
class LabelSet {
 public:
  LabelSet() = default;
  // Implicit: a LabelSet is a Labels value. `labels` must be sorted by key.
  LabelSet(Labels labels)  // NOLINT(google-explicit-constructor)
      : labels_(labels.empty() ? nullptr
                               : std::make_shared<const Labels>(std::move(labels))) {}
  LabelSet(std::initializer_list<Labels::value_type> labels) : LabelSet(Labels(labels)) {}

  const Labels& get() const { return labels_ != nullptr ? *labels_ : EmptyLabels(); }
  Labels::const_iterator begin() const { return get().begin(); }
  Labels::const_iterator end() const { return get().end(); }
  size_t size() const { return get().size(); }
  bool empty() const { return labels_ == nullptr; }

  // How many LabelSets share this one's storage (0 for an empty set).
  long use_count() const { return labels_.use_count(); }

  friend bool operator==(const LabelSet& a, const LabelSet& b) {
    return a.labels_ == b.labels_ || a.get() == b.get();
  }
  friend bool operator!=(const LabelSet& a, const LabelSet& b) { return !(a == b); }
  friend bool operator<(const LabelSet& a, const LabelSet& b) { return a.get() < b.get(); }
  template <typename H>
  friend H AbslHashValue(H h, const LabelSet& l) {
    return H::combine(std::move(h), l.get());
  }

 private:
  static const Labels& EmptyLabels();
  std::shared_ptr<const Labels> labels_;  // null when empty
};

// Aggregations, numbered as torchmon.v1.Aggregation. kQuantile is named
// with its quantile (AggregateRef); a StatSpec lists its quantiles apart
// and never holds it in an AggregationSet.
enum class Aggregation : uint8_t {
  kValue = 1, kMean = 2, kCount = 3, kSum = 4, kMax = 5, kMin = 6, kQuantile = 7
};
// The six of torch.monitor.
inline constexpr Aggregation kAllAggregations[] = {Aggregation::kValue, Aggregation::kMean,
                                                    Aggregation::kCount, Aggregation::kSum,
                                                    Aggregation::kMax,   Aggregation::kMin};

// A set of aggregations as a bit mask (bit n = Aggregation n).
using AggregationSet = uint8_t;
constexpr AggregationSet AggregationBit(Aggregation a) {
  return static_cast<AggregationSet>(1u << static_cast<unsigned>(a));
}
constexpr bool Contains(AggregationSet set, Aggregation a) { return (set & AggregationBit(a)) != 0; }

// Lower-case name: "value", "mean", ..., "quantile".
const char* AggregationName(Aggregation a);

// One aggregation as a query names it: one of the six, or a quantile.
struct AggregateRef {
  Aggregation aggregation = Aggregation::kMean;
  double quantile = 0;  // kQuantile only: in (0, 1)
};

// "mean", or "p99" for the quantile 0.99.
std::string AggregateName(const AggregateRef& ref);

// A series: stat name plus its full label set.
struct SeriesKey {
  std::string stat;
  LabelSet labels;

  friend bool operator==(const SeriesKey& a, const SeriesKey& b) {
    return a.stat == b.stat && a.labels == b.labels;
  }
  friend bool operator<(const SeriesKey& a, const SeriesKey& b) {
    return a.stat != b.stat ? a.stat < b.stat : a.labels < b.labels;
  }
  template <typename H>
  friend H AbslHashValue(H h, const SeriesKey& k) {
    return H::combine(std::move(h), k.stat, k.labels);
  }
  // train.loss{rank="0",job="j"} — for error messages and logs.
  std::string ToString() const;
};

// The quantiles of a StatSpec: sorted, distinct, canonical. A value type
// one pointer wide that allocates nothing when empty: every series holds a
// spec, and most have no quantiles.
class QuantileList {
 public:
  QuantileList() = default;
  // Out of line (types.cc): inlined into a caller, gcc 12 at -O2 and above
  // reports a false -Wfree-nonheap-object on the vector built from an
  // initializer list.
  QuantileList(std::vector<double> quantiles);  // NOLINT(google-explicit-constructor)
  QuantileList(std::initializer_list<double> quantiles);
  QuantileList(const QuantileList& other);
  QuantileList& operator=(const QuantileList& other) {
    if (this != &other) *this = QuantileList(other.get());
    return *this;
  }
  QuantileList(QuantileList&&) = default;
  QuantileList& operator=(QuantileList&&) = default;

  const std::vector<double>& get() const { return list_ != nullptr ? *list_ : Empty(); }
  std::vector<double>::const_iterator begin() const { return get().begin(); }
  std::vector<double>::const_iterator end() const { return get().end(); }
  size_t size() const { return get().size(); }
  bool empty() const { return list_ == nullptr; }
  double operator[](size_t i) const { return get()[i]; }
  friend bool operator==(const QuantileList& a, const QuantileList& b) { return a.get() == b.get(); }

 private:
  static const std::vector<double>& Empty();
  std::unique_ptr<const std::vector<double>> list_;  // null when empty
};

// How a series is aggregated.
struct StatSpec {
  AggregationSet aggregations = 0;
  int64_t window_ms = 0;
  int64_t max_samples = 0;  // 0 = unlimited
  // Quantiles estimated per window: sorted, distinct, each canonical
  // (protocol::CanonicalQuantile), at most protocol::kMaxQuantiles.
  QuantileList quantiles;
  // Whether the series keeps a native histogram of its accepted samples
  // (NativeHistogram); always set when quantiles is not empty.
  bool histogram = false;
  // What the client asked for when the daemon holds another window
  // (v1.StatSpec.requested_window_size_ms); 0: window_ms. Not part of the
  // definition's identity.
  int64_t requested_window_ms = 0;

  friend bool operator==(const StatSpec& a, const StatSpec& b) {
    return a.aggregations == b.aggregations && a.quantiles == b.quantiles &&
           a.window_ms == b.window_ms && a.max_samples == b.max_samples &&
           a.histogram == b.histogram;
  }
  friend bool operator!=(const StatSpec& a, const StatSpec& b) { return !(a == b); }
  // "aggregations=[mean,max,p99] window=1s max_samples=unlimited", and
  // " histogram" when the histogram is asked for without quantiles.
  std::string ToString() const;
  // The names of the aggregations, as the API orders them: the six in
  // Aggregation order, then the quantiles ("p99"), smallest first.
  std::vector<std::string> AggregationNames() const;
  // Whether a series of this spec computes `ref`.
  bool Computes(const AggregateRef& ref) const;
};

// The running aggregates of one window. MIN and MAX follow NaN: once a NaN is
// accepted they report NaN, so a NaN loss cannot hide behind a finite max.
struct WindowStats {
  uint64_t accepted = 0;
  uint64_t capped = 0;
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double last = 0;
  bool saw_nan = false;

  // Accepts `v` unless the window already holds `max_samples` samples
  // (0 = unlimited), in which case it is counted as capped. Returns whether
  // it was accepted.
  bool Add(double v, int64_t max_samples) {
    if (max_samples > 0 && accepted >= static_cast<uint64_t>(max_samples)) {
      ++capped;
      return false;
    }
    ++accepted;
    sum += v;
    last = v;
    if (v != v) {
      saw_nan = true;
    } else {
      if (v < min) min = v;
      if (v > max) max = v;
    }
    return true;
  }

  // The value of one aggregation. Only meaningful when accepted > 0.
  double Get(Aggregation a) const;
};

// A quantile's estimate over one window.
struct QuantileValue {
  double quantile = 0;
  double value = 0;

  friend bool operator==(const QuantileValue& a, const QuantileValue& b) {
    return a.quantile == b.quantile &&
           (a.value == b.value || (a.value != a.value && b.value != b.value));
  }
};

// A closed window as a series keeps it (the series' spec gives the rest:
// end = start + window, aggregations; WindowHistory keeps its quantiles'
// values beside it).
struct WindowRecord {
  int64_t start_ms = 0;
  WindowStats stats;
  // Closed before its end: at shutdown, or because its series was redefined.
  bool partial = false;
  // Which definition of its series it was aggregated under (0 the first,
  // one more at each redefinition; Aggregator::Define). In the padding
  // after `partial`: a record stays 72 bytes.
  uint32_t definition = 0;
};
static_assert(sizeof(WindowRecord) <= 72, "a history record grew: every series keeps up to 120");

// Cumulative accounting of one series. For every series:
// samples sent = accepted + capped + late + skewed + client_dropped.
struct SeriesCounters {
  uint64_t accepted = 0;
  uint64_t capped = 0;
  uint64_t late = 0;
  uint64_t skewed = 0;
  uint64_t client_dropped = 0;

  // Samples sent but not aggregated: capped, late, skewed or client-dropped.
  uint64_t not_aggregated() const { return capped + late + skewed + client_dropped; }
};

// A window that has closed, with everything needed to report it.
struct ClosedWindow {
  std::shared_ptr<const SeriesKey> series;
  AggregationSet aggregations = 0;
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  WindowStats stats;
  // The series' quantiles, smallest first, with their estimates.
  std::vector<QuantileValue> quantiles;
  bool partial = false;
  // WindowRecord::definition.
  uint32_t definition = 0;
  // The series' accounting when the window was read, and when (daemon
  // clock): for the windows Aggregator::CloseDueWindows and CloseAllWindows
  // hand out, as the window closed, so it includes what the series
  // accepted after the window's end, during its grace, and not what came
  // later (counters_ms 0: read by a query, not as the window closed). When
  // the series was created: where its counters started from 0.
  SeriesCounters counters;
  int64_t counters_ms = 0;
  int64_t series_created_ms = 0;
  // The series' histogram at counters_ms: only from CloseDueWindows and
  // CloseAllWindows with AggregatorOptions::histograms_on_close, for a
  // series that keeps one (the push exporters send it); null otherwise.
  std::shared_ptr<const NativeHistogram> histogram;

  // The value of `ref`, or nullopt if the series does not compute it.
  std::optional<double> Value(const AggregateRef& ref) const;
};

// Calls fn(AggregateRef, value) for every aggregate of a window, in the
// order the API lists them: the six in Aggregation order, then the
// quantiles, smallest first.
template <typename Fn>
void ForEachAggregate(AggregationSet aggregations, const WindowStats& stats,
                      const std::vector<QuantileValue>& quantiles, Fn&& fn) {
  for (Aggregation a : kAllAggregations) {
    if (Contains(aggregations, a)) fn(AggregateRef{a, 0}, stats.Get(a));
  }
  for (const QuantileValue& q : quantiles) {
    fn(AggregateRef{Aggregation::kQuantile, q.quantile}, q.value);
  }
}
template <typename Fn>
void ForEachAggregate(const ClosedWindow& window, Fn&& fn) {
  ForEachAggregate(window.aggregations, window.stats, window.quantiles, std::forward<Fn>(fn));
}


}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_TYPES_H_

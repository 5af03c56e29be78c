#include "server/core/rank_comparison.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"

namespace torchmon::server {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Member {
  std::string rank;
  std::shared_ptr<const SeriesKey> series;
};

struct Group {
  std::vector<Member> members;
};

double MedianOfSorted(const std::vector<double>& sorted) {
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
}

// Each rank's ratio and score, the group's MAD and stragglers (the header
// says what they mean); `values` are the non-NaN values, sorted.
void Score(const std::vector<double>& values, RankComparison& c) {
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (double v : values) deviations.push_back(std::fabs(v - c.median));
  std::sort(deviations.begin(), deviations.end());
  c.mad = MedianOfSorted(deviations);
  const double spread =
      std::max(kMadToSigma * c.mad, kSpreadFloorOfMedian * std::fabs(c.median));
  for (RankEntry& r : c.ranks) {
    r.ratio = c.median != 0 ? r.value / c.median : kNaN;
    r.score = spread > 0 ? (r.value - c.median) / spread : kNaN;
    // NaN compares false: a rank without a number is never flagged.
    r.straggler = r.score >= kStragglerScore && r.ratio >= kStragglerRatio;
    if (r.straggler) c.stragglers.push_back(r.rank);  // ranks are sorted largest first
  }
}

}  // namespace

std::vector<RankComparison> CompareRanks(const std::vector<SeriesSnapshot>& series,
                                         const std::vector<ClosedWindow>& windows,
                                         const RankComparisonOptions& options) {
  // Groups, ordered by (stat, shared labels).
  std::map<std::pair<std::string, Labels>, Group> groups;
  for (const SeriesSnapshot& s : series) {
    if (!s.spec.Computes(options.aggregate)) continue;
    const std::string* rank = nullptr;
    Labels shared;
    for (const auto& [key, value] : s.key->labels) {
      if (key == options.rank_label) {
        rank = &value;
      } else if (key != "local_rank" && key != "host") {
        shared.emplace_back(key, value);
      }
    }
    if (rank == nullptr) continue;
    groups[{s.key->stat, std::move(shared)}].members.push_back({*rank, s.key});
  }
  // Each series' windows by start.
  absl::flat_hash_map<SeriesKey, std::vector<const ClosedWindow*>> by_series;
  for (const ClosedWindow& w : windows) by_series[*w.series].push_back(&w);

  std::vector<RankComparison> out;
  for (auto& [group_key, group] : groups) {
    RankComparison c;
    c.stat = group_key.first;
    c.labels = group_key.second;
    c.start_ms = options.window_start_ms;
    if (c.start_ms == 0) {
      bool any = false;
      for (const Member& m : group.members) {
        auto it = by_series.find(*m.series);
        if (it == by_series.end()) continue;
        for (const ClosedWindow* w : it->second) {
          if (!any || w->start_ms > c.start_ms) c.start_ms = w->start_ms;
          any = true;
        }
      }
      if (!any) continue;  // no rank has closed a window yet
    }
    std::vector<double> values;
    for (const Member& m : group.members) {
      const ClosedWindow* found = nullptr;
      if (auto it = by_series.find(*m.series); it != by_series.end()) {
        for (const ClosedWindow* w : it->second) {
          if (w->start_ms == c.start_ms) found = w;
        }
      }
      if (found == nullptr) {
        c.missing.push_back(m.rank);
        continue;
      }
      c.end_ms = found->end_ms;
      const double v =
          found->Value(options.aggregate).value_or(std::numeric_limits<double>::quiet_NaN());
      c.ranks.push_back({m.rank, m.series, v, found->stats.accepted});
      if (!std::isnan(v)) values.push_back(v);
    }
    if (c.ranks.empty()) continue;  // asked for a window no rank has
    std::sort(c.ranks.begin(), c.ranks.end(), [](const RankEntry& a, const RankEntry& b) {
      if (std::isnan(a.value) != std::isnan(b.value)) return std::isnan(b.value);
      if (a.value != b.value) return a.value > b.value;
      return a.rank < b.rank;
    });
    std::sort(c.missing.begin(), c.missing.end());
    std::sort(values.begin(), values.end());
    if (values.empty()) {
      c.min = c.max = c.median = c.max_over_median = c.mad = kNaN;
      for (RankEntry& r : c.ranks) r.ratio = r.score = kNaN;
    } else {
      c.min = values.front();
      c.max = values.back();
      c.median = MedianOfSorted(values);
      c.slowest_rank = c.ranks.front().rank;
      c.max_over_median = c.median != 0 ? c.max / c.median : kNaN;
      Score(values, c);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<RankComparison> CompareRanks(const Aggregator& aggregator, const Selector& selector,
                                         const RankComparisonOptions& options) {
  // Only the windows that can be compared: each series' newest (the newest
  // window of a group is one of them, and a rank without it lacks it), or
  // those from the asked start on; not every series' whole history.
  std::vector<RankComparison> comparisons = CompareRanks(
      aggregator.ListSeries(selector),
      aggregator.GetWindows(selector, options.window_start_ms, 0,
                            options.window_start_ms == 0 ? 1 : 0),
      options);
  if (options.aggregate.aggregation != Aggregation::kQuantile) return comparisons;
  for (RankComparison& c : comparisons) {
    // The quantile of the ranks' samples pooled, which no statistic of the
    // ranks' own quantiles is; from the sketches the aggregator still
    // holds, so absent once a rank moved on or released its sketch.
    std::vector<std::shared_ptr<const SeriesKey>> series;
    series.reserve(c.ranks.size());
    for (const RankEntry& r : c.ranks) series.push_back(r.series);
    c.all_ranks = aggregator.MergedQuantile(series, c.start_ms, options.aggregate.quantile);
  }
  return comparisons;
}

}  // namespace torchmon::server

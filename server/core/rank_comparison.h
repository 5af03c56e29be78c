// Cross-rank comparison of a stat on one daemon (Query.CompareRanks): for
// one window, each rank's value of one aggregation and the spread. Pure: it
// works on copies taken from the aggregator.
#ifndef TORCHMON_SERVER_CORE_RANK_COMPARISON_H_
#define TORCHMON_SERVER_CORE_RANK_COMPARISON_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/core/aggregator.h"
#include "server/core/selector.h"
#include "server/core/types.h"

namespace torchmon::server {

// The straggler score (docs/torch-metrics.md, "Stragglers"): how far a
// rank's value lies above the group's median, in robust standard
// deviations (1.4826 x the median absolute deviation, MAD), with the spread
// taken as at least kSpreadFloorOfMedian of the median, so that ranks alike
// to a few per cent are not told apart by their noise. A rank is a
// straggler in a window when its score is at least kStragglerScore and its
// value at least kStragglerRatio times the median: the same thresholds as
// the shipped TorchmonStraggler alert (deploy/prometheus/rules).
inline constexpr double kMadToSigma = 1.4826;
inline constexpr double kSpreadFloorOfMedian = 0.05;
inline constexpr double kStragglerScore = 3.0;
inline constexpr double kStragglerRatio = 1.2;

// What `ranks` and the live page compare when asked for no stat: each
// step's time outside collective waits (torchmon._torch_metrics), which
// synchronous training does not make equal on every rank.
inline constexpr char kDefaultStragglerStat[] = "torch.dist.compute_s";

struct RankComparisonOptions {
  AggregateRef aggregate;  // mean unless set
  std::string rank_label = "rank";
  int64_t window_start_ms = 0;  // 0: per group, the newest window any rank closed
};

struct RankEntry {
  std::string rank;
  std::shared_ptr<const SeriesKey> series;
  double value = 0;
  uint64_t accepted = 0;
  double ratio = 0;        // value / median (NaN if the median is 0 or NaN)
  double score = 0;        // the straggler score (NaN where it has none)
  bool straggler = false;  // score >= kStragglerScore and ratio >= kStragglerRatio
};

struct RankComparison {
  std::string stat;
  Labels labels;  // shared by the group: series labels without rank, local_rank, host
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  std::vector<RankEntry> ranks;       // largest value first, NaN last
  std::vector<std::string> missing;   // ranks without the window, sorted
  double min = 0, max = 0, median = 0;  // over non-NaN values (NaN if none)
  std::string slowest_rank;           // the rank of `max`
  double max_over_median = 0;         // NaN if median is 0 or NaN
  double mad = 0;                     // median absolute deviation from the median
  std::vector<std::string> stragglers;  // ranks flagged, highest score first
  // For a quantile: that quantile of every listed rank's samples pooled
  // (Aggregator::MergedQuantile); nullopt otherwise or once a rank's
  // sketch of the window is gone.
  std::optional<double> all_ranks;
};

// Groups `series` by stat and shared labels, keeping those with the rank
// label that compute the aggregation, and compares the ranks of each group
// in one window of `windows` (closed windows of those series). Sorted by
// stat, then labels.
std::vector<RankComparison> CompareRanks(const std::vector<SeriesSnapshot>& series,
                                         const std::vector<ClosedWindow>& windows,
                                         const RankComparisonOptions& options);

// The same over what `aggregator` holds now: the series matching
// `selector`, compared in their newest window (or options.window_start_ms),
// with all_ranks filled in for a quantile. Query.CompareRanks and the live
// page's /api/ranks both answer with this.
std::vector<RankComparison> CompareRanks(const Aggregator& aggregator, const Selector& selector,
                                         const RankComparisonOptions& options);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_RANK_COMPARISON_H_

// The live page on the metrics port (docs/live-page.md): GET / is one
// self-contained HTML page (inline script and styles, no network fetches
// but its own) that polls three JSON endpoints of the same server, each
// answer bounded whatever the number of series:
//
//   /api/series?stat=GLOB&label=k=v&sort=drops|recent&limit=N
//       the N (≤ 1000, default 100) matching series that matter most:
//       most samples dropped first, or most recently updated first; with
//       how many matched in all
//   /api/windows?stat=S&label=k=v&last=N&series=M&start=MS
//       the N most recent closed windows (starting at MS or later) of at
//       most M (≤ 64, default 16) series of stat S
//   /api/events?last=N           the N (≤ 1000) most recent events
//   /api/ranks?stat=S[&stat=S2...]&agg=A&rank_label=K&label=k=v&window_start=MS
//       Query.CompareRanks over the HTTP port: per stat group, the ranks'
//       values of aggregation A in their newest window (or the one starting
//       at MS) and the spread
//       (at most 100 groups)
//   /api/accounting?stat=GLOB&label=k=v&limit=N
//       the daemon's totals (accepted, capped, late, skewed, client), and
//       the N (≤ 1000, default 20) matching series with the most samples
//       not aggregated, with how many matching series have any
//
// Windows and events are the objects of the JSON-lines sink
// (server/core/json_lines.h). Thread-safe: reads copies from the aggregator and
// the event log.
#ifndef TORCHMON_SERVER_EXPOSITION_LIVE_PAGE_H_
#define TORCHMON_SERVER_EXPOSITION_LIVE_PAGE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/core/rank_comparison.h"
#include "server/core/selector.h"

namespace torchmon::server {

class LivePage {
 public:
  LivePage(const Aggregator& aggregator, const EventLog& events)
      : aggregator_(aggregator), events_(events) {}

  static absl::string_view Html();
  static constexpr size_t kMaxSeries = 1000;
  static constexpr size_t kMaxChartSeries = 64;
  // {"series":[{"stat","labels","aggregations":[...],"window_ms","counters":{...},
  //  "last_window":<window or null>}],"matched":M}: the `limit` series
  // matching `selector` first in `order`, of M matching.
  std::string SeriesJson(const Selector& selector, size_t limit,
                         Aggregator::SeriesOrder order) const;
  // {"windows":[<window>...]}: the `last` most recent windows of the first
  // `max_series` series (by labels) of the stat named exactly
  // `selector.name` that match its labels, series by series, oldest first.
  // Only windows starting at or after `start_ms` if it is not 0.
  std::string WindowsJson(const Selector& selector, size_t last, size_t max_series,
                          int64_t start_ms = 0) const;
  // {"events":[<event>...]}, oldest first.
  std::string EventsJson(size_t last) const;
  static constexpr size_t kMaxComparisons = 100;
  // {"comparisons":[{"stat","labels","aggregation","start_ms","end_ms",
  //  "ranks":[{"rank","labels","value","accepted"}] (largest first),
  //  "missing","min","max","median","slowest_rank","max_over_median",
  //  "all_ranks" (quantiles only, when known)}],"matched":M}: the first
  // kMaxComparisons of the M comparisons over the series each selector
  // matches, in the order of `selectors`.
  std::string RanksJson(const std::vector<Selector>& selectors,
                        const RankComparisonOptions& options) const;
  // {"totals":{"accepted","capped","late","skewed","client"},
  //  "series":[{"stat","labels","counters","last_update_ms"}...],
  //  "with_drops":D,"matched":M}: the daemon's
  // accounting since it started, and of the M series matching `selector`,
  // the D that have dropped samples, the `limit` with the most first.
  std::string AccountingJson(const Selector& selector, size_t limit) const;

 private:
  const Aggregator& aggregator_;
  const EventLog& events_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_LIVE_PAGE_H_

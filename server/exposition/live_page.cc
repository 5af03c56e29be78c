#include "server/exposition/live_page.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/core/json_lines.h"
#include "server/core/rank_comparison.h"
#include "server/core/selector.h"
#include "torchmon/protocol/json.h"

namespace torchmon::server {
namespace {

using protocol::JsonNumber;
using protocol::JsonString;

std::string CountersJson(const SeriesCounters& c) {
  return absl::StrCat("{\"accepted\":", c.accepted, ",\"capped\":", c.capped,
                      ",\"late\":", c.late, ",\"skewed\":", c.skewed,
                      ",\"client\":", c.client_dropped, "}");
}

std::string SeriesElementJson(const SeriesSnapshot& s) {
  std::vector<std::string> aggregations;
  for (const std::string& name : s.spec.AggregationNames()) {
    aggregations.push_back(JsonString(name));
  }
  return absl::StrCat(
      "{\"stat\":", JsonString(s.key->stat), ",\"labels\":", LabelsJson(s.key->labels.get()),
      ",\"aggregations\":[", absl::StrJoin(aggregations, ","), "],\"window_ms\":",
      s.spec.window_ms, ",\"counters\":", CountersJson(s.counters),
      ",\"last_update_ms\":", s.last_update_ms,
      ",\"last_window\":", s.has_last_window ? WindowJsonLine(s.last_window) : "null", "}");
}

}  // namespace

std::string LivePage::SeriesJson(const Selector& selector, size_t limit,
                                 Aggregator::SeriesOrder order) const {
  std::vector<std::string> elements;
  size_t matched = 0;
  for (const SeriesSnapshot& s :
       aggregator_.TopSeries(selector, std::clamp<size_t>(limit, 1, kMaxSeries), order, &matched)) {
    elements.push_back(SeriesElementJson(s));
  }
  return absl::StrCat("{\"series\":[", absl::StrJoin(elements, ","), "],\"matched\":", matched,
                      "}\n");
}

std::string LivePage::WindowsJson(const Selector& selector, size_t last, size_t max_series,
                                  int64_t start_ms) const {
  const std::string& stat = selector.name;
  const Aggregator::WindowFilter filter{start_ms, 0, std::clamp<size_t>(last, 1, 1000)};
  max_series = std::clamp<size_t>(max_series, 1, kMaxChartSeries);
  std::vector<std::string> elements;
  size_t series = 0;
  std::shared_ptr<const SeriesKey> previous;
  std::optional<Aggregator::WindowCursor> from;
  // Chunk by chunk, in key order, until max_series series had windows.
  do {
    Aggregator::WindowsChunk chunk =
        aggregator_.GetWindowsChunk(selector, filter, from ? &*from : nullptr, 1000);
    for (const ClosedWindow& w : chunk.windows) {
      if (w.series->stat != stat) continue;  // the name, not a glob
      if (previous == nullptr || !(*w.series == *previous)) {
        if (++series > max_series) {
          return absl::StrCat("{\"windows\":[", absl::StrJoin(elements, ","), "]}\n");
        }
        previous = w.series;
      }
      elements.push_back(WindowJsonLine(w));
    }
    from = std::move(chunk.resume);
  } while (from.has_value());
  return absl::StrCat("{\"windows\":[", absl::StrJoin(elements, ","), "]}\n");
}

std::string LivePage::EventsJson(size_t last) const {
  std::vector<std::string> elements;
  for (const EventRecord& e : events_.Get(Selector{}, 0, last)) {
    elements.push_back(EventJsonLine(e));
  }
  return absl::StrCat("{\"events\":[", absl::StrJoin(elements, ","), "]}\n");
}

std::string LivePage::RanksJson(const std::vector<Selector>& selectors,
                               const RankComparisonOptions& options) const {
  std::vector<std::string> elements;
  size_t matched = 0;
  const std::string aggregation = JsonString(AggregateName(options.aggregate));
  for (const Selector& selector : selectors) {
    for (const RankComparison& c : CompareRanks(aggregator_, selector, options)) {
      if (++matched > kMaxComparisons) continue;
      std::vector<std::string> ranks;
      for (const RankEntry& r : c.ranks) {
        ranks.push_back(absl::StrCat("{\"rank\":", JsonString(r.rank),
                                     ",\"labels\":", LabelsJson(r.series->labels.get()),
                                     ",\"value\":", JsonNumber(r.value),
                                     ",\"accepted\":", r.accepted,
                                     ",\"ratio\":", JsonNumber(r.ratio),
                                     ",\"score\":", JsonNumber(r.score),
                                     ",\"straggler\":", r.straggler ? "true" : "false", "}"));
      }
      std::vector<std::string> missing;
      for (const std::string& m : c.missing) missing.push_back(JsonString(m));
      std::vector<std::string> stragglers;
      for (const std::string& s : c.stragglers) stragglers.push_back(JsonString(s));
      elements.push_back(absl::StrCat(
          "{\"stat\":", JsonString(c.stat), ",\"labels\":", LabelsJson(c.labels),
          ",\"aggregation\":", aggregation, ",\"start_ms\":", c.start_ms,
          ",\"end_ms\":", c.end_ms, ",\"ranks\":[", absl::StrJoin(ranks, ","),
          "],\"missing\":[", absl::StrJoin(missing, ","), "],\"min\":", JsonNumber(c.min),
          ",\"max\":", JsonNumber(c.max), ",\"median\":", JsonNumber(c.median),
          ",\"slowest_rank\":", JsonString(c.slowest_rank),
          ",\"max_over_median\":", JsonNumber(c.max_over_median),
          ",\"mad\":", JsonNumber(c.mad), ",\"stragglers\":[", absl::StrJoin(stragglers, ","), "]",
          c.all_ranks.has_value() ? absl::StrCat(",\"all_ranks\":", JsonNumber(*c.all_ranks))
                                  : "",
          "}"));
    }
  }
  return absl::StrCat("{\"comparisons\":[", absl::StrJoin(elements, ","),
                      "],\"matched\":", matched, "}\n");
}

std::string LivePage::AccountingJson(const Selector& selector, size_t limit) const {
  // Most drops first: the series with drops come before every one without.
  size_t matched = 0, with_drops = 0;
  std::vector<SeriesSnapshot> top =
      aggregator_.TopSeries(selector, std::clamp<size_t>(limit, 1, kMaxSeries),
                            Aggregator::SeriesOrder::kMostDropsFirst, &matched, &with_drops);
  std::vector<std::string> elements;
  for (const SeriesSnapshot& s : top) {
    if (s.counters.not_aggregated() == 0) break;
    elements.push_back(absl::StrCat("{\"stat\":", JsonString(s.key->stat),
                                    ",\"labels\":", LabelsJson(s.key->labels.get()),
                                    ",\"counters\":", CountersJson(s.counters),
                                    ",\"last_update_ms\":", s.last_update_ms, "}"));
  }
  return absl::StrCat("{\"totals\":", CountersJson(aggregator_.totals()),
                      ",\"series\":[", absl::StrJoin(elements, ","),
                      "],\"with_drops\":", with_drops, ",\"matched\":", matched, "}\n");
}

}  // namespace torchmon::server

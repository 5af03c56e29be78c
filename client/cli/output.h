// What torchmonctl prints: aligned tables for people, JSON for scripts. The
// JSON schema of every command is documented in docs/cli.md; a change here
// is a change of that contract.
//
// Pure functions of their arguments, except that local times use the process
// time zone (TZ). Safe to call from any thread.
#ifndef TORCHMON_CLI_OUTPUT_H_
#define TORCHMON_CLI_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "cli/table.h"
#include "torchmon/protocol/json.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::cli {

// "2024-05-01T12:00:10.250+02:00": local time, millisecond precision, offset.
std::string FormatLocalTime(int64_t unix_ms);

// printf's %g, except that non-finite values print as NaN, +Inf and -Inf.
std::string FormatNumber(double value);

// "k=v,k=v" sorted by key; "-" for no labels.
std::string FormatLabels(const google::protobuf::Map<std::string, std::string>& labels);

// JSON strings and numbers, shared with the daemon's JSON-lines sink.
using protocol::JsonNumber;
using protocol::JsonString;

// series
Table SeriesTable(const v1::ListSeriesResponse& response);
std::vector<std::string> SeriesJsonElements(const v1::ListSeriesResponse& response);

// windows
Table WindowsTable(const v1::GetWindowsResponse& response);
std::vector<std::string> WindowsJsonElements(const v1::GetWindowsResponse& response);

// ranks: `aggregation` names the value column.
std::string RenderRanksTable(const v1::CompareRanksResponse& response, const protocol::NamedAggregation& aggregation);
std::string RenderRanksJson(const v1::CompareRanksResponse& response, const protocol::NamedAggregation& aggregation);

// top: one refresh. `drops` are the series that dropped samples since the
// previous refresh (counts of that interval).
struct SeriesDrops {
  v1::SeriesKey series;
  uint64_t capped = 0, late = 0, skewed = 0, client = 0;
};
// The comparisons, widest spread (max/median) first; NaN spreads last.
std::vector<const v1::RankComparison*> WidestSpreadsFirst(const v1::CompareRanksResponse& ranks);
std::string RenderTopTable(int64_t now_ms, const v1::CompareRanksResponse& ranks,
                           const protocol::NamedAggregation& aggregation, const std::vector<SeriesDrops>& drops);
std::string RenderTopJsonLine(int64_t now_ms, const v1::CompareRanksResponse& ranks,
                              const protocol::NamedAggregation& aggregation, const std::vector<SeriesDrops>& drops);

// events
Table EventsTable(const v1::GetEventsResponse& response);
std::vector<std::string> EventsJsonElements(const v1::GetEventsResponse& response);

// watch: one line per window, ending in '\n'.
std::string RenderWindowLine(const v1::WindowSummary& window);
std::string RenderWindowJsonLine(const v1::WindowSummary& window);

}  // namespace torchmon::cli

#endif  // TORCHMON_CLI_OUTPUT_H_

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
#include "torchmon/protocol/json.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::cli {

// Columns separated by two spaces, each as wide as its widest cell (counted
// in code points); no trailing spaces. Control characters in cells are
// escaped so a row always stays on one line.
class Table {
 public:
  struct Column {
    std::string header;
    bool align_right = false;
  };

  explicit Table(std::vector<Column> columns);

  // A row with fewer cells than columns is padded with empty cells.
  void AddRow(std::vector<std::string> cells);

  // The header line and every row, each ending in '\n'.
  std::string Render() const;
  // The rows (after the header line if `header`), each column at least
  // widths[c] wide; widths grows to what this table needs, so that the
  // pages of one answer line up.
  std::string RenderPage(std::vector<size_t>& widths, bool header) const;
  bool empty() const { return rows_.empty(); }
  std::vector<std::string> Headers() const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// A paged answer printed as its pages arrive. With JSON, one document whose
// array continues from page to page; as a table, the columns keep their
// widths (growing when a page needs it) and the header is repeated only when
// a page's columns differ (a windows page with other aggregations).
class PagedOutput {
 public:
  // `json_key` names the document's array ("series").
  PagedOutput(bool json, std::string json_key);
  // The text to print for one page: its table, or its JSON elements.
  std::string Page(const Table& table, const std::vector<std::string>& json_elements);
  // The text to print after the last page.
  std::string End() const;

 private:
  const bool json_;
  const std::string json_key_;
  size_t elements_ = 0;
  bool first_page_ = true;
  std::vector<std::string> headers_;
  std::vector<size_t> widths_;
};

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

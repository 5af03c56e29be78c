#include "cli/output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::cli {
namespace {

std::vector<std::pair<std::string, std::string>> SortedLabels(
    const google::protobuf::Map<std::string, std::string>& labels) {
  std::vector<std::pair<std::string, std::string>> sorted(labels.begin(), labels.end());
  std::sort(sorted.begin(), sorted.end());
  return sorted;
}

std::string JsonLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  const auto sorted = SortedLabels(labels);
  return protocol::JsonLabels({sorted.begin(), sorted.end()});
}

std::string JsonBool(bool b) { return b ? "true" : "false"; }

// "mean", "p99".
std::string AggregateName(const v1::AggregateValue& aggregate) {
  return protocol::AggregationName(
      protocol::NamedAggregation{aggregate.aggregation(), aggregate.quantile()});
}

// The aggregations of a spec, quantiles last: "mean", "max", "p99".
std::vector<std::string> SpecAggregationNames(const v1::StatSpec& spec) {
  std::vector<std::string> names;
  for (int aggregation : spec.aggregations()) {
    names.emplace_back(protocol::AggregationName(protocol::AggregationAs<v1::Aggregation>(aggregation)));
  }
  for (double q : spec.quantiles()) names.push_back(protocol::QuantileName(q));
  return names;
}

std::string AggregateList(const v1::WindowSummary& window) {
  std::vector<std::string> parts;
  for (const v1::AggregateValue& aggregate : window.aggregates()) {
    parts.push_back(absl::StrCat(AggregateName(aggregate), "=",
                                 FormatNumber(aggregate.value())));
  }
  return absl::StrJoin(parts, " ");
}

// "10ms", or "10ms (asked 1ms)" where the daemon holds another window than
// the one asked for.
std::string WindowText(const v1::StatSpec& spec) {
  std::string text = protocol::FormatDurationMs(spec.window_size_ms());
  if (spec.requested_window_size_ms() != 0 &&
      spec.requested_window_size_ms() != spec.window_size_ms()) {
    absl::StrAppend(&text, " (asked ", protocol::FormatDurationMs(spec.requested_window_size_ms()),
                    ")");
  }
  return text;
}

std::string WindowJson(const v1::WindowSummary& window) {
  protocol::WindowJsonFields fields;
  fields.stat = window.series().stat();
  const auto labels = SortedLabels(window.series().labels());
  fields.labels.assign(labels.begin(), labels.end());
  fields.start_ms = window.start_ms();
  fields.end_ms = window.end_ms();
  fields.partial = window.partial();
  fields.definition = window.definition();
  fields.accepted = window.accepted();
  fields.capped = window.capped();
  for (const v1::AggregateValue& aggregate : window.aggregates()) {
    fields.aggregates.emplace_back(AggregateName(aggregate), aggregate.value());
  }
  return protocol::WindowJson(fields, /*as_record=*/false);
}

// Joins JSON values as the elements of `{"<key>":[...]}`, one per line.
std::string JsonDocument(absl::string_view key, const std::vector<std::string>& elements) {
  if (elements.empty()) return absl::StrCat("{", JsonString(key), ":[]}\n");
  return absl::StrCat("{", JsonString(key), ":[\n", absl::StrJoin(elements, ",\n"), "\n]}\n");
}

// An event value as text; `number` formats doubles (table or JSON style).
std::string EventValueString(const v1::EventValue& value, std::string (*number)(double)) {
  switch (value.kind_case()) {
    case v1::EventValue::kStringValue:
      return JsonString(value.string_value());
    case v1::EventValue::kDoubleValue:
      return number(value.double_value());
    case v1::EventValue::kIntValue:
      return absl::StrCat(value.int_value());
    case v1::EventValue::kBoolValue:
      return JsonBool(value.bool_value());
    case v1::EventValue::KIND_NOT_SET:
      break;
  }
  return "null";
}

absl::string_view EventValueType(const v1::EventValue& value) {
  switch (value.kind_case()) {
    case v1::EventValue::kStringValue:
      return "string";
    case v1::EventValue::kDoubleValue:
      return "double";
    case v1::EventValue::kIntValue:
      return "int";
    case v1::EventValue::kBoolValue:
      return "bool";
    case v1::EventValue::KIND_NOT_SET:
      break;
  }
  return "null";
}

template <typename Value>
std::vector<std::pair<std::string, const Value*>> SortedByKey(
    const google::protobuf::Map<std::string, Value>& map) {
  std::vector<std::pair<std::string, const Value*>> sorted;
  for (const auto& [key, value] : map) sorted.emplace_back(key, &value);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  return sorted;
}

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

}  // namespace

std::string FormatLocalTime(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(FloorDiv(unix_ms, 1000));
  const int millis = static_cast<int>(unix_ms - FloorDiv(unix_ms, 1000) * 1000);
  std::tm tm{};
  if (localtime_r(&seconds, &tm) == nullptr) return absl::StrCat(unix_ms, "ms");
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
  const long offset = tm.tm_gmtoff;
  const long offset_abs = offset < 0 ? -offset : offset;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s.%03d%c%02ld:%02ld", date, millis, offset < 0 ? '-' : '+',
                offset_abs / 3600, (offset_abs % 3600) / 60);
  return buf;
}

std::string FormatNumber(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

std::string FormatLabels(const google::protobuf::Map<std::string, std::string>& labels) {
  if (labels.empty()) return "-";
  std::vector<std::string> parts;
  for (const auto& [key, value] : SortedLabels(labels))
    parts.push_back(absl::StrCat(key, "=", value));
  return absl::StrJoin(parts, ",");
}

Table SeriesTable(const v1::ListSeriesResponse& response) {
  Table table({{"STAT"},
               {"LABELS"},
               {"AGGS"},
               {"WINDOW", true},
               {"MAX_SAMPLES", true},
               {"ACCEPTED", true},
               {"CAPPED", true},
               {"LATE", true},
               {"SKEWED", true},
               {"CLIENT_DROPPED", true},
               {"LAST_WINDOW"}});
  for (const v1::SeriesInfo& info : response.series()) {
    const std::vector<std::string> aggregations = SpecAggregationNames(info.spec());
    const v1::SeriesCounters& counters = info.counters();
    std::string last_window = "-";
    if (info.has_last_window()) {
      last_window = absl::StrCat(FormatLocalTime(info.last_window().end_ms()), " ",
                                 AggregateList(info.last_window()));
    }
    table.AddRow(
        {info.series().stat(), FormatLabels(info.series().labels()),
         absl::StrJoin(aggregations, ","), WindowText(info.spec()),
         info.spec().max_samples() == 0 ? "unlimited" : absl::StrCat(info.spec().max_samples()),
         absl::StrCat(counters.accepted()), absl::StrCat(counters.capped()),
         absl::StrCat(counters.late()), absl::StrCat(counters.skewed()),
         absl::StrCat(counters.client_dropped()), last_window});
  }
  return table;
}

std::vector<std::string> SeriesJsonElements(const v1::ListSeriesResponse& response) {
  std::vector<std::string> elements;
  for (const v1::SeriesInfo& info : response.series()) {
    std::vector<std::string> aggregations;
    for (const std::string& name : SpecAggregationNames(info.spec())) {
      aggregations.push_back(JsonString(name));
    }
    const v1::SeriesCounters& counters = info.counters();
    elements.push_back(absl::StrCat(
        "{\"stat\":", JsonString(info.series().stat()),
        ",\"labels\":", JsonLabels(info.series().labels()), ",\"aggregations\":[",
        absl::StrJoin(aggregations, ","), "],\"window_ms\":", info.spec().window_size_ms(),
        ",\"requested_window_ms\":",
        info.spec().requested_window_size_ms() != 0 ? info.spec().requested_window_size_ms()
                                                    : info.spec().window_size_ms(),
        ",\"max_samples\":", info.spec().max_samples(),
        ",\"histogram\":", info.spec().histogram() ? "true" : "false",
        ",\"counters\":{\"accepted\":", counters.accepted(), ",\"capped\":", counters.capped(),
        ",\"late\":", counters.late(), ",\"skewed\":", counters.skewed(), ",\"client_dropped\":",
        counters.client_dropped(), "},\"definition\":", info.definition(),
        ",\"defined_ms\":", info.defined_ms(), ",\"last_update_ms\":", info.last_update_ms(),
        ",\"last_window\":", info.has_last_window() ? WindowJson(info.last_window()) : "null",
        "}"));
  }
  return elements;
}

Table WindowsTable(const v1::GetWindowsResponse& response) {
  // One column per aggregation present in any window, in Aggregation order,
  // then the quantiles, smallest first.
  std::set<std::pair<int, double>> present;
  for (const v1::WindowSummary& window : response.windows()) {
    for (const v1::AggregateValue& aggregate : window.aggregates()) {
      present.emplace(aggregate.aggregation(), aggregate.quantile());
    }
  }
  std::vector<Table::Column> columns = {{"STAT"}, {"LABELS"}, {"START"}, {"END"}};
  for (const auto& [aggregation, quantile] : present) {
    columns.push_back({absl::AsciiStrToUpper(protocol::AggregationName(protocol::NamedAggregation{
                           protocol::AggregationAs<v1::Aggregation>(aggregation), quantile})),
                       true});
  }
  columns.push_back({"ACCEPTED", true});
  columns.push_back({"CAPPED", true});
  columns.push_back({"PARTIAL"});
  Table table(std::move(columns));
  for (const v1::WindowSummary& window : response.windows()) {
    std::vector<std::string> row = {window.series().stat(), FormatLabels(window.series().labels()),
                                    FormatLocalTime(window.start_ms()),
                                    FormatLocalTime(window.end_ms())};
    for (const auto& [aggregation, quantile] : present) {
      std::string cell = "-";
      for (const v1::AggregateValue& aggregate : window.aggregates()) {
        if (aggregate.aggregation() == aggregation && aggregate.quantile() == quantile) {
          cell = FormatNumber(aggregate.value());
        }
      }
      row.push_back(cell);
    }
    row.push_back(absl::StrCat(window.accepted()));
    row.push_back(absl::StrCat(window.capped()));
    row.push_back(window.partial() ? "yes" : "no");
    table.AddRow(std::move(row));
  }
  return table;
}

std::vector<std::string> WindowsJsonElements(const v1::GetWindowsResponse& response) {
  std::vector<std::string> elements;
  for (const v1::WindowSummary& window : response.windows()) elements.push_back(WindowJson(window));
  return elements;
}

std::string RenderRanksTable(const v1::CompareRanksResponse& response,
                             const protocol::NamedAggregation& aggregation) {
  if (response.comparisons().empty()) {
    return "no ranks to compare: no matching series with a rank label and a closed window\n";
  }
  const std::string agg = protocol::AggregationName(aggregation);
  std::string out;
  for (const v1::RankComparison& c : response.comparisons()) {
    if (!out.empty()) out += "\n";
    absl::StrAppend(&out, c.stat(), " ", FormatLabels(c.labels()), "  ", agg, " of the window ",
                    FormatLocalTime(c.start_ms()), " - ", FormatLocalTime(c.end_ms()), "\n");
    if (!c.slowest_rank().empty()) {
      absl::StrAppend(&out, "slowest rank ", c.slowest_rank(), ": ", FormatNumber(c.max()),
                      "  median ", FormatNumber(c.median()), "  max/median ",
                      FormatNumber(c.max_over_median()), "  min ", FormatNumber(c.min()), "\n");
    }
    if (c.has_all_ranks()) {
      absl::StrAppend(&out, "all ranks ", agg, ": ", FormatNumber(c.all_ranks()), "\n");
    }
    if (!c.stragglers().empty()) {
      absl::StrAppend(&out, "stragglers: rank", c.stragglers_size() > 1 ? "s " : " ",
                      absl::StrJoin(c.stragglers(), ", "), "\n");
    }
    if (!c.missing_ranks().empty()) {
      absl::StrAppend(&out, "missing this window: ranks ", absl::StrJoin(c.missing_ranks(), ", "),
                      "\n");
    }
    Table table({{"RANK"},
                 {"HOST"},
                 {absl::AsciiStrToUpper(agg), true},
                 {"/MEDIAN", true},
                 {"SCORE", true},
                 {"ACCEPTED", true},
                 {""}});
    for (const v1::RankValue& r : c.ranks()) {
      const auto host = r.series().labels().find("host");
      table.AddRow({r.rank(), host == r.series().labels().end() ? "-" : host->second,
                    FormatNumber(r.value()), FormatNumber(r.ratio()), FormatNumber(r.score()),
                    absl::StrCat(r.accepted()), r.straggler() ? "straggler" : ""});
    }
    out += table.Render();
  }
  return out;
}

namespace {

// One comparison of ranks/top --json.
std::string RankComparisonJson(const v1::RankComparison& c, const protocol::NamedAggregation& aggregation) {
  std::vector<std::string> ranks;
  for (const v1::RankValue& r : c.ranks()) {
    ranks.push_back(absl::StrCat("{\"rank\":", JsonString(r.rank()),
                                 ",\"labels\":", JsonLabels(r.series().labels()),
                                 ",\"value\":", JsonNumber(r.value()),
                                 ",\"accepted\":", r.accepted(),
                                 ",\"ratio\":", JsonNumber(r.ratio()),
                                 ",\"score\":", JsonNumber(r.score()),
                                 ",\"straggler\":", r.straggler() ? "true" : "false", "}"));
  }
  std::vector<std::string> missing;
  for (const std::string& m : c.missing_ranks()) missing.push_back(JsonString(m));
  std::vector<std::string> stragglers;
  for (const std::string& s : c.stragglers()) stragglers.push_back(JsonString(s));
  return absl::StrCat(
      "{\"stat\":", JsonString(c.stat()), ",\"labels\":", JsonLabels(c.labels()),
      ",\"aggregation\":", JsonString(protocol::AggregationName(aggregation)),
      ",\"start_ms\":", c.start_ms(), ",\"end_ms\":", c.end_ms(), ",\"ranks\":[",
      absl::StrJoin(ranks, ","), "],\"missing_ranks\":[", absl::StrJoin(missing, ","),
      "],\"min\":", JsonNumber(c.min()), ",\"max\":", JsonNumber(c.max()),
      ",\"median\":", JsonNumber(c.median()), ",\"slowest_rank\":", JsonString(c.slowest_rank()),
      ",\"max_over_median\":", JsonNumber(c.max_over_median()),
      ",\"mad\":", JsonNumber(c.mad()), ",\"stragglers\":[", absl::StrJoin(stragglers, ","), "]",
      ",\"all_ranks\":", c.has_all_ranks() ? JsonNumber(c.all_ranks()) : "null", "}");
}

}  // namespace

std::string RenderRanksJson(const v1::CompareRanksResponse& response,
                            const protocol::NamedAggregation& aggregation) {
  std::vector<std::string> elements;
  for (const v1::RankComparison& c : response.comparisons()) {
    elements.push_back(RankComparisonJson(c, aggregation));
  }
  return JsonDocument("comparisons", elements);
}

std::vector<const v1::RankComparison*> WidestSpreadsFirst(const v1::CompareRanksResponse& ranks) {
  std::vector<const v1::RankComparison*> sorted;
  for (const v1::RankComparison& c : ranks.comparisons()) sorted.push_back(&c);
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) {
    const double x = a->max_over_median(), y = b->max_over_median();
    if (std::isnan(x) != std::isnan(y)) return std::isnan(y);
    return x > y;
  });
  return sorted;
}

std::string RenderTopTable(int64_t now_ms, const v1::CompareRanksResponse& ranks,
                           const protocol::NamedAggregation& aggregation, const std::vector<SeriesDrops>& drops) {
  constexpr size_t kRows = 20;
  const std::string agg = protocol::AggregationName(aggregation);
  std::string out = absl::StrCat("torchmon top  ", FormatLocalTime(now_ms), "\n\n",
                                 "Rank spread (", agg, " of each stat's newest window)\n");
  Table spread({{"STAT"}, {"LABELS"}, {"SLOWEST"}, {absl::AsciiStrToUpper(agg), true},
                {"MEDIAN", true}, {"MAX/MEDIAN", true}, {"RANKS", true}, {"MISSING"}});
  const auto sorted = WidestSpreadsFirst(ranks);
  for (size_t i = 0; i < sorted.size() && i < kRows; ++i) {
    const v1::RankComparison& c = *sorted[i];
    spread.AddRow({c.stat(), FormatLabels(c.labels()),
                   c.slowest_rank().empty() ? "-" : c.slowest_rank(), FormatNumber(c.max()),
                   FormatNumber(c.median()), FormatNumber(c.max_over_median()),
                   absl::StrCat(c.ranks_size()),
                   c.missing_ranks().empty() ? "-" : absl::StrJoin(c.missing_ranks(), ",")});
  }
  out += sorted.empty() ? "  (no stat with a rank label and a closed window)\n" : spread.Render();
  if (sorted.size() > kRows) absl::StrAppend(&out, "  ... ", sorted.size() - kRows, " more\n");
  out += "\nDropped samples since the last refresh\n";
  if (drops.empty()) return out + "  (none)\n";
  Table dropped({{"STAT"}, {"LABELS"}, {"CAPPED", true}, {"LATE", true}, {"SKEWED", true},
                 {"CLIENT", true}});
  for (const SeriesDrops& d : drops) {
    dropped.AddRow({d.series.stat(), FormatLabels(d.series.labels()), absl::StrCat(d.capped),
                    absl::StrCat(d.late), absl::StrCat(d.skewed), absl::StrCat(d.client)});
  }
  return out + dropped.Render();
}

std::string RenderTopJsonLine(int64_t now_ms, const v1::CompareRanksResponse& ranks,
                              const protocol::NamedAggregation& aggregation, const std::vector<SeriesDrops>& drops) {
  std::vector<std::string> comparisons;
  for (const v1::RankComparison* c : WidestSpreadsFirst(ranks)) {
    comparisons.push_back(RankComparisonJson(*c, aggregation));
  }
  std::vector<std::string> elements;
  for (const SeriesDrops& d : drops) {
    elements.push_back(absl::StrCat("{\"stat\":", JsonString(d.series.stat()),
                                    ",\"labels\":", JsonLabels(d.series.labels()),
                                    ",\"capped\":", d.capped, ",\"late\":", d.late,
                                    ",\"skewed\":", d.skewed, ",\"client\":", d.client, "}"));
  }
  return absl::StrCat("{\"time_ms\":", now_ms, ",\"comparisons\":[",
                      absl::StrJoin(comparisons, ","), "],\"drops\":[",
                      absl::StrJoin(elements, ","), "]}\n");
}

Table EventsTable(const v1::GetEventsResponse& response) {
  Table table({{"SEQ", true}, {"TIME"}, {"NAME"}, {"LABELS"}, {"DATA"}});
  for (const v1::Event& event : response.events()) {
    std::vector<std::string> data;
    for (const auto& [key, value] : SortedByKey(event.data())) {
      data.push_back(absl::StrCat(key, "=", EventValueString(*value, FormatNumber)));
    }
    table.AddRow({absl::StrCat(event.sequence()),
                  FormatLocalTime(FloorDiv(event.timestamp_us(), 1000)), event.name(),
                  FormatLabels(event.labels()), data.empty() ? "-" : absl::StrJoin(data, " ")});
  }
  return table;
}

std::vector<std::string> EventsJsonElements(const v1::GetEventsResponse& response) {
  std::vector<std::string> elements;
  for (const v1::Event& event : response.events()) {
    std::string data = "{";
    std::string types = "{";
    bool first = true;
    for (const auto& [key, value] : SortedByKey(event.data())) {
      const char* separator = first ? "" : ",";
      absl::StrAppend(&data, separator, JsonString(key), ":", EventValueString(*value, JsonNumber));
      absl::StrAppend(&types, separator, JsonString(key), ":", JsonString(EventValueType(*value)));
      first = false;
    }
    data += "}";
    types += "}";
    elements.push_back(absl::StrCat(
        "{\"sequence\":", event.sequence(), ",\"name\":", JsonString(event.name()),
        ",\"timestamp_us\":", event.timestamp_us(), ",\"labels\":", JsonLabels(event.labels()),
        ",\"data\":", data, ",\"data_types\":", types, "}"));
  }
  return elements;
}

std::string RenderWindowLine(const v1::WindowSummary& window) {
  return absl::StrCat(
      Printable(absl::StrCat(FormatLocalTime(window.end_ms()), "  ", window.series().stat(), "  ",
                             FormatLabels(window.series().labels()), "  ", AggregateList(window),
                             "  accepted=", window.accepted(), " capped=", window.capped(),
                             window.partial() ? " partial" : "")),
      "\n");
}

std::string RenderWindowJsonLine(const v1::WindowSummary& window) {
  return absl::StrCat(WindowJson(window), "\n");
}

}  // namespace torchmon::cli

#include "server/core/json_lines.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torchmon/protocol/json.h"

namespace torchmon::server {
namespace {

using protocol::JsonNumber;
using protocol::JsonString;

// Microsecond precision for events.
std::string Rfc3339Us(int64_t unix_us) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixMicros(unix_us),
                          absl::UTCTimeZone());
}

}  // namespace

std::string LabelsJson(const Labels& labels) {
  std::vector<std::pair<absl::string_view, absl::string_view>> views(labels.begin(), labels.end());
  return protocol::JsonLabels(views);
}

std::string WindowJsonLine(const ClosedWindow& window) {
  protocol::WindowJsonFields fields;
  fields.stat = window.series->stat;
  const Labels& labels = window.series->labels.get();
  fields.labels.assign(labels.begin(), labels.end());
  fields.start_ms = window.start_ms;
  fields.end_ms = window.end_ms;
  fields.partial = window.partial;
  fields.definition = window.definition;
  fields.accepted = window.stats.accepted;
  fields.capped = window.stats.capped;
  ForEachAggregate(window, [&fields](const AggregateRef& ref, double value) {
    fields.aggregates.emplace_back(AggregateName(ref), value);
  });
  return protocol::WindowJson(fields, /*as_record=*/true);
}

std::string EventJsonLine(const EventRecord& event) {
  // data_types, as torchmonctl events --json writes it, tells an int 3 from
  // a double 3 and the string "NaN" from a NaN double.
  std::string data = "{", types = "{";
  for (const auto& [key, value] : event.data) {
    const char* separator = data.size() > 1 ? "," : "";
    absl::StrAppend(&data, separator, JsonString(key), ":");
    absl::StrAppend(&types, separator, JsonString(key), ":");
    if (const auto* s = std::get_if<std::string>(&value)) {
      data += JsonString(*s);
      types += "\"string\"";
    } else if (const auto* d = std::get_if<double>(&value)) {
      data += JsonNumber(*d);
      types += "\"double\"";
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      absl::StrAppend(&data, *i);
      types += "\"int\"";
    } else {
      data += std::get<bool>(value) ? "true" : "false";
      types += "\"bool\"";
    }
  }
  data += "}";
  types += "}";
  return absl::StrCat("{\"type\":\"event\",\"name\":", JsonString(event.name),
                      ",\"labels\":", LabelsJson(event.labels),
                      ",\"timestamp_us\":", event.timestamp_us, ",\"timestamp\":\"",
                      Rfc3339Us(event.timestamp_us), "\",\"sequence\":", event.sequence,
                      ",\"data\":", data, ",\"data_types\":", types, "}");
}

}  // namespace torchmon::server

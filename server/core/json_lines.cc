#include "server/core/json_lines.h"

#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torchmon/protocol/json.h"

namespace torchmon::server {
namespace {

using protocol::JsonNumber;
using protocol::JsonString;

// "2026-11-22T18:04:05.123Z" (RFC 3339, UTC, millisecond precision).
std::string Rfc3339Ms(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

// Microsecond precision for events.
std::string Rfc3339Us(int64_t unix_us) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::FromUnixMicros(unix_us),
                          absl::UTCTimeZone());
}

}  // namespace

std::string LabelsJson(const Labels& labels) {
  std::string out = "{";
  for (const auto& [key, value] : labels) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", JsonString(key), ":", JsonString(value));
  }
  return out + "}";
}

std::string WindowJsonLine(const ClosedWindow& window) {
  std::string aggregates = "{";
  ForEachAggregate(window, [&aggregates](const AggregateRef& ref, double value) {
    absl::StrAppend(&aggregates, aggregates.size() > 1 ? "," : "", "\"", AggregateName(ref),
                    "\":", JsonNumber(value));
  });
  aggregates += "}";
  return absl::StrCat(
      "{\"type\":\"window\",\"stat\":", JsonString(window.series->stat),
      ",\"labels\":", LabelsJson(window.series->labels.get()), ",\"start_ms\":", window.start_ms,
      ",\"end_ms\":", window.end_ms, ",\"start\":\"", Rfc3339Ms(window.start_ms), "\",\"end\":\"",
      Rfc3339Ms(window.end_ms), "\",\"partial\":", window.partial ? "true" : "false",
      ",\"accepted\":", window.stats.accepted, ",\"capped\":", window.stats.capped,
      ",\"aggregates\":", aggregates, "}");
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

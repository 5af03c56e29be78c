// JSON text for torchmon's machine-readable outputs (torchmonctl --json, the
// daemon's JSON-lines sink), so that both write strings and numbers alike.
#ifndef TORCHMON_PROTOCOL_JSON_H_
#define TORCHMON_PROTOCOL_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace torchmon::protocol {

// `s` as a JSON string literal. Invalid UTF-8 bytes become U+FFFD.
std::string JsonString(absl::string_view s);

// The shortest decimal that reads back as `value`; NaN and ±Inf, which JSON
// cannot express as numbers, become the strings "NaN", "+Inf" and "-Inf".
std::string JsonNumber(double value);

// `labels` as a JSON object, keys in the order given: {"k":"v",...}.
std::string JsonLabels(const std::vector<std::pair<absl::string_view, absl::string_view>>& labels);

// What a window's JSON says, whoever holds the window (the daemon's
// ClosedWindow, the API's WindowSummary).
struct WindowJsonFields {
  absl::string_view stat;
  std::vector<std::pair<absl::string_view, absl::string_view>> labels;  // in key order
  int64_t start_ms = 0;
  int64_t end_ms = 0;
  bool partial = false;
  uint32_t definition = 0;  // v1.WindowSummary.definition
  uint64_t accepted = 0;
  uint64_t capped = 0;
  std::vector<std::pair<std::string, double>> aggregates;  // "mean", "p99", ...
};

// The JSON object of one window, the one writer of it (the daemon's
// JSON-lines sink and live page, torchmonctl --json), without a newline:
//   {["type":"window",]"stat":...,"labels":{...},"start_ms":...,"end_ms":...,
//    ["start":"<RFC 3339>","end":"<RFC 3339>",]"partial":false,"definition":N,
//    "accepted":N,"capped":N,"aggregates":{"mean":...,...}}
// `as_record` adds the bracketed fields, as the sink's lines have them.
std::string WindowJson(const WindowJsonFields& window, bool as_record);

// "2026-11-22T18:04:05.123Z" (RFC 3339, UTC, millisecond precision).
std::string Rfc3339Ms(int64_t unix_ms);

}  // namespace torchmon::protocol

#endif  // TORCHMON_PROTOCOL_JSON_H_

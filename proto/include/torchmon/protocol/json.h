// JSON text for torchmon's machine-readable outputs (torchmonctl --json, the
// daemon's JSON-lines sink), so that both write strings and numbers alike.
#ifndef TORCHMON_PROTOCOL_JSON_H_
#define TORCHMON_PROTOCOL_JSON_H_

#include <string>

#include "absl/strings/string_view.h"

namespace torchmon::protocol {

// `s` as a JSON string literal. Invalid UTF-8 bytes become U+FFFD.
std::string JsonString(absl::string_view s);

// The shortest decimal that reads back as `value`; NaN and ±Inf, which JSON
// cannot express as numbers, become the strings "NaN", "+Inf" and "-Inf".
std::string JsonNumber(double value);

}  // namespace torchmon::protocol

#endif  // TORCHMON_PROTOCOL_JSON_H_

#include "torchmon/protocol/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::protocol {
namespace {

// Length in bytes of the well-formed UTF-8 sequence at s[i], or 0 if the
// bytes there are not one.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  size_t len;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    len = 2;
  } else if ((c & 0xF0) == 0xE0) {
    len = 3;
  } else if ((c & 0xF8) == 0xF0) {
    len = 4;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  return IsValidUtf8(s.substr(i, len)) ? len : 0;
}

}  // namespace

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  out.reserve(s.size() + 2);
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t len = Utf8SequenceLength(s, i);
      if (len == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.data() + i, len);
        i += len;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || c == 0x7F) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
    ++i;
  }
  out += "\"";
  return out;
}

std::string JsonNumber(double value) {
  if (std::isnan(value)) return "\"NaN\"";
  if (std::isinf(value)) return value > 0 ? "\"+Inf\"" : "\"-Inf\"";
  char buf[32];
  // Whole numbers print without an exponent ("100", not "1e+02") while that
  // is still exact.
  if (value == std::floor(value) && std::fabs(value) < 1e17) {
    std::snprintf(buf, sizeof buf, "%.0f", value);
    return buf;
  }
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, value);
    if (std::strtod(buf, nullptr) == value) break;
  }
  return buf;
}

std::string JsonLabels(const std::vector<std::pair<absl::string_view, absl::string_view>>& labels) {
  std::string out = "{";
  for (const auto& [key, value] : labels) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", JsonString(key), ":", JsonString(value));
  }
  return out + "}";
}

std::string Rfc3339Ms(int64_t unix_ms) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::FromUnixMillis(unix_ms),
                          absl::UTCTimeZone());
}

std::string WindowJson(const WindowJsonFields& w, bool as_record) {
  std::string aggregates = "{";
  for (const auto& [name, value] : w.aggregates) {
    absl::StrAppend(&aggregates, aggregates.size() > 1 ? "," : "", JsonString(name), ":",
                    JsonNumber(value));
  }
  aggregates += "}";
  return absl::StrCat(
      as_record ? "{\"type\":\"window\"," : "{", "\"stat\":", JsonString(w.stat),
      ",\"labels\":", JsonLabels(w.labels), ",\"start_ms\":", w.start_ms,
      ",\"end_ms\":", w.end_ms,
      as_record ? absl::StrCat(",\"start\":\"", Rfc3339Ms(w.start_ms), "\",\"end\":\"",
                               Rfc3339Ms(w.end_ms), "\"")
                : "",
      ",\"partial\":", w.partial ? "true" : "false", ",\"definition\":", w.definition,
      ",\"accepted\":", w.accepted,
      ",\"capped\":", w.capped, ",\"aggregates\":", aggregates, "}");
}

}  // namespace torchmon::protocol

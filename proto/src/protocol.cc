#include "torchmon/protocol/protocol.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::protocol {

absl::Status ValidateLabelKey(absl::string_view key) {
  if (key.empty()) return absl::InvalidArgumentError("label key is empty");
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("label key \"", Quote(key), "\" ", why));
  };
  if (key.size() > kMaxKeyBytes) {
    return bad(absl::StrCat("is ", key.size(), " bytes long (at most ", kMaxKeyBytes, ")"));
  }
  if (!(std::isalpha(static_cast<unsigned char>(key[0])) || key[0] == '_')) {
    return bad("must start with a letter or '_'");
  }
  for (char c : key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) {
      return bad("may only contain letters, digits and '_'");
    }
  }
  if (absl::StartsWith(key, "__")) return bad("must not start with \"__\" (reserved)");
  for (absl::string_view reserved : kReservedLabelKeys) {
    if (key == reserved) return bad("is reserved by the exposition");
  }
  for (absl::string_view reserved : kTargetLabelKeys) {
    if (key == reserved) {
      return bad(
          "is reserved: Prometheus sets it on the scrape target, and a series carrying it would "
          "pass for another node (choose another name, e.g. \"my_" + std::string(key) + "\")");
    }
  }
  return absl::OkStatus();
}

bool IsValidUtf8(absl::string_view s) {
  size_t i = 0;
  const size_t n = s.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(s[i]);
    int len;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (int k = 1; k < len; ++k) {
      const auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong encodings, surrogates and values past U+10FFFF are invalid.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += len;
  }
  return true;
}

absl::Status ValidateLabelValue(absl::string_view key, absl::string_view value) {
  if (!IsValidUtf8(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("value of label \"", Quote(key), "\" is not valid UTF-8"));
  }
  if (value.size() > kMaxLabelValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("value of label \"", Quote(key), "\" is ",
                                                   value.size(), " bytes long (at most ",
                                                   kMaxLabelValueBytes, "): \"", Quote(value),
                                                   "\""));
  }
  return absl::OkStatus();
}

absl::Status ValidateName(absl::string_view what, absl::string_view name, size_t max_bytes) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  if (!IsValidUtf8(name)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " is not valid UTF-8"));
  }
  if (name.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " \"", Quote(name), "\" is ", name.size(),
                                                   " bytes long (at most ", max_bytes, ")"));
  }
  return absl::OkStatus();
}

std::string Quote(absl::string_view text, size_t max_bytes) {
  if (!IsValidUtf8(text)) return "<invalid UTF-8>";
  if (text.size() <= max_bytes) return std::string(text);
  size_t cut = max_bytes;
  // Back up to the start of a code point: continuation bytes are 10xxxxxx.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return absl::StrCat(text.substr(0, cut), "...");
}

absl::Status ValidateSpec(const v1::StatSpec& spec) {
  if (spec.aggregations().empty() && spec.quantiles().empty() && !spec.histogram()) {
    return absl::InvalidArgumentError("aggregations is empty: give at least one, a quantile, or histogram");
  }
  for (int a : spec.aggregations()) {
    if (a == v1::QUANTILE) {
      return absl::InvalidArgumentError(
          "aggregation QUANTILE is given by the quantiles field (e.g. 0.99 for p99), not in "
          "aggregations");
    }
    if (a < v1::VALUE || a > v1::MIN) {
      return absl::InvalidArgumentError(absl::StrCat("aggregation ", a, " is not a known aggregation"));
    }
  }
  std::vector<double> quantiles;
  for (double q : spec.quantiles()) {
    absl::StatusOr<double> canonical = CanonicalQuantile(q);
    if (!canonical.ok()) return canonical.status();
    if (std::find(quantiles.begin(), quantiles.end(), *canonical) == quantiles.end()) {
      quantiles.push_back(*canonical);
    }
  }
  if (quantiles.size() > kMaxQuantiles) {
    return absl::InvalidArgumentError(absl::StrCat(
        quantiles.size(), " distinct quantiles (at most ", kMaxQuantiles, " per stat)"));
  }
  if (spec.window_size_ms() < kMinWindowMs || spec.window_size_ms() > kMaxWindowMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "window_size_ms ", spec.window_size_ms(), " is outside [", kMinWindowMs, ", ",
        kMaxWindowMs, "]"));
  }
  if (spec.max_samples() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_samples ", spec.max_samples(), " is negative (0 means unlimited)"));
  }
  if (const int64_t asked = spec.requested_window_size_ms();
      asked != 0 && (asked < 0 || DaemonWindowMs(asked) != spec.window_size_ms())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "requested_window_size_ms ", asked, " does not go with window_size_ms ",
        spec.window_size_ms(), " (it must be positive, and window_size_ms the nearest window "
        "the daemon holds, ", DaemonWindowMs(std::max<int64_t>(asked, 1)), " ms)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::pair<std::string, std::string>> ParseLabel(absl::string_view text) {
  const size_t eq = text.find('=');
  if (eq == absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat("label \"", text, "\" is not of the form key=value"));
  }
  std::string key(absl::StripAsciiWhitespace(text.substr(0, eq)));
  std::string value(absl::StripAsciiWhitespace(text.substr(eq + 1)));
  if (absl::Status s = ValidateLabelKey(key); !s.ok()) return s;
  if (!IsValidUtf8(value)) {
    return absl::InvalidArgumentError(absl::StrCat("value of label \"", key, "\" is not valid UTF-8"));
  }
  return std::make_pair(std::move(key), std::move(value));
}

absl::StatusOr<LabelList> ParseLabelList(absl::string_view text) {
  LabelList out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    auto label = ParseLabel(part);
    if (!label.ok()) return label.status();
    bool replaced = false;
    for (auto& [k, v] : out) {
      if (k == label->first) {
        v = label->second;
        replaced = true;
      }
    }
    if (!replaced) out.push_back(*std::move(label));
  }
  return out;
}

absl::StatusOr<int64_t> ParseDurationMs(absl::string_view text) {
  absl::string_view t = absl::StripAsciiWhitespace(text);
  struct Unit {
    absl::string_view suffix;
    double ms;
  };
  // "ms" must be tried before "s" and "m".
  static constexpr Unit kUnits[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}};
  for (const Unit& unit : kUnits) {
    if (!absl::EndsWith(t, unit.suffix)) continue;
    absl::string_view number = t.substr(0, t.size() - unit.suffix.size());
    double value;
    if (number.empty() || !absl::SimpleAtod(number, &value) || !std::isfinite(value) || value < 0) {
      break;
    }
    const double ms = value * unit.ms;
    if (ms > 9.2e18 || ms != std::floor(ms)) {
      return absl::InvalidArgumentError(
          absl::StrCat("duration \"", text, "\" is not a whole number of milliseconds"));
    }
    return static_cast<int64_t>(ms);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "duration \"", text, "\" is not a number followed by ms, s, m or h (e.g. 500ms, 2s, 1m)"));
}

std::string FormatDurationMs(int64_t ms) {
  if (ms != 0 && ms % 3600000 == 0) return absl::StrCat(ms / 3600000, "h");
  if (ms != 0 && ms % 60000 == 0) return absl::StrCat(ms / 60000, "m");
  if (ms != 0 && ms % 1000 == 0) return absl::StrCat(ms / 1000, "s");
  return absl::StrCat(ms, "ms");
}

absl::string_view AggregationName(v1::Aggregation aggregation) {
  switch (aggregation) {
    case v1::VALUE: return "value";
    case v1::MEAN: return "mean";
    case v1::COUNT: return "count";
    case v1::SUM: return "sum";
    case v1::MAX: return "max";
    case v1::MIN: return "min";
    case v1::QUANTILE: return "quantile";
    default: return "unspecified";
  }
}

namespace {
// Quantiles live on a grid of 1e-6 (four decimals of a percentage).
constexpr double kQuantileGrid = 1e6;
}  // namespace

absl::StatusOr<double> CanonicalQuantile(double q) {
  if (!(q > 0 && q < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("quantile ", q, " is not strictly between 0 and 1 (use min or max for the "
                     "ends)"));
  }
  const double steps = std::round(q * kQuantileGrid);
  if (std::fabs(q * kQuantileGrid - steps) > 1e-3 || steps <= 0 || steps >= kQuantileGrid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "quantile ", absl::StrFormat("%.17g", q),
        " has more than four decimals as a percentage (p99.9999 is the finest)"));
  }
  return steps / kQuantileGrid;
}

std::string QuantileName(double q) {
  // q·100 with at most four decimals, trailing zeros dropped: "99", "99.9".
  std::string percent = absl::StrFormat("%.4f", q * 100);
  while (percent.back() == '0') percent.pop_back();
  if (percent.back() == '.') percent.pop_back();
  return absl::StrCat("p", percent);
}

std::string AggregationName(const NamedAggregation& aggregation) {
  if (aggregation.aggregation == v1::QUANTILE) return QuantileName(aggregation.quantile);
  return std::string(AggregationName(aggregation.aggregation));
}

absl::StatusOr<NamedAggregation> ParseAggregation(absl::string_view text) {
  const std::string name = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  for (int a = v1::VALUE; a <= v1::MIN; ++a) {
    if (AggregationName(static_cast<v1::Aggregation>(a)) == name) {
      return NamedAggregation{static_cast<v1::Aggregation>(a), 0};
    }
  }
  if (name.size() > 1 && name[0] == 'p') {
    const absl::string_view digits = absl::string_view(name).substr(1);
    double percent;
    // Digits and at most one point only: SimpleAtod would take "1e1" or "inf".
    const bool plain = digits.find_first_not_of("0123456789.") == absl::string_view::npos &&
                       std::count(digits.begin(), digits.end(), '.') <= 1 &&
                       digits.front() != '.' && digits.back() != '.';
    if (plain && absl::SimpleAtod(digits, &percent)) {
      const size_t point = digits.find('.');
      if (point != absl::string_view::npos && digits.size() - point - 1 > 4) {
        return absl::InvalidArgumentError(absl::StrCat(
            "quantile \"", text, "\" has more than four decimals (p99.9999 is the finest)"));
      }
      if (!(percent > 0 && percent < 100)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "quantile \"", text, "\" is not strictly between p0 and p100 (use min or max)"));
      }
      absl::StatusOr<double> q = CanonicalQuantile(percent / 100);
      if (!q.ok()) return q.status();
      return NamedAggregation{v1::QUANTILE, *q};
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "aggregation \"", Quote(text), "\" is not one of value, mean, count, sum, max, min or a "
      "quantile pNN (p50, p99, p99.9)"));
}

void AddToSpec(const NamedAggregation& aggregation, v1::StatSpec* spec) {
  if (aggregation.aggregation == v1::QUANTILE) {
    spec->add_quantiles(aggregation.quantile);
  } else {
    spec->add_aggregations(aggregation.aggregation);
  }
}

absl::StatusOr<std::vector<NamedAggregation>> ParseAggregationList(absl::string_view text) {
  std::vector<NamedAggregation> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    absl::StatusOr<NamedAggregation> aggregation = ParseAggregation(part);
    if (!aggregation.ok()) return aggregation.status();
    out.push_back(*aggregation);
  }
  if (out.empty()) return absl::InvalidArgumentError("aggregation list is empty");
  return out;
}

std::string DefaultSocketPath() {
  if (const char* runtime = std::getenv("XDG_RUNTIME_DIR"); runtime != nullptr && *runtime) {
    return absl::StrCat(runtime, "/torchmon/torchmond.sock");
  }
  if (getuid() == 0) return "/run/torchmon/torchmond.sock";
  return absl::StrCat("/tmp/torchmon-", getuid(), "/torchmond.sock");
}

bool IsLoopbackHost(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost")) return true;
  const std::string text(host);
  in_addr v4;
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  if (inet_pton(AF_INET6, text.c_str(), &v6) != 1) return false;
  // ::ffff:127.x.y.z is the IPv4 loopback seen through an IPv6 socket.
  return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
}

std::string DefaultTarget() {
  if (const char* target = std::getenv("TORCHMON_TARGET"); target != nullptr && *target) {
    return target;
  }
  return absl::StrCat("unix://", DefaultSocketPath());
}

}  // namespace torchmon::protocol

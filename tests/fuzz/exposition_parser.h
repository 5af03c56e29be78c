// A strict reader of the Prometheus text format (0.0.4) as torchmond writes
// it, for the ingest fuzzer: whatever stat names, label values and numbers a
// client sends, the scrape must stay parseable and say what the aggregator
// holds. Independent of server/core/prometheus_text.cc on purpose.
#ifndef TORCHMON_TESTS_FUZZ_EXPOSITION_PARSER_H_
#define TORCHMON_TESTS_FUZZ_EXPOSITION_PARSER_H_

#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::fuzz {

struct ExpositionSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in order, unescaped
  double value = 0;
};

namespace exposition_internal {

inline bool IsNameStart(char c) { return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':'; }
inline bool IsNameChar(char c) { return IsNameStart(c) || absl::ascii_isdigit(static_cast<unsigned char>(c)); }

// Consumes a metric (allow_colon) or label name from the front of `s`.
inline bool ConsumeName(absl::string_view& s, bool allow_colon, std::string* out) {
  size_t i = 0;
  auto ok = [&](char c, bool first) {
    if (c == ':' && !allow_colon) return false;
    return first ? IsNameStart(c) : IsNameChar(c);
  };
  while (i < s.size() && ok(s[i], i == 0)) ++i;
  if (i == 0) return false;
  out->assign(s.data(), i);
  s.remove_prefix(i);
  return true;
}

inline bool ParseValue(absl::string_view s, double* out) {
  if (s == "NaN") {
    *out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (s == "+Inf" || s == "-Inf") {
    *out = s[0] == '+' ? std::numeric_limits<double>::infinity()
                       : -std::numeric_limits<double>::infinity();
    return true;
  }
  if (s.empty()) return false;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size() && std::isfinite(*out);
}

}  // namespace exposition_internal

// Every sample of `text`, or the first thing wrong with it. Strict where the
// format is: HELP then TYPE (counter or gauge) before a family's samples,
// each family once, samples of the current family only, label values with
// only \\, \" and \n escapes, no label twice, valid UTF-8, a final newline.
inline absl::StatusOr<std::vector<ExpositionSample>> ParseExposition(absl::string_view text) {
  using namespace exposition_internal;
  if (!protocol::IsValidUtf8(text)) return absl::InvalidArgumentError("not valid UTF-8");
  if (!text.empty() && text.back() != '\n') return absl::InvalidArgumentError("no final newline");
  std::vector<ExpositionSample> samples;
  std::set<std::string> families;
  std::string family, help_of;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (line.empty()) continue;  // the split's last piece
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", what, ": ", line));
    };
    if (absl::ConsumePrefix(&line, "# HELP ")) {
      std::string name;
      if (!ConsumeName(line, true, &name) || !absl::ConsumePrefix(&line, " ")) {
        return error("bad HELP");
      }
      for (size_t i = 0; i < line.size(); ++i) {
        if (line[i] != '\\') continue;
        if (i + 1 == line.size() || (line[i + 1] != '\\' && line[i + 1] != 'n')) {
          return error("bad escape in HELP");
        }
        ++i;
      }
      help_of = name;
      continue;
    }
    if (absl::ConsumePrefix(&line, "# TYPE ")) {
      std::string name;
      if (!ConsumeName(line, true, &name) || !absl::ConsumePrefix(&line, " ")) {
        return error("bad TYPE");
      }
      if (line != "counter" && line != "gauge") return error("unknown type");
      if (name != help_of) return error("TYPE without its HELP");
      if (!families.insert(name).second) return error("family repeated");
      family = name;
      continue;
    }
    if (absl::StartsWith(line, "#")) return error("unknown comment");
    ExpositionSample sample;
    if (!ConsumeName(line, true, &sample.name)) return error("no metric name");
    if (sample.name != family) return error("sample outside its family");
    if (absl::ConsumePrefix(&line, "{")) {
      std::set<std::string> keys;
      for (bool first = true; !absl::ConsumePrefix(&line, "}"); first = false) {
        if (!first && !absl::ConsumePrefix(&line, ",")) return error("no comma between labels");
        std::string key, value;
        if (!ConsumeName(line, false, &key) || !absl::ConsumePrefix(&line, "=\"")) {
          return error("bad label");
        }
        for (;;) {
          if (line.empty()) return error("unterminated label value");
          const char c = line[0];
          line.remove_prefix(1);
          if (c == '"') break;
          if (c != '\\') {
            value.push_back(c);
            continue;
          }
          if (line.empty()) return error("escape at end of line");
          const char e = line[0];
          line.remove_prefix(1);
          if (e == 'n') {
            value.push_back('\n');
          } else if (e == '\\' || e == '"') {
            value.push_back(e);
          } else {
            return error("bad escape in label value");
          }
        }
        if (!keys.insert(key).second) return error("label repeated");
        sample.labels.emplace_back(std::move(key), std::move(value));
      }
    }
    if (!absl::ConsumePrefix(&line, " ")) return error("no space before the value");
    if (!ParseValue(line, &sample.value)) return error("bad value");
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace torchmon::fuzz

#endif  // TORCHMON_TESTS_FUZZ_EXPOSITION_PARSER_H_

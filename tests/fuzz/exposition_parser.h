// A strict reader of the Prometheus text format (0.0.4) as torchmond writes
// it, for the ingest fuzzer: whatever stat names, label values and numbers a
// client sends, the scrape must stay parseable and say what the aggregator
// holds. Independent of server/exposition/prometheus_text.cc on purpose.
#ifndef TORCHMON_TESTS_FUZZ_EXPOSITION_PARSER_H_
#define TORCHMON_TESTS_FUZZ_EXPOSITION_PARSER_H_

#include <charconv>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::fuzz {

// One sample line, valid until the next: the metric name, its labels in
// order (values unescaped) and its value.
struct ExpositionSample {
  absl::string_view name;
  const std::vector<std::pair<std::string, std::string>>& labels;
  double value;
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

// Calls `on_sample` for every sample of `text`; the first thing wrong with
// it. Strict where the format is: HELP then TYPE (counter or gauge) before
// a family's samples, each family once, samples of the current family only,
// label values with only \\, \" and \n escapes, no label twice, valid
// UTF-8, a final newline. Allocates little: scrapes of thousands of series
// are parsed at every fuzzer step that scrapes.
inline absl::Status ParseExposition(absl::string_view text,
                                    absl::FunctionRef<void(const ExpositionSample&)> on_sample) {
  using namespace exposition_internal;
  if (!protocol::IsValidUtf8(text)) return absl::InvalidArgumentError("not valid UTF-8");
  if (!text.empty() && text.back() != '\n') return absl::InvalidArgumentError("no final newline");
  std::set<std::string> families;
  std::string family, help_of, name;
  std::vector<std::pair<std::string, std::string>> labels;
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
    if (!ConsumeName(line, true, &name)) return error("no metric name");
    if (name != family) return error("sample outside its family");
    size_t count = 0;  // labels of this line; `labels` keeps its strings
    if (absl::ConsumePrefix(&line, "{")) {
      for (bool first = true; !absl::ConsumePrefix(&line, "}"); first = false) {
        if (!first && !absl::ConsumePrefix(&line, ",")) return error("no comma between labels");
        if (count == labels.size()) labels.emplace_back();
        auto& [key, value] = labels[count];
        value.clear();
        if (!ConsumeName(line, false, &key) || !absl::ConsumePrefix(&line, "=\"")) {
          return error("bad label");
        }
        for (;;) {
          const size_t stop = line.find_first_of("\"\\");
          if (stop == absl::string_view::npos) return error("unterminated label value");
          value.append(line.data(), stop);
          const char c = line[stop];
          line.remove_prefix(stop + 1);
          if (c == '"') break;
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
        for (size_t i = 0; i < count; ++i) {
          if (labels[i].first == key) return error("label repeated");
        }
        ++count;
      }
    }
    labels.resize(count);
    if (!absl::ConsumePrefix(&line, " ")) return error("no space before the value");
    double value;
    if (!ParseValue(line, &value)) return error("bad value");
    on_sample(ExpositionSample{name, labels, value});
  }
  return absl::OkStatus();
}

}  // namespace torchmon::fuzz

#endif  // TORCHMON_TESTS_FUZZ_EXPOSITION_PARSER_H_

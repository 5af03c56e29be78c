#include "server/core/selector.h"

#include <algorithm>

namespace torchmon::server {

bool GlobMatch(absl::string_view pattern, absl::string_view text) {
  // Iterative matcher with single-star backtracking: on a mismatch, resume
  // after the most recent '*', letting it swallow one more byte.
  size_t p = 0, t = 0;
  size_t star = absl::string_view::npos, star_text = 0;
  while (t < text.size()) {
    // '*' first: it is a wildcard even where the text has a '*' too.
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      star_text = t;
    } else if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (star != absl::string_view::npos) {
      p = star + 1;
      t = ++star_text;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

namespace {
absl::string_view LabelValue(const Labels& labels, absl::string_view key) {
  const std::string* value = FindLabel(labels, key);
  return value != nullptr ? absl::string_view(*value) : absl::string_view();
}

bool IsGlob(absl::string_view s) { return s.find_first_of("*?") != absl::string_view::npos; }
}  // namespace

bool LabelMatcher::Matches(const Labels& labels) const {
  const absl::string_view actual = LabelValue(labels, key);
  switch (op) {
    case Op::kEqual: return actual == value;
    case Op::kNotEqual: return actual != value;
    case Op::kGlob: return GlobMatch(value, actual);
  }
  return false;
}

bool Selector::Matches(absl::string_view candidate, const Labels& candidate_labels) const {
  if (!name.empty()) {
    if (IsGlob(name) ? !GlobMatch(name, candidate) : name != candidate) return false;
  }
  for (const LabelMatcher& m : labels) {
    if (!m.Matches(candidate_labels)) return false;
  }
  return true;
}

}  // namespace torchmon::server

// Selecting series and events by name (exact or glob) and label matchers.
// Pure; thread-compatible (a const Selector may be shared).
#ifndef TORCHMON_SERVER_CORE_SELECTOR_H_
#define TORCHMON_SERVER_CORE_SELECTOR_H_

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "server/core/types.h"

namespace torchmon::server {

// Glob match: '*' matches any run (including empty), '?' one byte, anything
// else itself. Linear in |pattern|·|text| in the worst case, no recursion.
bool GlobMatch(absl::string_view pattern, absl::string_view text);

struct LabelMatcher {
  enum class Op { kEqual, kNotEqual, kGlob };
  std::string key;
  std::string value;
  Op op = Op::kEqual;

  // A missing label reads as "".
  bool Matches(const Labels& labels) const;
};

// All conditions must hold. An empty name matches every name.
struct Selector {
  std::string name;
  std::vector<LabelMatcher> labels;

  bool Matches(absl::string_view name, const Labels& labels) const;
  bool Matches(const SeriesKey& key) const { return Matches(key.stat, key.labels.get()); }
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_SELECTOR_H_

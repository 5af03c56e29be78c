// What the fuzz targets share: the invariant check that ends a run, and the
// "script" input format that lets one input drive several steps (batches on
// more than one stream, clock ticks, scrapes) through one daemon state.
#ifndef TORCHMON_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define TORCHMON_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace torchmon::fuzz {

// Reports a broken invariant and aborts, which libFuzzer (or the replay
// driver) turns into a failing input.
[[noreturn]] inline void Fail(const char* file, int line, const char* condition,
                              const std::string& detail) {
  std::fprintf(stderr, "%s:%d: invariant broken: %s\n  %s\n", file, line, condition,
               detail.c_str());
  std::abort();
}

// FUZZ_CHECK(condition, message parts...): the parts (absl::StrCat
// arguments) are only formatted on failure.
#define FUZZ_CHECK(condition, ...)                                                   \
  do {                                                                               \
    if (!(condition)) {                                                              \
      ::torchmon::fuzz::Fail(__FILE__, __LINE__, #condition, absl::StrCat(__VA_ARGS__)); \
    }                                                                                \
  } while (false)

// A script is a sequence of steps separated by kStepSeparator. A step is one
// operation byte (its meaning is the fuzz target's) and an argument, the
// rest of the step. Four bytes that no valid protobuf field is likely to
// contain; mutations that insert or delete it split or join steps, which is
// as good a mutation as any.
inline constexpr absl::string_view kStepSeparator("\xfe\xfe\xfeT", 4);

struct Step {
  uint8_t op = 0;
  absl::string_view argument;
};

// Empty steps (two separators in a row) are skipped.
inline std::vector<Step> SplitScript(absl::string_view script) {
  std::vector<Step> steps;
  while (!script.empty()) {
    const size_t end = script.find(kStepSeparator);
    const absl::string_view step = script.substr(0, end);
    if (!step.empty()) steps.push_back(Step{static_cast<uint8_t>(step[0]), step.substr(1)});
    if (end == absl::string_view::npos) break;
    script.remove_prefix(end + kStepSeparator.size());
  }
  return steps;
}

inline void AppendStep(std::string& script, uint8_t op, absl::string_view argument) {
  if (!script.empty()) script.append(kStepSeparator.data(), kStepSeparator.size());
  script.push_back(static_cast<char>(op));
  script.append(argument.data(), argument.size());
}

// Up to the first four bytes of `argument`, little-endian.
inline uint32_t ReadU32(absl::string_view argument) {
  uint32_t v = 0;
  for (size_t i = 0; i < argument.size() && i < 4; ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(argument[i])) << (8 * i);
  }
  return v;
}

inline std::string U32Argument(uint32_t v) {
  std::string out(4, '\0');
  for (size_t i = 0; i < 4; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

}  // namespace torchmon::fuzz

#endif  // TORCHMON_TESTS_FUZZ_FUZZ_SUPPORT_H_

// torchmonctl's flags and commands as data: how each is parsed, and what
// its usage shows. The parser (command_line.cc) and the usage text
// (usage_text.cc) both read these tables, so what --help lists is what the
// parser accepts. Constant after first use; thread-safe.
#ifndef TORCHMON_CLI_COMMAND_TABLE_H_
#define TORCHMON_CLI_COMMAND_TABLE_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace torchmon::cli {

enum class Flag {
  kTarget,
  kTokenFile,
  kTlsCa,
  kTlsCert,
  kTlsKey,
  kTlsServerName,
  kJson,
  kTimeout,
  kHelp,
  kStat,
  kLabel,
  kLast,
  kSince,
  kAgg,
  kWindow,
  kMaxSamples,
  kHistogram,
  kAt,
  kRankLabel,
  kWindowStart,
  kInterval,
  kCount
};

// One flag: how it is parsed and how its usage shows it. The usage text of
// torchmonctl and of each command is written from these tables (UsageText),
// so what --help lists is what the parser accepts.
struct FlagSpec {
  absl::string_view name;  // "--stat"
  Flag flag;
  // The value's placeholder in the usage ("GLOB"); empty: takes no value.
  absl::string_view value = "";
  // The help beside the flag; '\n' starts a line at the help column.
  absl::string_view help = "";
  // Shown as "[--label k=v]..." in a synopsis.
  bool repeatable = false;
  // Another spelling, shown first ("-h, --help").
  absl::string_view alias = "";
  // The flag in the tool's synopsis, if not "[--name VALUE]"; kHidden: absent.
  absl::string_view synopsis = "";

  bool takes_value() const { return !value.empty(); }
};

// A FlagSpec::synopsis that keeps the flag out of the tool's synopsis.
inline constexpr absl::string_view kHidden = "-";

struct CommandSpec {
  absl::string_view name;
  // The positional arguments in its synopsis ("STAT VALUE...").
  absl::string_view arguments;
  // The line under it in the tool's usage.
  absl::string_view summary;
  // The paragraph under its synopsis in its own usage.
  absl::string_view description;
  // In the order of its synopsis and of its usage's list.
  std::vector<FlagSpec> flags;
};

// The global flags, in the order of their usage. The tool's synopsis shows
// those not kHidden.
absl::Span<const FlagSpec> GlobalFlags();
// Every command, in the order of the tool's usage.
const std::vector<CommandSpec>& Commands();
// The command named `name`, or null.
const CommandSpec* FindCommand(absl::string_view name);
// The flag of `flags` spelled `name` (its name or alias), or null.
const FlagSpec* FindFlag(absl::Span<const FlagSpec> flags, absl::string_view name);

}  // namespace torchmon::cli

#endif  // TORCHMON_CLI_COMMAND_TABLE_H_

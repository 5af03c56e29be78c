// The command line of torchmonctl: what each command accepts, parsed into
// plain structs before anything touches the network. docs/cli.md is the
// user-facing reference; this header is the contract for the code.
//
// Everything here is pure (no I/O, no clock, no environment) and safe to call
// from any thread.
#ifndef TORCHMON_CLI_COMMAND_LINE_H_
#define TORCHMON_CLI_COMMAND_LINE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "torchmon/client.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::cli {

// Exit statuses of torchmonctl, documented in docs/cli.md.
enum ExitCode : int {
  kExitOk = 0,
  // The daemon answered with an error or refused part of what was pushed.
  kExitFailed = 1,
  // The command line was wrong; nothing was sent.
  kExitUsage = 2,
  // The daemon could not be reached, or did not answer within --timeout.
  kExitUnreachable = 3,
};

inline constexpr int64_t kDefaultTimeoutMs = 5000;
inline constexpr int64_t kDefaultPushWindowMs = 10000;
inline constexpr absl::string_view kDefaultPushAggregations = "value,mean,count,sum,max,min";

// Flags valid with every command, before or after it.
struct GlobalOptions {
  // gRPC target. A bare absolute path is turned into "unix://<path>".
  std::string target;
  bool json = false;
  // Deadline of each query RPC, and the bound on push/event's flush.
  int64_t timeout_ms = kDefaultTimeoutMs;
  // --token-file, --tls-ca, --tls-cert, --tls-key, --tls-server-name; the
  // client library fills what is empty from TORCHMON_TOKEN_FILE etc.
  ClientSecurity security;
};

// `--help`/`-h`, or no command at all. `command` is empty for the tool's usage.
struct HelpRequest {
  std::string command;
};

// series [--stat GLOB] [--label k=v]...
struct SeriesCommand {
  std::string stat_glob;  // empty: every stat
  protocol::LabelList labels;
};

// windows STAT [--label k=v]... [--last N] [--since DURATION]
struct WindowsCommand {
  std::string stat;  // exact or glob
  protocol::LabelList labels;
  int32_t last = 0;                 // 0: every retained window
  std::optional<int64_t> since_ms;  // only windows starting at most this long ago
};

// events [NAME] [--label k=v]... [--last N]
struct EventsCommand {
  std::string name;  // exact or glob; empty: every event
  protocol::LabelList labels;
  int32_t last = 0;  // 0: every retained event
};

// watch [STAT] [--label k=v]...
struct WatchCommand {
  std::string stat;  // exact or glob; empty: every stat
  protocol::LabelList labels;
};

// What `ranks` compares when given no STAT: each step's time outside
// collective waits (torchmon._torch_metrics; the daemon's
// kDefaultStragglerStat).
inline constexpr char kDefaultRanksStat[] = "torch.dist.compute_s";

// ranks [STAT] [--agg AGG] [--rank-label KEY] [--window-start MS] [--label k=v]...
struct RanksCommand {
  std::string stat;  // exact or glob
  protocol::LabelList labels;
  protocol::NamedAggregation aggregation{v1::MEAN, 0};
  std::string rank_label = "rank";
  int64_t window_start_ms = 0;  // 0: the newest window
};

// top [--interval DURATION] [--count N] [--agg AGG] [--label k=v]...
struct TopCommand {
  protocol::LabelList labels;
  protocol::NamedAggregation aggregation{v1::MEAN, 0};
  int64_t interval_ms = 2000;
  int32_t count = 0;  // refreshes before exiting; 0: until Ctrl-C
};

// push STAT VALUE... [--agg LIST] [--window DURATION] [--max-samples N] [--histogram]
//      [--label k=v]...
struct PushCommand {
  std::string stat;
  std::vector<double> values;  // at least one
  v1::StatSpec spec;           // validated with protocol::ValidateSpec
  protocol::LabelList labels;  // the stat's labels, not identity labels
  std::optional<int64_t> at_ms;  // --at: the samples' stamp (Unix ms); now if unset
};

// event NAME [key=value]... [--label k=v]...
struct EventCommand {
  std::string name;
  std::map<std::string, EventValue> data;
  protocol::LabelList labels;  // merged over the identity labels
};

using Command = std::variant<HelpRequest, SeriesCommand, WindowsCommand, EventsCommand,
                             WatchCommand, RanksCommand, TopCommand, PushCommand, EventCommand>;

struct Invocation {
  GlobalOptions global;
  Command command;
};

// Parses the arguments after argv[0]. `default_target` is used when --target
// is absent (the caller passes protocol::DefaultTarget()). On a usage error
// returns InvalidArgument with a message naming the offending argument.
//
// Flags take their value as the next argument or after '=' (--last=5). An
// argument starting with '-' that is a number ("-1.5", "-inf") is a positional
// value, not a flag; "--" ends the flags.
absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args,
                                            std::string default_target);

// True if `name` is one of the commands ("series", "push", ...).
bool IsCommand(absl::string_view name);

// Parses a sample value: a decimal number ("1", "-2.5", "1e-3", ".5") or,
// case-insensitively, "nan", "inf", "infinity", each with an optional sign.
// Hexadecimal and out-of-range numbers are refused.
absl::StatusOr<double> ParseSampleValue(absl::string_view text);

// Infers the type of an event data value (docs/cli.md, "event"):
// an integer literal that fits int64 → int64; any other ParseSampleValue
// number → double; "true"/"false" → bool; anything else → the string itself.
EventValue InferEventValue(absl::string_view text);

}  // namespace torchmon::cli

#endif  // TORCHMON_CLI_COMMAND_LINE_H_

#include "cli/command_line.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"

namespace torchmon::cli {
namespace {

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

constexpr absl::string_view kHidden = "-";

// In the order of their usage. The tool's synopsis shows the first five.
constexpr FlagSpec kGlobalFlags[] = {
    {"--target", Flag::kTarget, "ADDR",
     "daemon address: unix:///path, /path or host:port\n"
     "(default: $TORCHMON_TARGET, else the default socket)"},
    {"--json", Flag::kJson, "", "machine-readable JSON output (see docs/cli.md)"},
    {"--timeout", Flag::kTimeout, "DURATION",
     "deadline of each request, and how long push/event wait\n"
     "for the daemon's acknowledgement (default 5s)"},
    {"--token-file", Flag::kTokenFile, "FILE",
     "the daemon's bearer token (default: $TORCHMON_TOKEN_FILE)"},
    {"--tls-ca", Flag::kTlsCa, "FILE",
     "TLS to a TCP target, verified with this CA (default:\n"
     "$TORCHMON_TLS_CA; no TLS when neither it nor --tls-cert)",
     false, "", "[--tls-ca FILE [--tls-cert FILE --tls-key FILE]]"},
    {"--tls-cert", Flag::kTlsCert, "FILE",
     "client certificate for a daemon that asks for one, with", false, "", kHidden},
    {"--tls-key", Flag::kTlsKey, "FILE",
     "its key (default: $TORCHMON_TLS_CERT, $TORCHMON_TLS_KEY)", false, "", kHidden},
    {"--tls-server-name", Flag::kTlsServerName, "NAME",
     "name the daemon's certificate must carry, if not the\n"
     "target's host (default: $TORCHMON_TLS_SERVER_NAME)",
     false, "", kHidden},
    {"--help", Flag::kHelp, "", "show this help", false, "-h", kHidden},
};

constexpr FlagSpec kSeriesLabelFlag = {"--label", Flag::kLabel, "k=v",
                                       "only series whose label k equals v; repeatable", true};
constexpr FlagSpec kAggComparedFlag = {
    "--agg", Flag::kAgg, "AGG", "the aggregation compared, e.g. max or p99 (default mean)"};

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

const std::vector<CommandSpec>& Commands() {
  static const auto* commands = new std::vector<CommandSpec>{
      {"series", "", "list series: definition, counters, last window",
       "Lists the series matching the selector: definition, counters and last window.",
       {{"--stat", Flag::kStat, "GLOB",
         "stat name, exact or a glob (* any run, ? one character)"},
        kSeriesLabelFlag}},
      {"windows", "STAT", "closed windows of the matching series",
       "Shows closed windows of the series whose stat matches STAT (exact or glob),\n"
       "oldest first within each series.",
       {kSeriesLabelFlag,
        {"--last", Flag::kLast, "N", "only the N most recent windows of each series"},
        {"--since", Flag::kSince, "DURATION",
         "only windows that started at most DURATION ago (e.g. 10m)"}}},
      {"events", "[NAME]", "events from the daemon's event log",
       "Shows events from the daemon's event log, oldest first. NAME is exact or a glob.",
       {{"--label", Flag::kLabel, "k=v", "only events whose label k equals v; repeatable", true},
        {"--last", Flag::kLast, "N", "only the N most recent events"}}},
      {"watch", "[STAT]", "print windows as they close, until Ctrl-C",
       "Prints each window of the matching series as it closes, one line each (one JSON\n"
       "object per line with --json), until Ctrl-C or the daemon ends the stream.",
       {kSeriesLabelFlag}},
      {"ranks", "STAT", "compare the ranks in one window: slowest first, spread, missing ranks",
       "Compares the ranks of each matching stat in one window: every rank's value,\n"
       "largest (slowest) first, the median, max/median, and the ranks missing that\n"
       "window; with a quantile (--agg p99), also that quantile of all the ranks'\n"
       "samples together. Series are grouped by stat and their labels other than the\n"
       "rank label, local_rank and host.",
       {kAggComparedFlag,
        {"--rank-label", Flag::kRankLabel, "KEY", "the label naming a rank (default rank)"},
        {"--window-start", Flag::kWindowStart, "MS",
         "the window starting at MS, Unix milliseconds (default: the\n"
         "newest window any rank has closed)"},
        kSeriesLabelFlag}},
      {"top", "", "live view: the widest rank spreads and the series dropping samples",
       "A live view of the node, refreshed every DURATION until Ctrl-C: the stats whose\n"
       "ranks are furthest apart (slowest rank, max/median, missing ranks; as `ranks`)\n"
       "and the series that dropped samples since the previous refresh, by reason.",
       {{"--interval", Flag::kInterval, "DURATION",
         "time between refreshes, at least 100ms (default 2s)"},
        {"--count", Flag::kCount, "N", "stop after N refreshes (default: until Ctrl-C)"},
        kAggComparedFlag, kSeriesLabelFlag}},
      {"push", "STAT VALUE...", "send samples of a stat",
       "Sends each VALUE as a sample of STAT, stamped now, and waits until the daemon\n"
       "has acknowledged them. VALUE is a decimal number, nan, inf or -inf.",
       {{"--agg", Flag::kAgg, "LIST",
         "aggregations, comma-separated from value, mean, count,\n"
         "sum, max, min and quantiles pNN (p50, p99, p99.9);\n"
         "default: the six of torch.monitor"},
        {"--window", Flag::kWindow, "DURATION",
         "window length, 10ms to 744h (31 days; default 10s)"},
        {"--max-samples", Flag::kMaxSamples, "N",
         "samples accepted per window; 0 = unlimited (default 0)"},
        {"--histogram", Flag::kHistogram, "",
         "keep a native histogram of the series' samples for\n"
         "Prometheus (implied by a quantile)"},
        {"--at", Flag::kAt, "MS",
         "stamp the samples MS, Unix milliseconds, instead of now\n"
         "(the daemon counts a stamp past its window's grace as\n"
         "late, one too far ahead as skewed)"},
        {"--label", Flag::kLabel, "k=v",
         "a label of the stat, added to the identity labels taken\n"
         "from the environment; repeatable",
         true}}},
      {"event", "NAME [key=value]...", "log an event",
       "Logs an event and waits until the daemon has acknowledged it. Each value is\n"
       "an int64 if it is an integer literal, a double if it is another number\n"
       "(including nan, inf, -inf), a bool if it is true or false, else a string.",
       {{"--label", Flag::kLabel, "k=v",
         "a label of the event, merged over the identity labels;\nrepeatable", true}}},
  };
  return *commands;
}

const CommandSpec* FindCommand(absl::string_view name) {
  for (const CommandSpec& command : Commands()) {
    if (command.name == name) return &command;
  }
  return nullptr;
}

const FlagSpec* FindFlag(absl::Span<const FlagSpec> flags, absl::string_view name) {
  for (const FlagSpec& flag : flags) {
    if (flag.name == name || (!flag.alias.empty() && flag.alias == name)) return &flag;
  }
  return nullptr;
}

absl::Status UsageError(absl::string_view message) { return absl::InvalidArgumentError(message); }

// The command line split into its parts, before each command checks its own.
struct SplitCommandLine {
  std::string command;
  std::vector<std::string> positionals;
  std::vector<std::pair<Flag, std::string>> flags;  // command flags, in order
};

// Adds `label` ("k=v") to `labels`; a later value for the same key wins.
absl::Status AddLabel(absl::string_view text, protocol::LabelList& labels) {
  auto label = protocol::ParseLabel(text);
  if (!label.ok()) return UsageError(absl::StrCat("--label: ", label.status().message()));
  for (auto& [key, value] : labels) {
    if (key == label->first) {
      value = label->second;
      return absl::OkStatus();
    }
  }
  labels.push_back(*std::move(label));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParseDurationFlag(absl::string_view flag, absl::string_view text) {
  auto ms = protocol::ParseDurationMs(text);
  if (!ms.ok()) return UsageError(absl::StrCat(flag, ": ", ms.status().message()));
  return *ms;
}

absl::StatusOr<int32_t> ParseLast(absl::string_view text) {
  int32_t n;
  if (!absl::SimpleAtoi(text, &n) || n < 1) {
    return UsageError(absl::StrCat("--last: \"", text, "\" is not a positive integer"));
  }
  return n;
}

absl::Status CheckName(absl::string_view what, absl::string_view name) {
  if (absl::Status s = protocol::ValidateName(what, name); !s.ok()) {
    return UsageError(s.message());
  }
  return absl::OkStatus();
}

absl::Status CheckPositionalCount(const SplitCommandLine& line, size_t min, size_t max,
                                  absl::string_view what) {
  if (line.positionals.size() < min) {
    return UsageError(absl::StrCat(line.command, " needs ", what));
  }
  if (line.positionals.size() > max) {
    return UsageError(
        absl::StrCat(line.command, ": unexpected argument \"", line.positionals[max], "\""));
  }
  return absl::OkStatus();
}

absl::StatusOr<Command> BuildSeries(const SplitCommandLine& line) {
  SeriesCommand command;
  if (absl::Status s = CheckPositionalCount(line, 0, 0, ""); !s.ok()) return s;
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kStat) {
      if (!protocol::IsValidUtf8(value)) return UsageError("--stat is not valid UTF-8");
      command.stat_glob = value;
    } else if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    }
  }
  return command;
}

// The one positional of windows and ranks: a STAT, name or glob.
absl::Status TakeStat(const SplitCommandLine& line, std::string& stat) {
  if (absl::Status s = CheckPositionalCount(line, 1, 1, "a STAT (name or glob)"); !s.ok()) {
    return s;
  }
  stat = line.positionals[0];
  return CheckName("STAT", stat);
}

absl::StatusOr<Command> BuildWindows(const SplitCommandLine& line) {
  WindowsCommand command;
  if (absl::Status s = TakeStat(line, command.stat); !s.ok()) return s;
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    } else if (flag == Flag::kLast) {
      auto n = ParseLast(value);
      if (!n.ok()) return n.status();
      command.last = *n;
    } else if (flag == Flag::kSince) {
      auto ms = ParseDurationFlag("--since", value);
      if (!ms.ok()) return ms.status();
      command.since_ms = *ms;
    }
  }
  return command;
}

// --agg of ranks and top: exactly one aggregation.
absl::StatusOr<protocol::NamedAggregation> ParseComparedAggregation(absl::string_view value) {
  auto parsed = protocol::ParseAggregationList(value);
  if (!parsed.ok()) return UsageError(absl::StrCat("--agg: ", parsed.status().message()));
  if (parsed->size() != 1) {
    return UsageError(absl::StrCat("--agg: give one aggregation to compare, not \"", value, "\""));
  }
  return (*parsed)[0];
}

absl::StatusOr<Command> BuildRanks(const SplitCommandLine& line) {
  RanksCommand command;
  if (absl::Status s = TakeStat(line, command.stat); !s.ok()) return s;
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    } else if (flag == Flag::kAgg) {
      auto aggregation = ParseComparedAggregation(value);
      if (!aggregation.ok()) return aggregation.status();
      command.aggregation = *aggregation;
    } else if (flag == Flag::kRankLabel) {
      if (value.empty()) return UsageError("--rank-label is empty");
      command.rank_label = value;
    } else if (flag == Flag::kWindowStart) {
      if (!absl::SimpleAtoi(value, &command.window_start_ms) || command.window_start_ms <= 0) {
        return UsageError(absl::StrCat("--window-start: \"", value,
                                       "\" is not a window start in Unix milliseconds"));
      }
    }
  }
  return command;
}

absl::StatusOr<Command> BuildTop(const SplitCommandLine& line) {
  TopCommand command;
  if (absl::Status s = CheckPositionalCount(line, 0, 0, ""); !s.ok()) return s;
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    } else if (flag == Flag::kAgg) {
      auto aggregation = ParseComparedAggregation(value);
      if (!aggregation.ok()) return aggregation.status();
      command.aggregation = *aggregation;
    } else if (flag == Flag::kInterval) {
      auto ms = ParseDurationFlag("--interval", value);
      if (!ms.ok()) return ms.status();
      if (*ms < 100) return UsageError("--interval: at least 100ms");
      command.interval_ms = *ms;
    } else if (flag == Flag::kCount) {
      if (!absl::SimpleAtoi(value, &command.count) || command.count < 1) {
        return UsageError(absl::StrCat("--count: \"", value, "\" is not a positive integer"));
      }
    }
  }
  return command;
}

absl::StatusOr<Command> BuildEvents(const SplitCommandLine& line) {
  EventsCommand command;
  if (absl::Status s = CheckPositionalCount(line, 0, 1, ""); !s.ok()) return s;
  if (!line.positionals.empty()) {
    command.name = line.positionals[0];
    if (absl::Status s = CheckName("NAME", command.name); !s.ok()) return s;
  }
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    } else if (flag == Flag::kLast) {
      auto n = ParseLast(value);
      if (!n.ok()) return n.status();
      command.last = *n;
    }
  }
  return command;
}

absl::StatusOr<Command> BuildWatch(const SplitCommandLine& line) {
  WatchCommand command;
  if (absl::Status s = CheckPositionalCount(line, 0, 1, ""); !s.ok()) return s;
  if (!line.positionals.empty()) {
    command.stat = line.positionals[0];
    if (absl::Status s = CheckName("STAT", command.stat); !s.ok()) return s;
  }
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    }
  }
  return command;
}

absl::StatusOr<Command> BuildPush(const SplitCommandLine& line) {
  PushCommand command;
  if (absl::Status s = CheckPositionalCount(line, 2, std::numeric_limits<size_t>::max(),
                                            "a STAT and at least one VALUE");
      !s.ok()) {
    return s;
  }
  command.stat = line.positionals[0];
  if (absl::Status s = CheckName("STAT", command.stat); !s.ok()) return s;
  for (size_t i = 1; i < line.positionals.size(); ++i) {
    auto value = ParseSampleValue(line.positionals[i]);
    if (!value.ok()) return UsageError(absl::StrCat("VALUE: ", value.status().message()));
    command.values.push_back(*value);
  }

  absl::string_view aggregations = kDefaultPushAggregations;
  int64_t window_ms = kDefaultPushWindowMs;
  int64_t max_samples = 0;
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kAgg) {
      aggregations = value;
    } else if (flag == Flag::kWindow) {
      auto ms = ParseDurationFlag("--window", value);
      if (!ms.ok()) return ms.status();
      window_ms = *ms;
    } else if (flag == Flag::kMaxSamples) {
      if (!absl::SimpleAtoi(value, &max_samples) || max_samples < 0) {
        return UsageError(absl::StrCat("--max-samples: \"", value,
                                       "\" is not a non-negative integer (0 means unlimited)"));
      }
    } else if (flag == Flag::kHistogram) {
      command.spec.set_histogram(true);
    } else if (flag == Flag::kAt) {
      int64_t at_ms = 0;
      if (!absl::SimpleAtoi(value, &at_ms) || at_ms <= 0) {
        return UsageError(absl::StrCat("--at: \"", value,
                                       "\" is not a positive number of Unix milliseconds"));
      }
      command.at_ms = at_ms;
    } else if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    }
  }
  auto parsed = protocol::ParseAggregationList(aggregations);
  if (!parsed.ok()) return UsageError(absl::StrCat("--agg: ", parsed.status().message()));
  for (const protocol::NamedAggregation& aggregation : *parsed) {
    protocol::AddToSpec(aggregation, &command.spec);
  }
  command.spec.set_window_size_ms(window_ms);
  command.spec.set_max_samples(max_samples);
  if (window_ms < protocol::kMinWindowMs || window_ms > protocol::kMaxWindowMs) {
    return UsageError(absl::StrCat("--window: ", protocol::FormatDurationMs(window_ms),
                                   " is outside [",
                                   protocol::FormatDurationMs(protocol::kMinWindowMs), ", ",
                                   protocol::FormatDurationMs(protocol::kMaxWindowMs), "]"));
  }
  if (absl::Status s = protocol::ValidateSpec(command.spec); !s.ok()) {
    return UsageError(s.message());
  }
  return command;
}

absl::StatusOr<Command> BuildEvent(const SplitCommandLine& line) {
  EventCommand command;
  if (absl::Status s =
          CheckPositionalCount(line, 1, std::numeric_limits<size_t>::max(), "an event NAME");
      !s.ok()) {
    return s;
  }
  command.name = line.positionals[0];
  if (absl::Status s = CheckName("NAME", command.name); !s.ok()) return s;
  for (size_t i = 1; i < line.positionals.size(); ++i) {
    const std::string& item = line.positionals[i];
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return UsageError(absl::StrCat("event data \"", item, "\" is not of the form key=value"));
    }
    std::string key = item.substr(0, eq);
    if (!protocol::IsValidUtf8(item)) {
      return UsageError(absl::StrCat("event data \"", key, "\" is not valid UTF-8"));
    }
    if (command.data.count(key) != 0) {
      return UsageError(absl::StrCat("event data key \"", key, "\" is given twice"));
    }
    command.data.emplace(std::move(key), InferEventValue(absl::string_view(item).substr(eq + 1)));
  }
  for (const auto& [flag, value] : line.flags) {
    if (flag == Flag::kLabel) {
      if (absl::Status s = AddLabel(value, command.labels); !s.ok()) return s;
    }
  }
  return command;
}

absl::StatusOr<Command> BuildCommand(const SplitCommandLine& line) {
  if (line.command == "series") return BuildSeries(line);
  if (line.command == "windows") return BuildWindows(line);
  if (line.command == "events") return BuildEvents(line);
  if (line.command == "watch") return BuildWatch(line);
  if (line.command == "ranks") return BuildRanks(line);
  if (line.command == "top") return BuildTop(line);
  if (line.command == "push") return BuildPush(line);
  return BuildEvent(line);
}

// True for the decimal grammar [+-]? (D+ (. D*)? | . D+) ([eE] [+-]? D+)?.
bool IsDecimalNumber(absl::string_view s) {
  size_t i = 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < s.size() && absl::ascii_isdigit(static_cast<unsigned char>(s[i]))) ++i;
    return i - start;
  };
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  size_t mantissa_digits = digits();
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa_digits += digits();
  }
  if (mantissa_digits == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == s.size();
}

bool IsIntegerLiteral(absl::string_view s) {
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<double> ParseSampleValue(absl::string_view text) {
  const std::string lower = absl::AsciiStrToLower(text);
  absl::string_view unsigned_part = lower;
  bool negative = false;
  if (!unsigned_part.empty() && (unsigned_part[0] == '+' || unsigned_part[0] == '-')) {
    negative = unsigned_part[0] == '-';
    unsigned_part.remove_prefix(1);
  }
  if (unsigned_part == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (unsigned_part == "inf" || unsigned_part == "infinity") {
    return negative ? -std::numeric_limits<double>::infinity()
                    : std::numeric_limits<double>::infinity();
  }
  if (!IsDecimalNumber(lower)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a decimal number, nan, inf or -inf"));
  }
  // strtod follows the "C" locale: torchmonctl never calls setlocale.
  const double value = std::strtod(lower.c_str(), nullptr);
  if (std::isinf(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is out of the range of a double"));
  }
  return value;
}

EventValue InferEventValue(absl::string_view text) {
  if (IsIntegerLiteral(text)) {
    int64_t n;
    if (absl::SimpleAtoi(text, &n)) return n;
  }
  if (auto number = ParseSampleValue(text); number.ok()) return *number;
  if (text == "true") return true;
  if (text == "false") return false;
  return std::string(text);
}

absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args,
                                            std::string default_target) {
  Invocation invocation;
  bool target_given = false;
  SplitCommandLine line;
  const CommandSpec* command = nullptr;
  bool flags_ended = false;

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (!flags_ended && arg == "--") {
      flags_ended = true;
      continue;
    }
    // "-" alone and negative numbers ("-1", "-inf") are values, not flags.
    const bool is_flag =
        !flags_ended && arg.size() > 1 && arg[0] == '-' && !ParseSampleValue(arg).ok();
    if (!is_flag) {
      if (command == nullptr) {
        command = FindCommand(arg);
        if (command == nullptr) {
          return UsageError(absl::StrCat("unknown command \"", arg, "\""));
        }
        line.command = arg;
      } else {
        line.positionals.push_back(arg);
      }
      continue;
    }

    const size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq);
    const FlagSpec* spec = FindFlag(kGlobalFlags, name);
    if (spec == nullptr && command != nullptr) spec = FindFlag(command->flags, name);
    if (spec == nullptr) {
      if (command == nullptr) {
        return UsageError(
            absl::StrCat("unknown flag ", name, " (flags of a command go after the command)"));
      }
      return UsageError(absl::StrCat("unknown flag ", name, " for command ", command->name));
    }
    std::string value;
    if (spec->takes_value()) {
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return UsageError(absl::StrCat("flag ", name, " needs a value"));
      }
    } else if (eq != std::string::npos) {
      return UsageError(absl::StrCat("flag ", name, " takes no value"));
    }

    switch (spec->flag) {
      case Flag::kHelp:
        invocation.command = HelpRequest{line.command};
        return invocation;
      case Flag::kTarget:
        if (value.empty()) return UsageError("--target is empty");
        invocation.global.target = value;
        target_given = true;
        break;
      case Flag::kJson:
        invocation.global.json = true;
        break;
      case Flag::kTokenFile:
      case Flag::kTlsCa:
      case Flag::kTlsCert:
      case Flag::kTlsKey:
      case Flag::kTlsServerName: {
        if (value.empty()) return UsageError(absl::StrCat(name, " is empty"));
        ClientSecurity& security = invocation.global.security;
        std::string* field = spec->flag == Flag::kTokenFile ? &security.token_file
                             : spec->flag == Flag::kTlsCa   ? &security.tls_ca_file
                             : spec->flag == Flag::kTlsCert ? &security.tls_cert_file
                             : spec->flag == Flag::kTlsKey  ? &security.tls_key_file
                                                            : &security.tls_server_name;
        *field = std::move(value);
        break;
      }
      case Flag::kTimeout: {
        auto ms = ParseDurationFlag("--timeout", value);
        if (!ms.ok()) return ms.status();
        if (*ms <= 0) return UsageError("--timeout must be longer than 0ms");
        invocation.global.timeout_ms = *ms;
        break;
      }
      default:
        line.flags.emplace_back(spec->flag, std::move(value));
    }
  }

  if (!target_given) invocation.global.target = std::move(default_target);
  if (absl::StartsWith(invocation.global.target, "/")) {
    invocation.global.target = absl::StrCat("unix://", invocation.global.target);
  }
  if (command == nullptr) return UsageError("no command given");

  auto built = BuildCommand(line);
  if (!built.ok()) return built.status();
  invocation.command = *std::move(built);
  return invocation;
}

bool IsCommand(absl::string_view name) { return FindCommand(name) != nullptr; }

namespace {

constexpr size_t kUsageWidth = 80;
// Where a flag's help starts: "  --stat GLOB         stat name, ...".
constexpr size_t kHelpColumn = 22;

// `first` followed by `items`, wrapped at kUsageWidth; continuation lines
// start under the first item.
std::string WrapSynopsis(absl::string_view first, const std::vector<std::string>& items,
                         size_t indent) {
  std::string out(first);
  size_t line_start = 0;
  bool line_empty = absl::EndsWith(first, " ");
  for (const std::string& item : items) {
    if (!line_empty && out.size() - line_start + 1 + item.size() > kUsageWidth) {
      out.push_back('\n');
      line_start = out.size();
      out.append(indent, ' ');
      line_empty = true;
    }
    if (!line_empty) out.push_back(' ');
    out += item;
    line_empty = false;
  }
  return out;
}

// The synopsis items of a command: its arguments, then "[--flag VALUE]" each.
std::vector<std::string> SynopsisItems(const CommandSpec& command) {
  std::vector<std::string> items;
  if (!command.arguments.empty()) items.emplace_back(command.arguments);
  for (const FlagSpec& flag : command.flags) {
    items.push_back(absl::StrCat("[", flag.name, flag.takes_value() ? " " : "", flag.value, "]",
                                 flag.repeatable ? "..." : ""));
  }
  return items;
}

// "  --flag VALUE        help", one line per line of help.
std::string FlagList(absl::Span<const FlagSpec> flags) {
  std::string out;
  for (const FlagSpec& flag : flags) {
    std::string shown = absl::StrCat("  ", flag.alias, flag.alias.empty() ? "" : ", ", flag.name,
                                     flag.takes_value() ? " " : "", flag.value);
    if (shown.size() < kHelpColumn) {
      shown.append(kHelpColumn - shown.size(), ' ');
    } else {
      absl::StrAppend(&shown, "\n", std::string(kHelpColumn, ' '));
    }
    out += shown;
    bool first_line = true;
    for (absl::string_view line : absl::StrSplit(flag.help, '\n')) {
      if (!first_line) out.append(kHelpColumn, ' ');
      absl::StrAppend(&out, line, "\n");
      first_line = false;
    }
  }
  return out;
}

std::string GlobalFlagsText() {
  return absl::StrCat("Global flags (before or after the command):\n", FlagList(kGlobalFlags));
}

}  // namespace

std::string UsageText(absl::string_view command) {
  if (const CommandSpec* spec = FindCommand(command); spec != nullptr) {
    const std::string first = absl::StrCat("Usage: torchmonctl ", spec->name, " ");
    return absl::StrCat(WrapSynopsis(first, SynopsisItems(*spec), first.size()), "\n\n",
                        spec->description, "\n\n", FlagList(spec->flags), "\n",
                        GlobalFlagsText());
  }
  std::vector<std::string> global;
  for (const FlagSpec& flag : kGlobalFlags) {
    if (flag.synopsis == kHidden) continue;
    global.push_back(flag.synopsis.empty()
                         ? absl::StrCat("[", flag.name, flag.takes_value() ? " " : "",
                                        flag.value, "]")
                         : std::string(flag.synopsis));
  }
  global.emplace_back("COMMAND ...");
  constexpr absl::string_view kTool = "Usage: torchmonctl ";
  std::string out = absl::StrCat(WrapSynopsis(kTool, global, kTool.size()), "\n\n",
                                 "Queries and feeds torchmond, the torchmon daemon.\n\n",
                                 "Commands:\n");
  for (const CommandSpec& spec : Commands()) {
    const std::string first = absl::StrCat("  ", spec.name, " ");
    absl::StrAppend(&out, WrapSynopsis(first, SynopsisItems(spec), first.size()), "\n      ",
                    spec.summary, "\n");
  }
  absl::StrAppend(&out, "\n", GlobalFlagsText(),
                  "\nExit status: 0 success; 1 the daemon answered with an error or refused\n"
                  "something; 2 usage error; 3 the daemon could not be reached in time.\n"
                  "Run 'torchmonctl COMMAND --help' for a command's flags.\n");
  return out;
}

}  // namespace torchmon::cli

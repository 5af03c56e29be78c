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
#include "cli/command_table.h"

namespace torchmon::cli {
namespace {

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
  if (line.positionals.empty()) {
    // What names a synchronous job's straggler (docs/torch-metrics.md).
    command.stat = kDefaultRanksStat;
  } else if (absl::Status s = TakeStat(line, command.stat); !s.ok()) {
    return s;
  }
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
    const FlagSpec* spec = FindFlag(GlobalFlags(), name);
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

}  // namespace torchmon::cli

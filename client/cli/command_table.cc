#include "cli/command_table.h"

namespace torchmon::cli {
namespace {

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

}  // namespace

absl::Span<const FlagSpec> GlobalFlags() { return kGlobalFlags; }

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
      {"ranks", "[STAT]", "compare the ranks in one window: stragglers, spread, missing ranks",
       "Compares the ranks of each matching stat in one window: every rank's value,\n"
       "largest (slowest) first, its ratio to the median and its straggler score\n"
       "(distance above the median in robust standard deviations), the ranks flagged\n"
       "stragglers (score >= 3 and 1.2x the median), and the ranks missing that\n"
       "window; with a quantile (--agg p99), also that quantile of all the ranks'\n"
       "samples together. Series are grouped by stat and their labels other than the\n"
       "rank label, local_rank and host. STAT defaults to torch.dist.compute_s, each\n"
       "step's time outside collective waits (docs/torch-metrics.md, Stragglers).",
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

}  // namespace torchmon::cli

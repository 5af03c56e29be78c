#include "loadgen/options.h"

#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::loadgen {

std::string LoadgenUsage() {
  return "Usage: torchmon-loadgen (--target ADDR | --spawn-daemon PATH) [FLAGS]\n"
         "\n"
         "Drives torchmond through the real C++ client, then checks with ListSeries\n"
         "that every sample sent is accounted for (sent = accepted + capped + late +\n"
         "skewed + client_dropped, per series) and reports throughput and cost.\n"
         "\n"
         "Daemon (DURATION: 500ms, 2s, 1m):\n"
         "  --target ADDR          A running daemon: unix:///abs/path or host:port.\n"
         "  --daemon-pid PID       Its pid, to report its CPU time and peak RSS.\n"
         "  --spawn-daemon PATH    Start PATH (torchmond) on a temporary Unix socket,\n"
         "                         measure it, stop it with SIGTERM at the end.\n"
         "  --daemon-arg ARG       Extra flag for the spawned daemon (repeatable).\n"
         "Load:\n"
         "  --ranks N              Clients, one per rank (labels rank=i, job=loadgen-<id>).\n"
         "                         Default: 1\n"
         "  --processes            Run each rank in its own forked process (default: threads).\n"
         "  --stats N              Stats per rank. Default: 10\n"
         "  --threads-per-rank N   Producer threads per rank, each adding to its own\n"
         "                         subset of the rank's stats (N <= --stats). Default: 1\n"
         "  --rate R               Samples/s offered over all ranks; 0 = flat out. Default: 0\n"
         "  --duration DURATION    How long to produce. Default: 10s\n"
         "  --window DURATION      Window size of every stat. Default: 1s\n"
         "  --aggs LIST            Aggregations, e.g. mean,max. Default: mean\n"
         "  --max-samples N        Per-window cap of every stat (0 = none). Default: 0\n"
         "  --buffer-bytes N       ClientOptions.buffer_bytes of each rank. Default: 33554432\n"
         "Bounds and output:\n"
         "  --flush-timeout DURATION  Bound on each rank's final Flush. Default: 30s\n"
         "  --query-timeout DURATION  Deadline of the connect check and ListSeries. Default: 10s\n"
         "  --json                 One JSON object on stdout instead of the report.\n"
         "  -h, --help             This help.\n"
         "\n"
         "Exit: 0 accounting exact; 1 samples lost uncounted (or flush incomplete);\n"
         "2 usage error; 3 daemon unreachable.\n";
}

absl::StatusOr<LoadgenOptions> ParseLoadgenOptions(int argc, char** argv) {
  LoadgenOptions options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string inline_value;
    bool has_inline_value = false;
    if (absl::StartsWith(arg, "--")) {
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline_value = true;
      }
    }
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (has_inline_value) return inline_value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      return std::string(argv[++i]);
    };
    auto integer = [&](int64_t min, int64_t max) -> absl::StatusOr<int64_t> {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      int64_t n;
      if (!absl::SimpleAtoi(*v, &n) || n < min || n > max) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, " \"", *v, "\" is not an integer in [", min, ", ", max, "]"));
      }
      return n;
    };
    auto duration = [&]() -> absl::StatusOr<int64_t> {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      absl::StatusOr<int64_t> ms = protocol::ParseDurationMs(*v);
      if (!ms.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(arg, ": ", ms.status().message()));
      }
      return *ms;
    };
#define LOADGEN_ASSIGN(lhs, expr)     \
  do {                                \
    auto _v = (expr);                 \
    if (!_v.ok()) return _v.status(); \
    lhs = *_v;                        \
  } while (0)
    if (arg == "-h" || arg == "--help") {
      options.help = true;
    } else if (arg == "--target") {
      LOADGEN_ASSIGN(options.target, value());
    } else if (arg == "--spawn-daemon") {
      LOADGEN_ASSIGN(options.spawn_daemon, value());
    } else if (arg == "--daemon-arg") {
      std::string extra;
      LOADGEN_ASSIGN(extra, value());
      options.daemon_args.push_back(extra);
    } else if (arg == "--daemon-pid") {
      LOADGEN_ASSIGN(options.daemon_pid, integer(1, INT32_MAX));
    } else if (arg == "--ranks") {
      LOADGEN_ASSIGN(options.ranks, integer(1, 4096));
    } else if (arg == "--processes") {
      options.processes = true;
    } else if (arg == "--stats") {
      LOADGEN_ASSIGN(options.stats, integer(1, 1000000));
    } else if (arg == "--threads-per-rank") {
      LOADGEN_ASSIGN(options.threads_per_rank, integer(1, 256));
    } else if (arg == "--rate") {
      std::string text;
      LOADGEN_ASSIGN(text, value());
      if (!absl::SimpleAtod(text, &options.rate) || !std::isfinite(options.rate) ||
          options.rate < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--rate \"", text, "\" is not a non-negative number of samples/s"));
      }
    } else if (arg == "--duration") {
      LOADGEN_ASSIGN(options.duration_ms, duration());
      if (options.duration_ms <= 0) return absl::InvalidArgumentError("--duration must be > 0");
    } else if (arg == "--window") {
      LOADGEN_ASSIGN(options.window_ms, duration());
    } else if (arg == "--aggs") {
      std::string text;
      LOADGEN_ASSIGN(text, value());
      std::vector<protocol::NamedAggregation> parsed;
      LOADGEN_ASSIGN(parsed, protocol::ParseAggregationList(text));
      options.aggregations.clear();
      for (const protocol::NamedAggregation& a : parsed) {
        options.aggregations.emplace_back(protocol::AggregationAs<Aggregation>(a.aggregation),
                                          a.quantile);
      }
    } else if (arg == "--max-samples") {
      LOADGEN_ASSIGN(options.max_samples, integer(0, INT64_MAX));
    } else if (arg == "--buffer-bytes") {
      int64_t n;
      LOADGEN_ASSIGN(n, integer(static_cast<int64_t>(ClientOptions::kMinBufferBytes), int64_t{1} << 40));
      options.buffer_bytes = static_cast<size_t>(n);
    } else if (arg == "--flush-timeout") {
      LOADGEN_ASSIGN(options.flush_timeout_ms, duration());
    } else if (arg == "--query-timeout") {
      LOADGEN_ASSIGN(options.query_timeout_ms, duration());
    } else if (arg == "--json") {
      options.json = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag \"", arg, "\""));
    }
#undef LOADGEN_ASSIGN
  }
  if (options.help) return options;
  if (options.target.empty() == options.spawn_daemon.empty()) {
    return absl::InvalidArgumentError("give exactly one of --target ADDR and --spawn-daemon PATH");
  }
  if (!options.spawn_daemon.empty() && options.daemon_pid != 0) {
    return absl::InvalidArgumentError(
        "--daemon-pid is for --target; a spawned daemon's pid is known");
  }
  if (!options.daemon_args.empty() && options.spawn_daemon.empty()) {
    return absl::InvalidArgumentError("--daemon-arg needs --spawn-daemon");
  }
  if (options.threads_per_rank > options.stats) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads-per-rank ", options.threads_per_rank, " exceeds --stats ",
                     options.stats, ": each producer thread needs a stat of its own"));
  }
  if (options.window_ms < protocol::kMinWindowMs || options.window_ms > protocol::kMaxWindowMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--window must be between ", protocol::FormatDurationMs(protocol::kMinWindowMs), " and ",
        protocol::FormatDurationMs(protocol::kMaxWindowMs)));
  }
  if (options.aggregations.empty()) return absl::InvalidArgumentError("--aggs is empty");
  return options;
}

}  // namespace torchmon::loadgen

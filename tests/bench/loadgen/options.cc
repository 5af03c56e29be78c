#include "loadgen/options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loadgen/sync_job.h"
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
         "A synchronous job (--sync-job; docs/loadgen.md):\n"
         "  --sync-job             Play ranks of a synchronous training job: per step, each\n"
         "                         rank's torch.dist.compute_s and torch.dist.wait_s, the\n"
         "                         step as long as the slowest rank's compute plus --comm.\n"
         "                         --ranks ranks here; --window is the stats' window.\n"
         "  --job NAME             The job label (default: loadgen-<random>).\n"
         "  --host NAME            A host label on every rank (default: none).\n"
         "  --world N              Ranks in the whole job. Default: --ranks\n"
         "  --first-rank N         This process's first rank. Default: 0\n"
         "  --seed N               Draws of the job; the same in each of its processes. Default: 1\n"
         "  --step DURATION        Wall time between steps, numbered by the clock. Default: 200ms\n"
         "  --compute DURATION     A rank's mean compute per step. Default: 100ms\n"
         "  --comm DURATION        Communication after the slowest rank. Default: 20ms\n"
         "  --noise F              A step's compute noise, relative (normal). Default: 0.03\n"
         "  --rank-spread F        Each rank's fixed offset, relative (normal). Default: 0.01\n"
         "  --straggler R:F@N      Rank R computes F times as long from N steps after the first.\n"
         "  --straggler-file PATH  \"RANK FACTOR [STEP]\" (STEP: the clock's step number),\n"
         "                         re-read every step; empty or absent: no straggler.\n"
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
  std::string straggler;
  std::vector<std::string> given;  // flags of one mode only
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
    given.push_back(arg);
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
    } else if (arg == "--sync-job") {
      options.sync_job = true;
    } else if (arg == "--job") {
      LOADGEN_ASSIGN(options.job_name, value());
    } else if (arg == "--host") {
      LOADGEN_ASSIGN(options.host, value());
    } else if (arg == "--world") {
      LOADGEN_ASSIGN(options.world, integer(1, 1 << 20));
    } else if (arg == "--first-rank") {
      LOADGEN_ASSIGN(options.first_rank, integer(0, 1 << 20));
    } else if (arg == "--seed") {
      int64_t n;
      LOADGEN_ASSIGN(n, integer(0, INT64_MAX));
      options.seed = static_cast<uint64_t>(n);
    } else if (arg == "--step") {
      LOADGEN_ASSIGN(options.step_ms, duration());
    } else if (arg == "--compute") {
      LOADGEN_ASSIGN(options.compute_ms, duration());
    } else if (arg == "--comm") {
      LOADGEN_ASSIGN(options.comm_ms, duration());
    } else if (arg == "--noise" || arg == "--rank-spread") {
      std::string text;
      LOADGEN_ASSIGN(text, value());
      double f;
      if (!absl::SimpleAtod(text, &f) || !std::isfinite(f) || f < 0 || f > 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, " \"", text, "\" is not a relative spread in [0, 1]"));
      }
      (arg == "--noise" ? options.noise : options.rank_spread) = f;
    } else if (arg == "--straggler") {
      LOADGEN_ASSIGN(straggler, value());
    } else if (arg == "--straggler-file") {
      LOADGEN_ASSIGN(options.straggler_file, value());
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
  static const std::vector<std::string> kSyncOnly = {
      "--job",     "--host", "--world", "--first-rank",  "--seed",      "--step",
      "--compute", "--comm", "--noise", "--rank-spread", "--straggler", "--straggler-file"};
  static const std::vector<std::string> kNotSync = {"--processes", "--stats", "--threads-per-rank",
                                                    "--rate",      "--aggs",  "--max-samples"};
  const std::vector<std::string>& foreign = options.sync_job ? kNotSync : kSyncOnly;
  std::vector<std::string> misplaced;
  for (const std::string& flag : given) {
    if (std::find(foreign.begin(), foreign.end(), flag) != foreign.end() &&
        std::find(misplaced.begin(), misplaced.end(), flag) == misplaced.end()) {
      misplaced.push_back(flag);
    }
  }
  if (!misplaced.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        absl::StrJoin(misplaced, ", "),
        options.sync_job ? " cannot be used with --sync-job (its ranks add two stats a step)"
                         : " needs --sync-job"));
  }
  if (!options.sync_job) return options;
  if (options.world == 0) options.world = options.first_rank + options.ranks;
  if (options.first_rank + options.ranks > options.world) {
    return absl::InvalidArgumentError(absl::StrCat("ranks ", options.first_rank, " to ",
                                                   options.first_rank + options.ranks - 1,
                                                   " are not all within --world ", options.world));
  }
  if (options.step_ms <= 0 || options.compute_ms <= 0 || options.comm_ms < 0) {
    return absl::InvalidArgumentError("--step and --compute must be > 0, --comm >= 0");
  }
  if (!straggler.empty() && !options.straggler_file.empty()) {
    return absl::InvalidArgumentError("give --straggler or --straggler-file, not both");
  }
  if (!straggler.empty()) {
    absl::StatusOr<std::optional<Straggler>> parsed =
        ParseStraggler(straggler, options.world, /*words=*/false);
    if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat("--straggler: ",
                                                                     parsed.status().message()));
    options.straggler = *parsed;
  }
  return options;
}

}  // namespace torchmon::loadgen

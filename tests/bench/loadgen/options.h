// The command line of torchmon-loadgen (docs/loadgen.md is the user-facing
// reference). Parsing is pure: no I/O, no clock, no environment.
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_OPTIONS_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_OPTIONS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torchmon/client.h"

namespace torchmon::loadgen {

// Exit statuses, documented in docs/loadgen.md.
enum ExitCode : int {
  // Every sample sent is accounted for by the daemon, per series.
  kExitExact = 0,
  // Some series' sent != accepted + capped + late + skewed + client_dropped,
  // or the final flush did not complete: samples were lost uncounted (or
  // counted twice).
  kExitMismatch = 1,
  kExitUsage = 2,
  // The daemon could not be reached (or started), or did not answer a query.
  kExitUnreachable = 3,
};

// A rank of a --sync-job made slow: from step `from_step` on, its compute
// is `factor` times its own. Steps count from the first one played in
// --straggler, and by the wall clock (loadgen/sync_job.h) in a straggler
// file.
struct Straggler {
  int rank = -1;
  double factor = 1;
  int64_t from_step = 0;
};

struct LoadgenOptions {
  bool help = false;
  // Exactly one of target / spawn_daemon is set after parsing.
  std::string target;
  std::string spawn_daemon;              // path of a torchmond binary to start
  std::vector<std::string> daemon_args;  // extra flags for the spawned daemon
  int daemon_pid = 0;                    // externally started daemon, 0: unknown
  int ranks = 1;
  bool processes = false;  // one forked process per rank
  int stats = 10;          // per rank
  int threads_per_rank = 1;
  double rate = 0;  // samples/s over all ranks; 0: flat out
  int64_t duration_ms = 10000;
  int64_t window_ms = 1000;
  std::vector<StatAggregation> aggregations = {Aggregation::MEAN};
  int64_t max_samples = 0;
  size_t buffer_bytes = ClientOptions{}.buffer_bytes;
  int64_t flush_timeout_ms = 30000;
  int64_t query_timeout_ms = 10000;
  bool json = false;
  // --sync-job (loadgen/sync_job.h): this process plays ranks first_rank ..
  // first_rank + ranks - 1 of a synchronous job of `world` ranks.
  bool sync_job = false;
  std::string job_name;  // the job label; empty: loadgen-<random>
  std::string host;      // a host label on every rank; empty: none
  int world = 0;         // 0: ranks
  int first_rank = 0;
  uint64_t seed = 1;
  int64_t step_ms = 200;
  int64_t compute_ms = 100;
  int64_t comm_ms = 20;
  double noise = 0.03;
  double rank_spread = 0.01;
  std::optional<Straggler> straggler;  // --straggler RANK:FACTOR@STEPS
  std::string straggler_file;
};

// Parses argv (argv[0] is the program). InvalidArgument with a message
// naming the flag on any error.
absl::StatusOr<LoadgenOptions> ParseLoadgenOptions(int argc, char** argv);

std::string LoadgenUsage();

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_OPTIONS_H_

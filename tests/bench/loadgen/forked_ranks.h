// Ranks run as forked child processes (--processes). The children are forked
// before the parent touches gRPC, each builds its own RankWorker, and they
// talk to the parent over pipes in a line protocol:
//   child → parent: "ready" | "fail <message>", later the RankResult as
//                   "result ...", "stat <name> <added>", "flush-error ...",
//                   "error ..." lines and a closing "end";
//   parent → child: one line with the start time (steady_clock ticks,
//                   which are shared across processes: CLOCK_MONOTONIC).
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_FORKED_RANKS_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_FORKED_RANKS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loadgen/options.h"
#include "loadgen/rank_worker.h"

namespace torchmon::loadgen {

// Not thread-safe. The destructor kills (SIGKILL) and reaps children still
// running, so an early error return leaves nothing behind.
class ForkedRanks {
 public:
  // Forks options.ranks children. Must be called before this process
  // creates any gRPC object.
  static absl::StatusOr<std::unique_ptr<ForkedRanks>> Start(const LoadgenOptions& options,
                                                            const std::string& target,
                                                            const std::string& job);
  ~ForkedRanks();
  ForkedRanks(const ForkedRanks&) = delete;
  ForkedRanks& operator=(const ForkedRanks&) = delete;

  // Waits until every child connected (Unavailable naming the first that
  // failed, or DeadlineExceeded).
  absl::Status WaitReady(Clock::time_point deadline);
  // Tells every child to start producing at `start`.
  absl::Status Go(Clock::time_point start);
  // Collects every child's result and reaps it.
  absl::StatusOr<std::vector<RankResult>> Collect(Clock::time_point deadline);

 private:
  struct Child {
    pid_t pid = -1;
    int from_child = -1;  // read end
    int to_child = -1;    // write end
    std::string buffered;
  };
  ForkedRanks() = default;

  std::vector<Child> children_;
};

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_FORKED_RANKS_H_

// --sync-job: torchmon-loadgen plays the ranks of a synchronous training job
// as TORCHMON_TORCH_METRICS=1 reports them (docs/torch-metrics.md,
// "Stragglers"): per step, each rank's seconds of compute in
// torch.dist.compute_s and of waiting in collectives in torch.dist.wait_s.
// A step lasts as long as the slowest rank's compute plus the
// communication, as in DDP or FSDP, where every rank waits for the others
// at each collective: step time is the same on every rank, the split is not.
//
// Many processes, each beside its own daemon, play one job together without
// talking to each other: steps are numbered by the wall clock (the step in
// progress is floor(unix time / step)), and every process draws the same
// numbers for a step from (seed, step), so each knows the slowest rank of
// the whole job. A rank's compute is compute x its offset (normal around 1,
// --rank-spread, fixed for the seed) x the step's noise (normal around 1,
// --noise); a straggler's is that x its factor from a known step on
// (--straggler, or a file re-read every step: --straggler-file).
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_SYNC_JOB_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_SYNC_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loadgen/options.h"
#include "loadgen/rank_worker.h"
#include "torchmon/client.h"

namespace torchmon::loadgen {

// "RANK:FACTOR" or "RANK:FACTOR@STEP" (--straggler), or the same as
// whitespace-separated words "RANK FACTOR [STEP]" (a --straggler-file; an
// empty file is no straggler). RANK must be within [0, world).
absl::StatusOr<std::optional<Straggler>> ParseStraggler(const std::string& text, int world,
                                                        bool words);

// Each rank's fixed offset (normal around 1, --rank-spread): the same in
// every process of the job.
std::vector<double> RankOffsets(const LoadgenOptions& options);

// Every rank's compute seconds at `step` (wall-clock numbering), a pure
// function of its arguments: the same in every process of the job.
std::vector<double> StepComputes(const LoadgenOptions& options, const std::vector<double>& offsets,
                                 int64_t step, const std::optional<Straggler>& straggler);

class SyncJob {
 public:
  // Ranks first_rank .. first_rank + ranks - 1 of the job, each a client
  // with labels job, rank, local_rank and host (if given).
  SyncJob(const LoadgenOptions& options, const std::string& target, const std::string& job);
  ~SyncJob();

  // Waits until the daemon acknowledged every rank's stat definitions.
  absl::Status Connect(std::chrono::milliseconds timeout);

  // Plays steps from `start` to start + duration, then flushes every rank
  // (bounded) and returns each one's accounting.
  std::vector<RankResult> Run(Clock::time_point start);

 private:
  struct Rank;
  std::optional<Straggler> ReadStragglerFile();

  const LoadgenOptions options_;
  const std::vector<double> offsets_;  // RankOffsets
  std::vector<std::unique_ptr<Rank>> ranks_;
  // The straggler file's last contents, re-parsed only when they change.
  std::string file_text_;
  std::optional<Straggler> file_straggler_;
};

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_SYNC_JOB_H_

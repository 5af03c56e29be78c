// One simulated training rank: a torchmon::Client with its Stats and the
// producer threads that feed them at a paced or unlimited rate.
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_RANK_WORKER_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_RANK_WORKER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "loadgen/options.h"
#include "torchmon/client.h"

namespace torchmon::loadgen {

using Clock = std::chrono::steady_clock;

// What one rank did, collected after its final flush. Plain data, so that a
// forked rank can send it to the parent as text.
struct RankResult {
  int rank = 0;
  // Per stat, in stat order: name and Stat::added() (= samples sent by
  // this rank into the series rank=<rank>, stat=<name>).
  std::vector<std::pair<std::string, uint64_t>> added;
  uint64_t client_dropped = 0;      // Client::Stats().samples_dropped
  uint64_t samples_written = 0;     // Client::Stats().samples_sent
  double produce_seconds = 0;       // start → last producer thread done
  double total_seconds = 0;         // start → final flush returned
  double cpu_seconds = -1;          // own CPU over that span; forked ranks only
  std::string flush_error;          // empty: the final flush was acknowledged
  std::vector<std::string> errors;  // Client::TakeErrors()
};

// Stat names are "loadgen.s<index>", zero-padded so that they sort.
std::string StatName(int index);

// What every rank's client is made with: `labels` (job and rank at least),
// nothing from the environment, the options' buffer, quiet, named
// "torchmon-loadgen <name>", and a short destructor flush.
ClientOptions RankClientOptions(const LoadgenOptions& options, const std::string& target,
                                std::vector<std::pair<std::string, std::string>> labels,
                                const std::string& name);

// Waits until the daemon acknowledged everything `client` sent so far (its
// stat definitions): Unavailable, naming `rank`, on timeout.
absl::Status ConnectRank(Client& client, int rank, std::chrono::milliseconds timeout);

// A rank's accounting once it stopped producing at `produced`: its final
// flush (bounded by options.flush_timeout_ms), what each of `stats` added,
// and the client's counters and errors.
RankResult FinishRank(const LoadgenOptions& options, Client& client, int rank,
                      const std::vector<const Stat*>& stats, Clock::time_point start,
                      Clock::time_point produced);

// Not thread-safe: one caller drives Connect → Run.
class RankWorker {
 public:
  // Creates the client (labels rank=<rank>, job=<job>, nothing from the
  // environment) and its options.stats stats. Connects in the background.
  RankWorker(const LoadgenOptions& options, const std::string& target, const std::string& job,
             int rank);
  ~RankWorker();

  // Waits until the daemon acknowledged every stat definition, so that the
  // measured phase starts on a live stream. Unavailable on timeout.
  absl::Status Connect(std::chrono::milliseconds timeout);

  // Waits for `start`, produces until start + duration (threads_per_rank
  // threads, `rate_per_thread` samples/s each, 0 = unlimited), then flushes
  // (bounded by options.flush_timeout_ms) and returns the accounting.
  RankResult Run(Clock::time_point start, double rate_per_thread);

 private:
  const LoadgenOptions options_;
  const int rank_;
  std::unique_ptr<Client> client_;
  std::vector<std::unique_ptr<Stat>> stats_;
};

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_RANK_WORKER_H_

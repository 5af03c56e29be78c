#include "loadgen/rank_worker.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loadgen/process_metrics.h"

namespace torchmon::loadgen {
namespace {

// Flat out, a producer checks the clock once per this many samples: at
// ~25 ns an add, that is every ~25 µs.
constexpr uint64_t kMaxBurst = 1024;
// Paced producers add in chunks of about this much time's worth of samples,
// so pacing costs one sleep per millisecond, not one per sample.
constexpr double kPacingQuantumSeconds = 0.01;

Clock::duration SecondsToClock(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double ClockToSeconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Adds round-robin to `stats` until `end`, at `rate` samples/s measured
// from `start` (0: as fast as possible). Catching up after a stall is
// bounded by kMaxBurst per clock check, so a paced producer that falls
// behind simply runs flat out.
void Produce(const std::vector<Stat*>& stats, Clock::time_point start, Clock::time_point end,
             double rate) {
  std::this_thread::sleep_until(start);
  const uint64_t chunk =
      rate > 0
          ? std::clamp<uint64_t>(static_cast<uint64_t>(rate * kPacingQuantumSeconds), 1, kMaxBurst)
          : kMaxBurst;
  uint64_t produced = 0;
  size_t next = 0;
  double value = 0;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= end) break;
    uint64_t batch = chunk;
    if (rate > 0) {
      const auto due = static_cast<uint64_t>(rate * ClockToSeconds(now - start));
      if (due <= produced) {
        const Clock::time_point wake =
            start + SecondsToClock(static_cast<double>(produced + chunk) / rate);
        std::this_thread::sleep_until(std::min(wake, end));
        continue;
      }
      batch = std::min(due - produced, kMaxBurst);
    }
    for (uint64_t i = 0; i < batch; ++i) {
      stats[next]->add(value);
      value += 1;
      if (++next == stats.size()) next = 0;
    }
    produced += batch;
  }
}

}  // namespace

std::string StatName(int index) { return absl::StrFormat("loadgen.s%05d", index); }

ClientOptions RankClientOptions(const LoadgenOptions& options, const std::string& target,
                                std::vector<std::pair<std::string, std::string>> labels,
                                const std::string& name) {
  ClientOptions client_options;
  client_options.target = target;
  client_options.labels = std::move(labels);
  client_options.labels_from_environment = false;
  client_options.buffer_bytes = options.buffer_bytes;
  client_options.log_to_stderr = false;
  client_options.client_name = absl::StrCat("torchmon-loadgen ", name);
  // The rank already flushed; a daemon gone by then must not hold up the exit.
  client_options.destructor_flush_timeout = std::chrono::milliseconds(500);
  return client_options;
}

absl::Status ConnectRank(Client& client, int rank, std::chrono::milliseconds timeout) {
  absl::Status status = client.Flush(timeout);
  if (!status.ok()) {
    return absl::UnavailableError(
        absl::StrCat("rank ", rank, " could not reach the daemon: ", status.message()));
  }
  return absl::OkStatus();
}

RankResult FinishRank(const LoadgenOptions& options, Client& client, int rank,
                      const std::vector<const Stat*>& stats, Clock::time_point start,
                      Clock::time_point produced) {
  RankResult result;
  result.rank = rank;
  const absl::Status flushed = client.Flush(std::chrono::milliseconds(options.flush_timeout_ms));
  if (!flushed.ok()) result.flush_error = std::string(flushed.message());
  result.produce_seconds = ClockToSeconds(produced - start);
  result.total_seconds = ClockToSeconds(Clock::now() - start);
  for (const Stat* stat : stats) result.added.emplace_back(stat->name(), stat->added());
  const ClientStats client_stats = client.Stats();
  result.client_dropped = client_stats.samples_dropped;
  result.samples_written = client_stats.samples_sent;
  result.errors = client.TakeErrors();
  return result;
}

RankWorker::RankWorker(const LoadgenOptions& options, const std::string& target,
                       const std::string& job, int rank)
    : options_(options), rank_(rank) {
  client_ = std::make_unique<Client>(RankClientOptions(
      options, target, {{"job", job}, {"rank", absl::StrCat(rank)}}, absl::StrCat("rank=", rank)));
  const std::chrono::milliseconds window(options.window_ms);
  stats_.reserve(static_cast<size_t>(options.stats));
  for (int s = 0; s < options.stats; ++s) {
    stats_.push_back(std::make_unique<Stat>(*client_, StatName(s), options.aggregations, window,
                                            options.max_samples));
  }
}

RankWorker::~RankWorker() {
  stats_.clear();
  client_.reset();
}

absl::Status RankWorker::Connect(std::chrono::milliseconds timeout) {
  return ConnectRank(*client_, rank_, timeout);
}

RankResult RankWorker::Run(Clock::time_point start, double rate_per_thread) {
  const Clock::time_point end = start + std::chrono::milliseconds(options_.duration_ms);
  const int threads = options_.threads_per_rank;
  std::vector<std::vector<Stat*>> subsets(static_cast<size_t>(threads));
  for (size_t s = 0; s < stats_.size(); ++s) {
    subsets[s % static_cast<size_t>(threads)].push_back(stats_[s].get());
  }
  std::this_thread::sleep_until(start);
  const double cpu_start = options_.processes ? SelfCpuSeconds() : 0;
  std::vector<std::thread> producers;
  producers.reserve(subsets.size());
  for (const std::vector<Stat*>& subset : subsets) {
    producers.emplace_back(Produce, std::cref(subset), start, end, rate_per_thread);
  }
  for (std::thread& t : producers) t.join();
  const Clock::time_point produced = Clock::now();

  std::vector<const Stat*> stats;
  for (const auto& stat : stats_) stats.push_back(stat.get());
  RankResult result = FinishRank(options_, *client_, rank_, stats, start, produced);
  if (options_.processes) result.cpu_seconds = SelfCpuSeconds() - cpu_start;
  return result;
}

}  // namespace torchmon::loadgen

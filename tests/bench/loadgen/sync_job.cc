#include "loadgen/sync_job.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::loadgen {
namespace {

constexpr char kComputeStat[] = "torch.dist.compute_s";
constexpr char kWaitStat[] = "torch.dist.wait_s";
// Domains of the draws, so that a rank's offset and its noise at a step
// never share a stream.
constexpr uint64_t kOffsetDomain = 0x6f6666736574ULL;
constexpr uint64_t kNoiseDomain = 0x6e6f697365ULL;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A standard normal draw, a pure function of its keys (Box-Muller on two
// uniform numbers from SplitMix64): the same in every process, on every
// machine, unlike std::normal_distribution.
double Normal(uint64_t seed, uint64_t domain, uint64_t a, uint64_t b) {
  const uint64_t key = SplitMix64(SplitMix64(SplitMix64(seed ^ domain) ^ a) ^ b);
  const double u1 = (static_cast<double>(SplitMix64(key) >> 11) + 0.5) * 0x1.0p-53;
  const double u2 = static_cast<double>(SplitMix64(key + 1) >> 11) * 0x1.0p-53;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * u2);
}

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

absl::StatusOr<std::optional<Straggler>> ParseStraggler(const std::string& text, int world,
                                                        bool words) {
  const absl::string_view trimmed = absl::StripAsciiWhitespace(text);
  if (trimmed.empty()) return std::optional<Straggler>();
  const std::vector<absl::string_view> parts =
      words ? std::vector<absl::string_view>(
                  absl::StrSplit(trimmed, absl::ByAnyChar(" \t\n"), absl::SkipEmpty()))
            : std::vector<absl::string_view>(absl::StrSplit(trimmed, absl::ByAnyChar(":@")));
  Straggler s;
  const bool ok = (parts.size() == 2 || parts.size() == 3) && absl::SimpleAtoi(parts[0], &s.rank) &&
                  absl::SimpleAtod(parts[1], &s.factor) &&
                  (parts.size() == 2 || absl::SimpleAtoi(parts[2], &s.from_step));
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "straggler \"", trimmed, "\" is not ",
        words ? "\"RANK FACTOR [STEP]\"" : "RANK:FACTOR or RANK:FACTOR@STEPS"));
  }
  if (s.rank < 0 || s.rank >= world) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler rank ", s.rank, " is not a rank of the job: 0 to ", world - 1));
  }
  if (!std::isfinite(s.factor) || s.factor <= 0 || s.factor > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("straggler factor ", parts[1], " is outside (0, 100]"));
  }
  if (s.from_step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("straggler step ", s.from_step, " < 0"));
  }
  return std::optional<Straggler>(s);
}

std::vector<double> RankOffsets(const LoadgenOptions& options) {
  std::vector<double> offsets(static_cast<size_t>(options.world));
  for (size_t r = 0; r < offsets.size(); ++r) {
    offsets[r] = std::max(1 + options.rank_spread * Normal(options.seed, kOffsetDomain, r, 0), 0.01);
  }
  return offsets;
}

std::vector<double> StepComputes(const LoadgenOptions& options, const std::vector<double>& offsets,
                                 int64_t step, const std::optional<Straggler>& straggler) {
  const double compute = static_cast<double>(options.compute_ms) / 1000;
  std::vector<double> computes(offsets.size());
  for (size_t r = 0; r < offsets.size(); ++r) {
    const double noise =
        1 + options.noise * Normal(options.seed, kNoiseDomain, static_cast<uint64_t>(step), r);
    computes[r] = compute * offsets[r] * std::max(noise, 0.01);
  }
  if (straggler && step >= straggler->from_step) {
    computes[static_cast<size_t>(straggler->rank)] *= straggler->factor;
  }
  return computes;
}

struct SyncJob::Rank {
  int rank = 0;
  std::unique_ptr<Client> client;
  std::unique_ptr<Stat> compute, wait;
};

SyncJob::SyncJob(const LoadgenOptions& options, const std::string& target, const std::string& job)
    : options_(options), offsets_(RankOffsets(options)) {
  const std::chrono::milliseconds window(options.window_ms);
  const std::vector<StatAggregation> aggregations{Aggregation::COUNT, Aggregation::MEAN,
                                                  Aggregation::SUM};
  for (int local = 0; local < options.ranks; ++local) {
    auto rank = std::make_unique<Rank>();
    rank->rank = options.first_rank + local;
    std::vector<std::pair<std::string, std::string>> labels = {
        {"job", job}, {"rank", absl::StrCat(rank->rank)}, {"local_rank", absl::StrCat(local)}};
    if (!options.host.empty()) labels.emplace_back("host", options.host);
    rank->client = std::make_unique<Client>(RankClientOptions(
        options, target, std::move(labels), absl::StrCat("sync rank=", rank->rank)));
    rank->compute = std::make_unique<Stat>(*rank->client, kComputeStat, aggregations, window);
    rank->wait = std::make_unique<Stat>(*rank->client, kWaitStat, aggregations, window);
    ranks_.push_back(std::move(rank));
  }
}

SyncJob::~SyncJob() {
  for (auto& rank : ranks_) {
    rank->compute.reset();
    rank->wait.reset();
    rank->client.reset();
  }
}

absl::Status SyncJob::Connect(std::chrono::milliseconds timeout) {
  for (auto& rank : ranks_) {
    if (absl::Status s = ConnectRank(*rank->client, rank->rank, timeout); !s.ok()) return s;
  }
  return absl::OkStatus();
}

std::optional<Straggler> SyncJob::ReadStragglerFile() {
  std::ifstream in(options_.straggler_file);
  if (!in) return file_straggler_;  // not there (yet): as before
  std::stringstream text;
  text << in.rdbuf();
  if (text.str() == file_text_) return file_straggler_;
  file_text_ = text.str();
  absl::StatusOr<std::optional<Straggler>> parsed =
      ParseStraggler(file_text_, options_.world, /*words=*/true);
  if (!parsed.ok()) {
    // Said once per change; the job goes on without a straggler.
    std::fprintf(stderr, "torchmon-loadgen: %s: %s; no straggler\n",
                 options_.straggler_file.c_str(), std::string(parsed.status().message()).c_str());
    file_straggler_.reset();
  } else {
    file_straggler_ = *parsed;
  }
  return file_straggler_;
}

std::vector<RankResult> SyncJob::Run(Clock::time_point start) {
  const Clock::time_point end = start + std::chrono::milliseconds(options_.duration_ms);
  const double step_s = static_cast<double>(options_.step_ms) / 1000;
  const double comm_s = static_cast<double>(options_.comm_ms) / 1000;
  std::this_thread::sleep_until(start);
  // The step in progress: the first played, recorded at its end.
  const auto first_step = static_cast<int64_t>(std::floor(UnixSeconds() / step_s));
  std::optional<Straggler> fixed = options_.straggler;
  // --straggler RANK:FACTOR@STEPS counts steps from the first one played.
  if (fixed) fixed->from_step += first_step;
  // Each step is recorded at its end, on the wall clock's step boundary.
  for (int64_t step = first_step;; ++step) {
    const double boundary = static_cast<double>(step + 1) * step_s;
    const double pause = boundary - UnixSeconds();
    if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause));
    if (Clock::now() >= end) break;
    const std::optional<Straggler> straggler =
        options_.straggler_file.empty() ? fixed : ReadStragglerFile();
    const std::vector<double> computes = StepComputes(options_, offsets_, step, straggler);
    const double lasted = *std::max_element(computes.begin(), computes.end()) + comm_s;
    for (auto& rank : ranks_) {
      const double compute = computes[static_cast<size_t>(rank->rank)];
      rank->compute->add(compute);
      rank->wait->add(lasted - compute);
    }
  }
  const Clock::time_point produced = Clock::now();
  std::vector<RankResult> results;
  for (auto& rank : ranks_) {
    results.push_back(FinishRank(options_, *rank->client, rank->rank,
                                 {rank->compute.get(), rank->wait.get()}, start, produced));
  }
  return results;
}

}  // namespace torchmon::loadgen

// The load generator's verdict: per-series accounting of what the ranks sent
// against what the daemon counted, plus throughput and cost, formatted as a
// short text report or one JSON object. Pure: no I/O, no clock.
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_REPORT_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_REPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "loadgen/options.h"
#include "loadgen/rank_worker.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::loadgen {

// Measured outside the ranks, over the measured phase (start of production
// to the last rank's final flush). Negative / zero: not known.
struct Measurements {
  std::string target;
  // The machine the figures came from (tests/bench/machine).
  std::string machine_line;
  std::string machine_json;
  int daemon_pid = 0;
  double client_cpu_seconds = -1;
  double daemon_cpu_seconds = -1;
  uint64_t daemon_peak_rss_bytes = 0;
  uint64_t daemon_rss_bytes = 0;
};

struct Report {
  std::string job;
  Measurements measurements;
  uint64_t series_expected = 0;
  uint64_t series_found = 0;
  // Totals over every series of the job.
  uint64_t sent = 0;  // sum of Stat::added()
  uint64_t accepted = 0;
  uint64_t capped = 0;
  uint64_t late = 0;
  uint64_t skewed = 0;
  uint64_t daemon_client_dropped = 0;  // SeriesCounters.client_dropped
  uint64_t client_dropped = 0;         // Client::Stats().samples_dropped
  double produce_seconds = 0;          // slowest rank
  double total_seconds = 0;            // slowest rank, including its final flush
  uint64_t mismatched_series = 0;
  // Why accounting is not exact, one line each, at most kMaxProblems kept.
  std::vector<std::string> problems;
  uint64_t problems_omitted = 0;
  // Refusals the daemon sent to the clients (at most a few kept).
  std::vector<std::string> client_errors;
  uint64_t client_error_count = 0;

  bool exact() const { return problems.empty(); }
};

inline constexpr size_t kMaxProblems = 20;

// Matches the daemon's series (labels job, rank; stat name) to each rank's
// Stat::added() and checks sent = accepted + capped + late + skewed +
// client_dropped per series and in total. A series missing at the daemon, an
// unexpected one, or an incomplete final flush also make it not exact.
Report BuildReport(const std::string& job, const std::vector<RankResult>& ranks,
                   const v1::ListSeriesResponse& series, const Measurements& measurements);

std::string FormatText(const LoadgenOptions& options, const Report& report);
std::string FormatJson(const LoadgenOptions& options, const Report& report);

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_REPORT_H_

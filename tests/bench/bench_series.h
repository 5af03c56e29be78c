// The series the scrape and push benchmarks share (exposition_bench.cc,
// push_bench.cc), so that their figures sit side by side in
// docs/performance.md: n series, 20 stat names × n/20 ranks (8 local ranks
// per host: job, rank, local_rank, host), three aggregations; with
// histograms also p50, p99 and a native histogram of 40 buckets (step
// times from 100 to 237 ms). Each gets one window's samples at kT0.
#ifndef TORCHMON_TESTS_BENCH_BENCH_SERIES_H_
#define TORCHMON_TESTS_BENCH_BENCH_SERIES_H_

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/core/aggregator.h"

namespace torchmon::server::bench {

constexpr int64_t kWindowMs = 10'000;
constexpr int64_t kT0 = 1'700'000'000'000;
// When every window the series got has closed.
constexpr int64_t kClosedMs = kT0 + kWindowMs + AggregatorOptions{}.grace_ms;

// Defines the n series in `aggregator` (whose clock reads kT0 + 1) and
// adds their samples. Aborts on failure: a benchmark without its series
// measures nothing.
inline void DefineSeries(Aggregator& aggregator, int n, bool histograms) {
  StatSpec spec;
  spec.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax) |
                      AggregationBit(Aggregation::kMin);
  spec.window_ms = kWindowMs;
  if (histograms) spec.quantiles = std::vector<double>{0.5, 0.99};
  std::vector<double> values = {0.25, 1.5, -3.0};
  if (histograms) {
    values.clear();
    for (int j = 0; j < 40; ++j) values.push_back(100 * std::exp2(j / 32.0));
  }
  std::vector<int64_t> ts;
  for (size_t j = 0; j < values.size(); ++j) ts.push_back((kT0 + 1) * 1000 + static_cast<int64_t>(j));
  for (int i = 0; i < n; ++i) {
    const int rank = i / 20;
    SeriesKey key{"train.stat_" + std::to_string(i % 20),
                  {{"host", "node" + std::to_string(rank / 8)},
                   {"job", "bench-job"},
                   {"local_rank", std::to_string(rank % 8)},
                   {"rank", std::to_string(rank)}}};
    auto id = aggregator.Define(key, spec);
    if (!histograms) values[0] = 0.25 + i;
    if (!id.ok() || !aggregator.AddSamples(*id, values, ts).ok()) std::abort();
  }
}

}  // namespace torchmon::server::bench

#endif  // TORCHMON_TESTS_BENCH_BENCH_SERIES_H_

// The cost of the quantile sketch (issue 7): per sample added, per quantile
// read, and beside it the running sums WindowStats keeps for the six
// torch.monitor aggregations, measured in the same binary.
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/core/quantile_sketch.h"
#include "server/core/types.h"

namespace torchmon::server {
namespace {

std::vector<double> StepTimes() {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<> step_ms(std::log(100.0), 0.3);
  std::vector<double> out(1 << 16);
  for (double& x : out) x = step_ms(rng);
  return out;
}

void BM_QuantileSketchAdd(benchmark::State& state) {
  const std::vector<double> samples = StepTimes();
  QuantileSketch sketch;
  size_t i = 0;
  for (auto _ : state) {
    sketch.Add(samples[i++ & (samples.size() - 1)]);
  }
  benchmark::DoNotOptimize(sketch.count());
  state.counters["buckets"] = static_cast<double>(sketch.bucket_count());
}
BENCHMARK(BM_QuantileSketchAdd);

void BM_WindowStatsAdd(benchmark::State& state) {  // the six aggregations, for comparison
  const std::vector<double> samples = StepTimes();
  WindowStats stats;
  size_t i = 0;
  for (auto _ : state) {
    stats.Add(samples[i++ & (samples.size() - 1)], 0);
  }
  benchmark::DoNotOptimize(stats.sum);
}
BENCHMARK(BM_WindowStatsAdd);

void BM_QuantileSketchP99(benchmark::State& state) {
  QuantileSketch sketch;
  for (double x : StepTimes()) sketch.Add(x);
  for (auto _ : state) benchmark::DoNotOptimize(sketch.Quantile(0.99));
  state.counters["buckets"] = static_cast<double>(sketch.bucket_count());
}
BENCHMARK(BM_QuantileSketchP99);

}  // namespace
}  // namespace torchmon::server

// The cost of one /metrics scrape for 1k, 10k and 100k series: the collector
// (snapshot into prometheus-cpp MetricFamily objects) and the text
// serialization, together and apart. Every series has a closed window with
// three aggregations and the identity labels job, rank, local_rank, host.
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/service/daemon_stats.h"
#include "server/service/metrics_collector.h"

namespace torchmon::server {
namespace {

constexpr int64_t kWindowMs = 10'000;
constexpr int64_t kT0 = 1'700'000'000'000;

// N series: 20 stat names × N/20 ranks (8 local ranks per host).
struct Exposition {
  explicit Exposition(int n)
      : clock(kT0 + 1),
        aggregator(AggregatorOptions{}, clock),
        events(1000, 600'000, clock),
        collector(aggregator, events, stats, "bench") {
    StatSpec spec;
    spec.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax) |
                        AggregationBit(Aggregation::kMin);
    spec.window_ms = kWindowMs;
    for (int i = 0; i < n; ++i) {
      const int rank = i / 20;
      SeriesKey key{"train.stat_" + std::to_string(i % 20),
                    {{"host", "node" + std::to_string(rank / 8)},
                     {"job", "bench-job"},
                     {"local_rank", std::to_string(rank % 8)},
                     {"rank", std::to_string(rank)}}};
      auto id = aggregator.Define(key, spec);
      const double values[] = {0.25 + i, 1.5, -3.0};
      const int64_t ts[] = {(kT0 + 1) * 1000, (kT0 + 2) * 1000, (kT0 + 3) * 1000};
      if (!id.ok() || !aggregator.AddSamples(*id, values, ts).ok()) std::abort();
    }
    clock.Set(kT0 + kWindowMs + AggregatorOptions{}.grace_ms);
    if (aggregator.CloseDueWindows().size() != static_cast<size_t>(n)) std::abort();
  }

  ManualClock clock;
  Aggregator aggregator;
  EventLog events;
  DaemonStats stats;
  MetricsCollector collector;
};

// Built once per size and kept for the whole run (repetitions reuse it).
Exposition& ExpositionOf(int n) {
  static auto* cache = new std::map<int, std::unique_ptr<Exposition>>;
  auto& e = (*cache)[n];
  if (e == nullptr) e = std::make_unique<Exposition>(n);
  return *e;
}

size_t MetricCount(const std::vector<prometheus::MetricFamily>& families) {
  size_t n = 0;
  for (const auto& f : families) n += f.metric.size();
  return n;
}

// Collect + Serialize: what one scrape of /metrics costs the daemon.
void BM_Scrape(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Exposition& e = ExpositionOf(n);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = prometheus::TextSerializer().Serialize(e.collector.Collect());
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes_per_scrape"] = static_cast<double>(bytes);
  state.counters["bytes_per_series"] = static_cast<double>(bytes) / n;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());  // series
}

// Collect alone: snapshotting the aggregator into MetricFamily objects.
void BM_Collect(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Exposition& e = ExpositionOf(n);
  size_t metrics = 0;
  for (auto _ : state) {
    std::vector<prometheus::MetricFamily> families = e.collector.Collect();
    metrics = MetricCount(families);
    benchmark::DoNotOptimize(families.data());
    benchmark::ClobberMemory();
  }
  // 11 samples per series: 3 aggregations, 3 last-window gauges, the window
  // size, accepted_total and 4 dropped_total reasons; plus self-metrics.
  if (metrics < static_cast<size_t>(n) * 11) state.SkipWithError("fewer metrics than expected");
  state.counters["metrics_per_scrape"] = static_cast<double>(metrics);
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());  // series
}

// Serialize alone, of one collected snapshot.
void BM_Serialize(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const std::vector<prometheus::MetricFamily> families = ExpositionOf(n).collector.Collect();
  size_t bytes = 0;
  for (auto _ : state) {
    std::string text = prometheus::TextSerializer().Serialize(families);
    bytes = text.size();
    benchmark::DoNotOptimize(text.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());  // series
}

BENCHMARK(BM_Scrape)->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Collect)->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Serialize)->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace torchmon::server

// The aggregation core on its own (no I/O, ManualClock): ingesting samples,
// closing the windows of many series, and querying a long history. Each
// benchmark checks the aggregator's own accounting afterwards, so a result
// cannot come from work that was skipped.
#include <malloc.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/core/selector.h"
#include "server/core/types.h"

namespace torchmon::server {
namespace {

constexpr int64_t kWindowMs = 10'000;
// The middle of a window: [1'700'000'000'000, 1'700'000'010'000).
constexpr int64_t kNowMs = 1'700'000'005'000;

// mean, max, min, and the first `quantiles` of p50, p99, p99.9.
// With `quantiles` (0 to 3: p50, p99, p99.9), and a native histogram when
// `histogram` or quantiles ask for one.
StatSpec MeanMaxMin(int64_t quantiles = 0, bool histogram = false) {
  StatSpec spec;
  spec.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax) |
                      AggregationBit(Aggregation::kMin);
  spec.window_ms = kWindowMs;
  constexpr double kQuantiles[] = {0.5, 0.99, 0.999};
  spec.quantiles = std::vector<double>(kQuantiles, kQuantiles + std::min<int64_t>(quantiles, 3));
  spec.histogram = histogram;
  return spec;
}

SeriesKey Key(int i) {
  return SeriesKey{"bench.stat", {{"job", "bench"}, {"rank", std::to_string(i)}}};
}

uint64_t TotalAccepted(const Aggregator& agg) {
  uint64_t n = 0;
  for (const SeriesSnapshot& s : agg.ListSeries(Selector{})) n += s.counters.accepted;
  return n;
}

// AddSamples per sample, one series, every sample inside the open window.
// Args: samples per call (block size); quantiles estimated (0 to 3); a
// native histogram (1; quantiles imply one).
void BM_AggregatorAddSamples(benchmark::State& state) {
  const size_t block = static_cast<size_t>(state.range(0));
  ManualClock clock(kNowMs);
  Aggregator agg(AggregatorOptions{}, clock);
  auto id = agg.Define(Key(0), MeanMaxMin(state.range(1), state.range(2) != 0));
  if (!id.ok()) return state.SkipWithError("Define failed");
  std::vector<double> values(block);
  std::vector<int64_t> timestamps(block);
  for (size_t i = 0; i < block; ++i) {
    values[i] = 0.5 + static_cast<double>(i % 100);
    // Up to 1 s before now, all in the same window.
    timestamps[i] = kNowMs * 1000 - static_cast<int64_t>(i % 1'000'000);
  }
  uint64_t accepted = 0;
  for (auto _ : state) {
    auto r = agg.AddSamples(*id, values, timestamps);
    accepted += r->accepted;
    benchmark::DoNotOptimize(r);
  }
  const uint64_t expected = state.iterations() * block;
  if (accepted != expected || TotalAccepted(agg) != expected) {
    state.SkipWithError("accounting mismatch: not every sample was accepted");
  }
  state.SetItemsProcessed(static_cast<int64_t>(expected));
}
BENCHMARK(BM_AggregatorAddSamples)
    ->ArgsProduct({{1, 64, 4096}, {0, 3}, {0, 1}})
    ->ArgNames({"block", "quantiles", "histogram"})
    ->MinTime(0.2);

// CloseDueWindows with N series each holding one open window that is due.
// Only the close is timed; refilling the windows for the next iteration is
// not. Arg: number of series.
void BM_AggregatorCloseDueWindows(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  ManualClock clock(kNowMs);
  AggregatorOptions options;
  options.history_windows = 120;
  Aggregator agg(options, clock);
  std::vector<SeriesId> ids;
  ids.reserve(n);
  for (int i = 0; i < n; ++i) {
    auto id = agg.Define(Key(i), MeanMaxMin());
    if (!id.ok()) return state.SkipWithError("Define failed");
    ids.push_back(*id);
  }
  int64_t window_start = kNowMs - kNowMs % kWindowMs;
  size_t closed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    clock.Set(window_start + kWindowMs / 2);
    const double v = 1.0;
    const int64_t ts = (window_start + 1) * 1000;
    for (SeriesId id : ids) {
      benchmark::DoNotOptimize(agg.AddSamples(id, {&v, 1}, {&ts, 1}));
    }
    clock.Set(window_start + kWindowMs + options.grace_ms);
    window_start += kWindowMs;
    state.ResumeTiming();

    std::vector<ClosedWindow> out = agg.CloseDueWindows();
    closed += out.size();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();

    state.PauseTiming();
    out = {};  // freeing the result is the caller's cost, not the close's
    state.ResumeTiming();
  }
  if (closed != state.iterations() * static_cast<size_t>(n)) {
    state.SkipWithError("closed a different number of windows than were due");
  }
  state.SetItemsProcessed(static_cast<int64_t>(closed));
  state.counters["series"] = n;
}
BENCHMARK(BM_AggregatorCloseDueWindows)
    ->Arg(1'000)
    ->Arg(10'000)
    ->Arg(100'000)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(0.2);

// GetWindows for one series holding 10'000 closed windows, among 1'000 other
// series the selector must skip. Arg: limit_per_series (0 = all).
void BM_AggregatorGetWindows(benchmark::State& state) {
  const size_t limit = static_cast<size_t>(state.range(0));
  constexpr int kHistory = 10'000;
  int64_t window_start = kNowMs - kNowMs % kWindowMs;
  ManualClock clock(window_start);
  AggregatorOptions options;
  options.history_windows = kHistory;
  Aggregator agg(options, clock);
  auto target =
      agg.Define(SeriesKey{"train.loss", {{"job", "bench"}, {"rank", "0"}}}, MeanMaxMin());
  if (!target.ok()) return state.SkipWithError("Define failed");
  std::vector<SeriesId> others;
  for (int i = 0; i < 1'000; ++i) others.push_back(*agg.Define(Key(i), MeanMaxMin()));
  for (int w = 0; w < kHistory; ++w) {
    const double v = w;
    const int64_t ts = (window_start + 1) * 1000;
    clock.Set(window_start + 1);
    (void)agg.AddSamples(*target, {&v, 1}, {&ts, 1});
    if (w == 0) {
      for (SeriesId id : others) (void)agg.AddSamples(id, {&v, 1}, {&ts, 1});
    }
    window_start += kWindowMs;
    clock.Set(window_start + options.grace_ms);
    agg.CloseDueWindows();
  }
  Selector selector;
  selector.name = "train.loss";
  const size_t expected = limit == 0 ? kHistory : limit;
  size_t returned = 0;
  for (auto _ : state) {
    std::vector<ClosedWindow> out = agg.GetWindows(selector, 0, 0, limit);
    returned += out.size();
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  if (returned != state.iterations() * expected) {
    state.SkipWithError("GetWindows returned a different number of windows");
  }
  state.SetItemsProcessed(static_cast<int64_t>(returned));
  state.counters["windows_per_query"] = static_cast<double>(expected);
}
BENCHMARK(BM_AggregatorGetWindows)->Arg(100)->Arg(0)->Unit(benchmark::kMicrosecond)->MinTime(0.2);

// Heap bytes the aggregator holds per idle series: defined with realistic
// identity labels (job, rank, local_rank, host; 20 stats per rank, names of
// 16+ characters), one sample, its window closed, then idle. That is what a
// series costs at rest, with the last window the scrape shows; each further
// closed window kept for queries (--history) adds one record, reported as
// bytes_per_history_window. Measured with mallinfo2: bytes in use by malloc
// (chunk overhead included) plus its mmapped blocks, where the large tables
// (the slot array, the key index) live; exact and independent of RSS
// granularity. One iteration; Args: number of series; quantiles estimated
// per series (0 to 3: p50, p99, p99.9), whose idle cost is the sketch each
// series keeps of its newest window, and 8 bytes per quantile per history
// window; histogram buckets filled (0: no histogram; with quantiles the
// histogram is implied): the first window's samples fill that many buckets
// of the series' native histogram.
size_t HeapBytesInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

void BM_MemoryPerIdleSeries(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  constexpr int kStatsPerRank = 20;
  constexpr int kExtraWindows = 10;
  for (auto _ : state) {
    const size_t heap_before = HeapBytesInUse();
    int64_t window_start = kNowMs - kNowMs % kWindowMs;
    ManualClock clock(window_start + 1);
    AggregatorOptions options;
    options.history_windows = 1 + kExtraWindows;
    auto agg = std::make_unique<Aggregator>(options, clock);
    std::vector<SeriesId> ids;
    ids.reserve(n);
    // The first window's samples fill `buckets` histogram buckets (schema
    // 5: 100 · 2^(j/32) is bucket 213 + j); later windows add one sample.
    const int buckets = static_cast<int>(state.range(2));
    std::vector<double> first_values = {buckets > 0 ? 100.0 : 1.0};
    for (int j = 1; j < buckets; ++j) first_values.push_back(100 * std::exp2(j / 32.0));
    bool first = true;
    auto close_one_window_each = [&] {
      const double v = first_values[0];
      const int64_t ts = (window_start + 1) * 1000;
      clock.Set(window_start + 1);
      const std::vector<int64_t> stamps(first_values.size(), ts);
      for (SeriesId id : ids) {
        if (first) {
          benchmark::DoNotOptimize(agg->AddSamples(id, first_values, stamps));
        } else {
          benchmark::DoNotOptimize(agg->AddSamples(id, {&v, 1}, {&ts, 1}));
        }
      }
      first = false;
      window_start += kWindowMs;
      clock.Set(window_start + options.grace_ms);
      return agg->CloseDueWindows().size();
    };
    for (int i = 0; i < n; ++i) {
      const int rank = i / kStatsPerRank;
      char stat[32];
      std::snprintf(stat, sizeof(stat), "train.stat_%05d", i % kStatsPerRank);
      // A fresh Labels per series, as every stream's definitions arrive.
      auto id = agg->Define(SeriesKey{stat,
                                      {{"host", "gpu-node-" + std::to_string(1000 + rank / 8)},
                                       {"job", "llama-pretrain-7b"},
                                       {"local_rank", std::to_string(rank % 8)},
                                       {"rank", std::to_string(rank)}}},
                            MeanMaxMin(state.range(1), state.range(2) > 0));
      if (!id.ok()) return state.SkipWithError("Define failed");
      ids.push_back(*id);
    }
    ids.shrink_to_fit();
    const size_t ids_bytes = ids.capacity() * sizeof(SeriesId);  // the bench's, not the daemon's
    if (close_one_window_each() != static_cast<size_t>(n)) {
      return state.SkipWithError("not every series closed a window");
    }
    const size_t heap_idle = HeapBytesInUse();
    for (int w = 0; w < kExtraWindows; ++w) {
      if (close_one_window_each() != static_cast<size_t>(n)) {
        return state.SkipWithError("not every series closed a window");
      }
    }
    const size_t heap_history = HeapBytesInUse();
    state.counters["bytes_per_idle_series"] =
        static_cast<double>(heap_idle - heap_before - ids_bytes) / n;
    state.counters["bytes_per_history_window"] =
        static_cast<double>(heap_history - heap_idle) / (static_cast<double>(n) * kExtraWindows);
    state.counters["label_sets"] = static_cast<double>(agg->label_set_count());
    benchmark::DoNotOptimize(agg.get());
  }
}
BENCHMARK(BM_MemoryPerIdleSeries)
    ->Args({10'000, 0, 0})
    ->Args({100'000, 0, 0})
    ->Args({1'000'000, 0, 0})
    ->Args({1 << 20, 0, 0})  // a power of two: the key index at its emptiest, the worst case
    ->Args({100'000, 3, 1})
    // A native histogram alone, with 1, 40 and 320 (its bound) buckets filled.
    ->Args({100'000, 0, 1})
    ->Args({100'000, 0, 40})
    ->Args({100'000, 0, 320})
    ->ArgNames({"series", "quantiles", "histogram_buckets"})
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace torchmon::server

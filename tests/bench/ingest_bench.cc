// The daemon's per-sample ingest cost, without gRPC: parsing a serialized
// IngestBatch (the wire decode) and applying a parsed one (timestamp decode
// plus aggregation). One block of 4096 samples, as the client sends.
#include <cstdint>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/core/selector.h"
#include "server/core/daemon_stats.h"
#include "server/ingest/ingest_session.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::server {
namespace {

constexpr int kBlockSamples = 4096;
constexpr int64_t kWindowMs = 10'000;
// The middle of a window: [1'700'000'000'000, 1'700'000'010'000).
constexpr int64_t kNowMs = 1'700'000'005'000;

v1::IngestBatch FirstBatch() {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  auto& labels = *batch.mutable_hello()->mutable_labels();
  labels["job"] = "bench";
  labels["rank"] = "0";
  batch.mutable_hello()->set_client_name("torchmon_benchmarks");
  v1::StatDefinition* def = batch.add_definitions();
  def->set_id(1);
  def->set_name("train.loss");
  def->mutable_spec()->add_aggregations(v1::MEAN);
  def->mutable_spec()->add_aggregations(v1::MAX);
  def->mutable_spec()->set_window_size_ms(kWindowMs);
  return batch;
}

// One block of 4096 samples over the last ~4 ms, 1 µs apart, as the client
// encodes it (base time plus per-sample deltas).
v1::IngestBatch SampleBatch() {
  v1::IngestBatch batch;
  batch.set_sequence(2);
  v1::SampleBlock* block = batch.add_samples();
  block->set_stat_id(1);
  block->set_base_time_us(kNowMs * 1000 - 2 * kBlockSamples);
  for (int i = 0; i < kBlockSamples; ++i) {
    block->add_values(0.001 * i);
    block->add_time_deltas_us(i == 0 ? 0 : 1);
  }
  return batch;
}

// After a run of `state.iterations()` batches of `per_batch` samples each:
// reports them as processed, or the run as failed unless the daemon took
// every one.
void CountEverySampleAccepted(benchmark::State& state, const Aggregator& aggregator,
                              const v1::IngestAck& last_ack, int per_batch) {
  uint64_t accepted = 0;
  for (const SeriesSnapshot& s : aggregator.ListSeries(Selector{})) accepted += s.counters.accepted;
  const uint64_t expected = state.iterations() * static_cast<uint64_t>(per_batch);
  if (last_ack.errors_size() != 0 || accepted != expected) {
    state.SkipWithError("accounting mismatch: not every sample was accepted");
  }
  state.SetItemsProcessed(static_cast<int64_t>(expected));
}

// An ingest session on a fresh aggregator at kNowMs, as a stream sees it.
struct SessionFixture {
  ManualClock clock{kNowMs};
  Aggregator aggregator{AggregatorOptions{}, clock};
  EventLog events{1000, 600'000, clock};
  DaemonStats stats;
  IngestSession session{aggregator, events, stats, nullptr};
};

// IngestSession::Apply of a parsed batch, per sample.
void BM_IngestApply(benchmark::State& state) {
  SessionFixture f;
  IngestSession& session = f.session;
  v1::IngestAck ack;
  session.Apply(FirstBatch(), &ack);
  if (ack.errors_size() != 0) return state.SkipWithError(ack.errors(0).message().c_str());
  const v1::IngestBatch batch = SampleBatch();
  for (auto _ : state) {
    ack.Clear();
    session.Apply(batch, &ack);
    benchmark::DoNotOptimize(ack);
  }
  CountEverySampleAccepted(state, f.aggregator, ack, kBlockSamples);
}
BENCHMARK(BM_IngestApply)->MinTime(0.2);

// ParseFromString of the serialized batch into a reused message, per sample.
void BM_IngestParse(benchmark::State& state) {
  const std::string wire = SampleBatch().SerializeAsString();
  v1::IngestBatch batch;
  for (auto _ : state) {
    if (!batch.ParseFromString(wire)) return state.SkipWithError("parse failed");
    benchmark::DoNotOptimize(batch);
  }
  if (batch.samples_size() != 1 || batch.samples(0).values_size() != kBlockSamples) {
    state.SkipWithError("parsed a different batch");
  }
  state.SetItemsProcessed(state.iterations() * kBlockSamples);
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(wire.size()));
  state.counters["wire_bytes_per_sample"] = static_cast<double>(wire.size()) / kBlockSamples;
}
BENCHMARK(BM_IngestParse)->MinTime(0.2);

// Many series, few samples each: what 4 ranks x 25,000 stats at 1 M/s in
// total look like to the daemon (a block per stat per batch, a sample or
// two per block, the series far apart in memory). Arg: series. Batches of
// kManyBlocks one-sample blocks walk the series in a scrambled order; the
// figure is per block (= per sample).
constexpr int kManyBlocks = 2048;

void BM_IngestApplyManySeries(benchmark::State& state, bool columns) {
  const int series = static_cast<int>(state.range(0));
  SessionFixture f;
  IngestSession& session = f.session;
  v1::IngestAck ack;
  v1::IngestBatch define = FirstBatch();
  define.clear_definitions();
  for (int i = 0; i < series; ++i) {
    v1::StatDefinition* def = define.add_definitions();
    def->set_id(static_cast<uint32_t>(i + 1));
    def->set_name("many.s" + std::to_string(i));
    def->mutable_spec()->add_aggregations(v1::MEAN);
    def->mutable_spec()->add_aggregations(v1::MAX);
    def->mutable_spec()->set_window_size_ms(kWindowMs);
  }
  session.Apply(define, &ack);
  if (ack.errors_size() != 0) return state.SkipWithError(ack.errors(0).message().c_str());
  // Consecutive blocks land on series ~40% of the table apart.
  const uint64_t stride = static_cast<uint64_t>(series) * 2 / 5 + 1;
  std::vector<v1::IngestBatch> batches(16);
  uint64_t next = 0;
  for (size_t b = 0; b < batches.size(); ++b) {
    batches[b].set_sequence(2 + b);
    for (int i = 0; i < kManyBlocks; ++i) {
      next = (next + stride) % static_cast<uint64_t>(series);
      if (columns) {
        // As the C++ client sends samples of stats with a sample or two.
        v1::SampleColumns* c = batches[b].mutable_columns();
        if (i == 0) c->set_base_time_us(kNowMs * 1000);
        c->add_stat_ids(static_cast<uint32_t>(next + 1));
        c->add_values(0.5);
        c->add_time_deltas_us(i == 0 ? 0 : -1);
        continue;
      }
      v1::SampleBlock* block = batches[b].add_samples();
      block->set_stat_id(static_cast<uint32_t>(next + 1));
      block->set_base_time_us(kNowMs * 1000 - i);
      block->add_values(0.5);
    }
  }
  size_t b = 0;
  for (auto _ : state) {
    ack.Clear();
    session.Apply(batches[b], &ack);
    b = (b + 1) % batches.size();
    benchmark::DoNotOptimize(ack);
  }
  CountEverySampleAccepted(state, f.aggregator, ack, kManyBlocks);
}
BENCHMARK_CAPTURE(BM_IngestApplyManySeries, blocks, false)->Arg(1000)->Arg(100'000)->MinTime(0.5);
BENCHMARK_CAPTURE(BM_IngestApplyManySeries, columns, true)->Arg(1000)->Arg(100'000)->MinTime(0.5);

}  // namespace
}  // namespace torchmon::server

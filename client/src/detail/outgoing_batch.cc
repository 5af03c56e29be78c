#include "detail/outgoing_batch.h"

#include <algorithm>
#include <utility>

namespace torchmon::detail {

size_t DefinitionBytes(const StatState& stat) {
  return stat.definition_bytes.size() + kFieldOverheadBytes;
}

namespace {

google::protobuf::ArenaOptions BatchArenaOptions() {
  google::protobuf::ArenaOptions options;
  // A batch of events takes a block or two; one of samples grows to 64 KiB
  // blocks (about twenty for a full batch).
  options.start_block_size = size_t{4} << 10;
  options.max_block_size = size_t{64} << 10;
  return options;
}

}  // namespace

OutgoingBatch::OutgoingBatch()
    : arena(std::make_unique<google::protobuf::Arena>(BatchArenaOptions())),
      batch(google::protobuf::Arena::CreateMessage<v1::IngestBatch>(arena.get())) {}

uint64_t OutgoingBatch::SampleRoom() const {
  const size_t used = bytes + kBlockOverheadBytes;
  return used >= kBatchBudgetBytes ? 0 : (kBatchBudgetBytes - used) / kSampleBytes;
}

void OutgoingBatch::AddDefinition(StatState& stat) {
  stat.CopyDefinition(batch->add_definitions());
  parts.push_back({&stat, 0, 0, true});
  bytes += DefinitionBytes(stat);
}

void OutgoingBatch::AddDropReport(StatState& stat, uint64_t drops) {
  v1::DropReport* report = batch->add_drops();
  report->set_stat_id(stat.id);
  report->set_dropped(drops);
  parts.push_back({&stat, 0, drops, false});
  bytes += kDropReportBytes;
}

void OutgoingBatch::AddEvent(v1::Event&& event, size_t size) {
  *batch->add_events() = std::move(event);
  ++events;
  bytes += size;
}

size_t OutgoingBatch::AddSamples(StatState& stat, ChunkPool& pool, uint64_t max) {
  // Room for what is buffered, not for `max`: most blocks of a client with
  // many stats carry a handful of samples, and reserving a whole batch's
  // worth for each cost a large allocation per block.
  const uint64_t take = std::min(max, stat.buffer.pushed() - stat.buffer.popped());
  if (take == 0) return 0;
  v1::SampleBlock* block = batch->add_samples();
  auto* values = block->mutable_values();
  auto* deltas = block->mutable_time_deltas_us();
  values->Reserve(static_cast<int>(take));
  deltas->Reserve(static_cast<int>(take));
  int64_t base = 0;
  int64_t previous = 0;
  bool all_at_base = true;
  const size_t n = stat.buffer.Drain(pool, take, [&](double value, int64_t timestamp_us) {
    if (values->empty()) base = previous = timestamp_us;
    // Unsigned arithmetic: explicit timestamps may be anything, and the
    // daemon's modulo-2^64 running sum restores them exactly.
    const auto delta = static_cast<int64_t>(static_cast<uint64_t>(timestamp_us) -
                                            static_cast<uint64_t>(previous));
    values->AddAlreadyReserved(value);
    deltas->AddAlreadyReserved(delta);
    all_at_base = all_at_base && delta == 0;
    previous = timestamp_us;
  });
  if (n == 0) {
    batch->mutable_samples()->RemoveLast();
    return 0;
  }
  block->set_stat_id(stat.id);
  block->set_base_time_us(base);
  if (all_at_base) deltas->Clear();
  parts.push_back({&stat, n, 0, false});
  samples += n;
  bytes += kBlockOverheadBytes + n * kSampleBytes;
  return n;
}

}  // namespace torchmon::detail

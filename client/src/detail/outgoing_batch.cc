#include "detail/outgoing_batch.h"

#include <algorithm>
#include <utility>

namespace torchmon::detail {

size_t DefinitionBytes(const StatState& stat) {
  return stat.definition_bytes.size() + kFieldOverheadBytes;
}

namespace {

google::protobuf::ArenaOptions BatchArenaOptions(char* initial_block) {
  google::protobuf::ArenaOptions options;
  // A batch of events takes a block or two; one of samples grows to 64 KiB
  // blocks (about twenty for a full batch), unless it starts on a block of
  // BatchMemory, which holds it all.
  options.start_block_size = size_t{4} << 10;
  options.max_block_size = size_t{64} << 10;
  if (initial_block != nullptr) {
    options.initial_block = initial_block;
    options.initial_block_size = BatchMemory::kBlockBytes;
  }
  return options;
}

}  // namespace

std::unique_ptr<char[]> BatchMemory::Take() {
  {
    absl::MutexLock lock(&mu_);
    if (!free_.empty()) {
      std::unique_ptr<char[]> block = std::move(free_.back());
      free_.pop_back();
      return block;
    }
  }
  // Not value-initialised: the pages stay untouched until written.
  return std::unique_ptr<char[]>(new char[kBlockBytes]);
}

void BatchMemory::Give(std::unique_ptr<char[]> block) {
  absl::MutexLock lock(&mu_);
  if (free_.size() < kKeep) free_.push_back(std::move(block));
}

void BatchMemory::Trim() {
  std::vector<std::unique_ptr<char[]>> freed;
  absl::MutexLock lock(&mu_);
  freed.swap(free_);
}

size_t BatchMemory::kept() const {
  absl::MutexLock lock(&mu_);
  return free_.size();
}

BatchArena::BatchArena(std::shared_ptr<BatchMemory> memory)
    : memory_(std::move(memory)), block_(memory_ != nullptr ? memory_->Take() : nullptr) {
  arena_.emplace(BatchArenaOptions(block_.get()));
}

BatchArena::~BatchArena() {
  // The arena first: it keeps its bookkeeping in the block.
  arena_.reset();
  if (block_ != nullptr) memory_->Give(std::move(block_));
}

OutgoingBatch::OutgoingBatch(std::shared_ptr<BatchMemory> memory)
    : arena(std::make_unique<BatchArena>(std::move(memory))),
      batch(google::protobuf::Arena::CreateMessage<v1::IngestBatch>(arena->get())) {}

uint64_t OutgoingBatch::SampleRoom() const {
  const size_t used = bytes + kBlockOverheadBytes;
  return used >= kBatchBudgetBytes ? 0 : (kBatchBudgetBytes - used) / kSampleBytes;
}

void OutgoingBatch::AddDefinition(StatState& stat) {
  AppendDefinitionEntry(stat.definition_bytes, &definitions);
  parts.push_back({stat.id, 0, 0, &stat});
  bytes += DefinitionBytes(stat);
}

void OutgoingBatch::AddDropReport(StatState& stat, uint64_t drops) {
  v1::DropReport* report = batch->add_drops();
  report->set_stat_id(stat.id);
  report->set_dropped(drops);
  parts.push_back({stat.id, 0, drops, nullptr});
  bytes += kDropReportBytes;
}

void OutgoingBatch::AddEvent(v1::Event&& event, size_t size) {
  *batch->add_events() = std::move(event);
  ++events;
  bytes += size;
}

void OutgoingBatch::AddEventDropReport(const std::string& name, uint64_t dropped, size_t size) {
  v1::EventDropReport* report = batch->add_event_drops();
  report->set_name(name);
  report->set_dropped(dropped);
  bytes += size;
}

void OutgoingBatch::AddRelease(uint32_t id) {
  batch->add_released(id);
  bytes += kReleaseBytes;
}

void SampleGroups::GrowSlots(uint32_t stat_id) {
  slot_of_id.resize(std::max<size_t>(size_t{stat_id} + 1, slot_of_id.size() * 2), 0);
}

void OutgoingBatch::AddSamples(const std::vector<LogSample>& taken, SampleGroups& g) {
  g.Begin();
  for (const LogSample& s : taken) g.Count(s.stat_id, s.timestamp_us);
  PlaceSamples(g);
  for (const LogSample& s : taken) g.Put(s.stat_id, s.value, s.timestamp_us);
  FinishSamples(g);
}

void OutgoingBatch::PlaceSamples(SampleGroups& g) {
  if (g.total == 0) return;
  uint64_t in_columns = 0;
  for (SampleGroups::Group& group : g.groups) {
    if (group.count < kMinBlockSamples) {
      in_columns += group.count;
      continue;
    }
    const int count = static_cast<int>(group.count);
    group.block = batch->add_samples();
    group.block->set_stat_id(group.stat_id);
    group.block->set_base_time_us(group.last_us);
    group.block->mutable_values()->Reserve(count);
    group.block->mutable_time_deltas_us()->Reserve(count);
    group.values = group.block->mutable_values()->AddNAlreadyReserved(count);
    group.deltas = group.block->mutable_time_deltas_us()->AddNAlreadyReserved(count);
    parts.push_back({group.stat_id, group.count, 0, nullptr});
    bytes += kBlockOverheadBytes;
  }
  if (in_columns == 0) return;
  if (!batch->has_columns()) {
    batch->mutable_columns()->set_base_time_us(g.first_us);
    columns_last_us = g.first_us;
  }
  v1::SampleColumns* columns = batch->mutable_columns();
  const int size = columns->values_size() + static_cast<int>(in_columns);
  const int added = static_cast<int>(in_columns);
  columns->mutable_stat_ids()->Reserve(size);
  columns->mutable_values()->Reserve(size);
  columns->mutable_time_deltas_us()->Reserve(size);
  g.column_ids = columns->mutable_stat_ids()->AddNAlreadyReserved(added);
  g.column_values = columns->mutable_values()->AddNAlreadyReserved(added);
  g.column_deltas = columns->mutable_time_deltas_us()->AddNAlreadyReserved(added);
  g.column_last_us = columns_last_us;
}

void OutgoingBatch::FinishSamples(SampleGroups& g) {
  for (SampleGroups::Group& group : g.groups) {
    if (group.block != nullptr && group.all_at_base) group.block->mutable_time_deltas_us()->Clear();
    group.values = nullptr;
    group.deltas = nullptr;
    g.slot_of_id[group.stat_id] = 0;
  }
  if (g.column_ids != nullptr) {
    columns_last_us = g.column_last_us;
    g.column_ids = nullptr;
    g.column_values = nullptr;
    g.column_deltas = nullptr;
  }
  samples += g.total;
  bytes += g.total * kSampleBytes;
}

}  // namespace torchmon::detail

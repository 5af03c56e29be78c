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

void OutgoingBatch::ReserveDefinitions(const std::vector<StatState*>& stats) {
  size_t entries = 0;
  size_t wire_bytes = 0;
  for (size_t budget = bytes; entries < stats.size() && budget < kBatchBudgetBytes; ++entries) {
    budget += DefinitionBytes(*stats[entries]);
    wire_bytes += DefinitionEntryBytes(stats[entries]->definition_bytes.size());
  }
  definitions.reserve(definitions.size() + wire_bytes);
  defines.reserve(defines.size() + entries);
}

void OutgoingBatch::AddDefinition(StatState& stat) {
  AppendDefinitionEntry(stat.definition_bytes.view(), &definitions);
  defines.push_back(&stat);
  bytes += DefinitionBytes(stat);
}

void OutgoingBatch::AddDropReport(StatState& stat, uint64_t drops) {
  v1::DropReport* report = batch->add_drops();
  report->set_stat_id(stat.id);
  report->set_dropped(drops);
  parts.push_back({stat.id, 0, drops});
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

void SampleGroups::Reserve(uint32_t max_id, uint64_t max_samples) {
  if (slot_of_id.size() <= max_id) slot_of_id.resize(size_t{max_id} + 1, 0);
  groups.reserve(static_cast<size_t>(std::min<uint64_t>(size_t{max_id} + 1, max_samples)));
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
  for (const SampleGroups::Group& group : g.groups) {
    uint32_t& slot = g.slot_of_id[group.stat_id];
    if (group.count < kMinBlockSamples) {
      in_columns += group.count;
      slot = SampleGroups::kInColumns;
      continue;
    }
    const int count = static_cast<int>(group.count);
    v1::SampleBlock* block = batch->add_samples();
    block->set_stat_id(group.stat_id);
    block->set_base_time_us(group.first_us);
    block->mutable_values()->Reserve(count);
    block->mutable_time_deltas_us()->Reserve(count);
    g.blocks.push_back({block->mutable_values()->AddNAlreadyReserved(count),
                        block->mutable_time_deltas_us()->AddNAlreadyReserved(count), group.first_us,
                        block, true});
    slot = static_cast<uint32_t>(g.blocks.size());
    parts.push_back({group.stat_id, group.count, 0});
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
  for (const SampleGroups::BlockCursor& b : g.blocks) {
    if (b.all_at_base) b.block->mutable_time_deltas_us()->Clear();
  }
  g.blocks.clear();
  for (const SampleGroups::Group& group : g.groups) g.slot_of_id[group.stat_id] = 0;
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

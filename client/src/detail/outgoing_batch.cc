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

void OutgoingBatch::AddSamples(const std::vector<LogSample>& taken, SampleGroups& g) {
  g.groups.clear();
  if (taken.empty()) return;
  // Unsigned arithmetic for every delta: explicit timestamps may be
  // anything, and the daemon's modulo-2^64 running sum restores them.
  auto delta = [](int64_t t, int64_t previous) {
    return static_cast<int64_t>(static_cast<uint64_t>(t) - static_cast<uint64_t>(previous));
  };
  // Count per stat, through a slot per id.
  for (const LogSample& s : taken) {
    if (s.stat_id >= g.slot_of_id.size()) {
      g.slot_of_id.resize(std::max<size_t>(size_t{s.stat_id} + 1, g.slot_of_id.size() * 2), 0);
    }
    uint32_t& slot = g.slot_of_id[s.stat_id];
    if (slot == 0) {
      g.groups.push_back({s.stat_id, 0, nullptr, 0, true});
      slot = static_cast<uint32_t>(g.groups.size());
    }
    ++g.groups[slot - 1].count;
  }
  uint64_t in_columns = 0;
  for (SampleGroups::Group& group : g.groups) {
    if (group.count < kMinBlockSamples) {
      in_columns += group.count;
      continue;
    }
    group.block = batch->add_samples();
    group.block->set_stat_id(group.stat_id);
    group.block->mutable_values()->Reserve(static_cast<int>(group.count));
    group.block->mutable_time_deltas_us()->Reserve(static_cast<int>(group.count));
    parts.push_back({group.stat_id, group.count, 0, nullptr});
    bytes += kBlockOverheadBytes;
  }
  v1::SampleColumns* columns = nullptr;
  if (in_columns != 0) {
    const bool fresh = !batch->has_columns();
    columns = batch->mutable_columns();
    const int size = columns->values_size() + static_cast<int>(in_columns);
    columns->mutable_stat_ids()->Reserve(size);
    columns->mutable_values()->Reserve(size);
    columns->mutable_time_deltas_us()->Reserve(size);
    if (fresh) {
      columns->set_base_time_us(taken.front().timestamp_us);
      columns_last_us = taken.front().timestamp_us;
    }
  }
  // Each sample to its block or to the columns, in order.
  for (const LogSample& s : taken) {
    SampleGroups::Group& group = g.groups[g.slot_of_id[s.stat_id] - 1];
    if (group.block == nullptr) {
      columns->mutable_stat_ids()->AddAlreadyReserved(s.stat_id);
      columns->mutable_values()->AddAlreadyReserved(s.value);
      columns->mutable_time_deltas_us()->AddAlreadyReserved(delta(s.timestamp_us, columns_last_us));
      columns_last_us = s.timestamp_us;
      continue;
    }
    auto* values = group.block->mutable_values();
    if (values->empty()) {
      group.block->set_base_time_us(s.timestamp_us);
      group.last_us = s.timestamp_us;
    }
    const int64_t d = delta(s.timestamp_us, group.last_us);
    values->AddAlreadyReserved(s.value);
    group.block->mutable_time_deltas_us()->AddAlreadyReserved(d);
    group.all_at_base = group.all_at_base && d == 0;
    group.last_us = s.timestamp_us;
  }
  for (const SampleGroups::Group& group : g.groups) {
    if (group.block != nullptr && group.all_at_base) group.block->mutable_time_deltas_us()->Clear();
    g.slot_of_id[group.stat_id] = 0;
  }
  samples += taken.size();
  bytes += taken.size() * kSampleBytes;
}

}  // namespace torchmon::detail

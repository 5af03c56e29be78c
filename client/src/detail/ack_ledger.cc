#include "detail/ack_ledger.h"

#include <algorithm>
#include <utility>

namespace torchmon::detail {

void AckLedger::Keep(std::shared_ptr<const OutgoingBatch> batch) {
  bytes_ += batch->bytes;
  kept_.push_back(std::move(batch));
}

AckLedger::Retired AckLedger::Acknowledge(uint64_t sequence) {
  Retired retired;
  while (StillKept(sequence)) {
    const OutgoingBatch& batch = *kept_.front();
    for (const OutgoingBatch::StatPart& part : batch.parts) {
      if (part.samples == 0 && part.drops == 0) continue;
      StatCounts& c = table_.At(part.stat_id);
      Bump(c.delivered, part.samples);
      Bump(c.drops_acked, part.drops);
      Bump(c.delivered_current, part.samples);
      Bump(c.drops_acked_current, part.drops);
    }
    batch.ForEachColumnRun([&](uint32_t id, uint64_t n) {
      StatCounts& c = table_.At(id);
      Bump(c.delivered, n);
      Bump(c.delivered_current, n);
    });
    samples_settled_ += batch.samples;
    retired.events += batch.events;
    ++retired.batches;
    bytes_ -= batch.bytes;
    kept_.pop_front();
  }
  return retired;
}

AckLedger::Retired AckLedger::AbandonAll() {
  Retired retired;
  for (const auto& kept : kept_) {
    for (const OutgoingBatch::StatPart& part : kept->parts) {
      if (part.samples != 0) Bump(table_.At(part.stat_id).abandoned, part.samples);
    }
    kept->ForEachColumnRun([&](uint32_t id, uint64_t n) { Bump(table_.At(id).abandoned, n); });
    samples_settled_ += kept->samples;
    retired.events += kept->events;
    ++retired.batches;
  }
  kept_.clear();
  bytes_ = 0;
  return retired;
}

bool AckLedger::SeeDaemon(uint64_t instance, uint32_t max_id) {
  if (instance == 0 || instance == daemon_instance_) return false;
  // Another daemon process: what the previous one acknowledged died with
  // it, so the per-daemon counts start again.
  const bool restart = daemon_instance_ != 0;
  daemon_instance_ = instance;
  table_.ForEach(max_id, [](uint32_t, StatCounts& c) {
    c.delivered_current.store(0, std::memory_order_relaxed);
    c.drops_acked_current.store(0, std::memory_order_relaxed);
  });
  return restart;
}

void AckLedger::CycleWrote(uint64_t ticket, uint64_t last_sequence) {
  flush_written_ = std::max(flush_written_, ticket);
  written_sequence_ = last_sequence;
}

}  // namespace torchmon::detail

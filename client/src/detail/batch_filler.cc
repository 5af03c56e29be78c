#include "detail/batch_filler.h"

#include <algorithm>
#include <cassert>
#include <string>
#include <thread>
#include <utility>

#include "detail/send_pacer.h"

namespace torchmon::detail {

bool BatchFiller::AddDefinitions(const std::vector<StatState*>& fresh, uint64_t generation,
                                 OutgoingBatch& out, Write write) {
  set_aside_.clear();
  out.ReserveDefinitions(fresh);
  for (StatState* stat : fresh) {
    if (buffers_.sent.At(stat->id).defined_on == generation) continue;
    // Destroyed already: its samples were added before, so this cycle
    // finds them, and defines it then (TakeSamples, AddDropReports).
    if (stat->closed.load(std::memory_order_acquire)) {
      SetAside& same = set_aside_[stat->key_hash];
      if (same.stats.empty()) same.spec_hash = stat->spec_hash;
      same.mixed = same.mixed || same.spec_hash != stat->spec_hash;
      same.stats.push_back(stat);
      continue;
    }
    if (!out.Fits(DefinitionBytes(*stat)) && !write()) return false;
    DefineOnStream(*stat, generation, out);
  }
  return true;
}

bool BatchFiller::EndSetAside(bool complete, uint64_t generation, OutgoingBatch& out, Write write) {
  if (!complete) {
    for (auto& [key, same] : set_aside_) {
      for (StatState* stat : same.stats) {
        if (buffers_.sent.At(stat->id).defined_on == generation) continue;
        if (!out.Fits(DefinitionBytes(*stat)) && !write()) return false;
        DefineOnStream(*stat, generation, out);
      }
    }
  }
  set_aside_.clear();
  return true;
}

void BatchFiller::DefineOnStream(StatState& stat, uint64_t generation, OutgoingBatch& out) {
  uint64_t& defined = buffers_.sent.At(stat.id).defined_on;
  if (defined == generation) return;
  if (!set_aside_.empty()) {
    // A stat set aside may still be defined by its samples later in the
    // cycle: if its spec differs, it must come first, or its definition
    // would conflict with this one's on the daemon.
    const auto it = set_aside_.find(stat.key_hash);
    if (it != set_aside_.end() && (it->second.mixed || it->second.spec_hash != stat.spec_hash)) {
      const std::vector<StatState*> before = std::move(it->second.stats);
      set_aside_.erase(it);
      for (StatState* earlier : before) DefineOnStream(*earlier, generation, out);
      if (defined == generation) return;  // it was set aside itself
    }
  }
  out.AddDefinition(stat);
  defined = generation;
}

size_t BatchFiller::TakeSamples(SampleLog& log, uint64_t max, uint64_t generation,
                                OutgoingBatch& out) {
  // The samples leave the log and are counted to their stats under one
  // hold of drain_mu, so that a reader of a stat's count finds each sample
  // in exactly one place.
  absl::MutexLock drain(&buffers_.drain_mu);
  // Two passes over the log's cells (SampleGroups): count each stat's
  // samples, make room for them in `out`, then put each straight into its
  // place as it is drained. Copying them out first and grouping the copy
  // cost a third of the sender's time at 20 M samples/s: a full batch's
  // copy (1.5 MiB) does not stay in a 1 MiB L2 for its two further passes.
  groups_.Begin();
  // A group per stat, at most: grown by doubling instead, the scratch left
  // the sender's heap holding its earlier copies (10,000 stats with a
  // sample each: 250 KiB).
  groups_.Reserve(max_stat_id_, max);
  const uint64_t n = log.Peek(buffers_.pool, max, [&](double, int64_t t, uint32_t id) {
    groups_.Count(id, t);
  });
  if (n == 0) return 0;
  out.PlaceSamples(groups_);
  const size_t drained = log.Drain(buffers_.pool, n, [&](double value, int64_t t, uint32_t id) {
    groups_.Put(id, value, t);
  });
  // Drain takes exactly what Peek showed (SampleLog::Peek); anything else
  // would leave counted room unwritten.
  assert(drained == n);
  static_cast<void>(drained);
  out.FinishSamples(groups_);
  const SenderTable& sent = buffers_.sent;
  for (const SampleGroups::Group& group : groups_.groups) {
    SenderSlot& slot = sent.At(group.stat_id);
    Bump(slot.taken, group.count);
    if (slot.defined_on == generation) continue;
    // Registered after this cycle took the new definitions, and added to
    // before the logs were read: defined here, in the same batch, whose
    // definitions apply before its samples. Alive: a stat is retired only
    // a complete cycle after it closed, once none of its samples is left.
    StatState* stat = buffers_.table.At(group.stat_id).state.load(std::memory_order_acquire);
    if (stat != nullptr) DefineOnStream(*stat, generation, out);
  }
  return n;
}

bool BatchFiller::AddSamples(uint64_t generation, Clock::time_point now, OutgoingBatch& out,
                             Write write, LogsTaken* taken) {
  *taken = LogsTaken{};
  // Pacing looks at samples buffered (all logs' against the budget, the
  // fullest log's against what one log may hold).
  uint64_t buffered_total = 0;
  // When any thread last added (each log's active_at, below).
  Clock::time_point last_added{};
  for (ClientBuffers::Log& l : buffers_.logs) {
    SampleLog& log = l.log;
    const uint64_t target = log.pushed();
    const uint64_t buffered = target - log.popped();
    buffered_total += buffered;
    taken->max_fill = std::max(taken->max_fill, static_cast<double>(buffered) /
                                                    static_cast<double>(SampleLog::kPaceSamples));
    if (target != l.pushed_seen) {
      l.pushed_seen = target;
      l.active_at = now;
    }
    last_added = std::max(last_added, l.active_at);
    while (log.popped() < target) {
      const uint64_t room = out.SampleRoom();
      if (room == 0) {
        if (!write()) return false;
        continue;
      }
      const uint64_t want = std::min<uint64_t>(room, target - log.popped());
      size_t n = TakeSamples(log, want, generation, out);
      // Zero means a producer has claimed the next cell and not yet
      // published it; give it a moment before leaving it for a later cycle.
      for (int spin = 0; n == 0 && spin < 64; ++spin) {
        std::this_thread::yield();
        n = TakeSamples(log, want, generation, out);
      }
      if (n == 0) {
        taken->complete = false;
        break;
      }
    }
    // An idle log (a thread that stopped adding, or exited) gives its chunk
    // back to the budget.
    if (now - l.active_at >= kIdleRelease && log.popped() == log.pushed()) {
      absl::MutexLock drain(&buffers_.drain_mu);
      log.Release(buffers_.pool);
    }
  }
  // Batch memory too, once no thread has added for as long.
  if (now - last_added >= kIdleRelease) memory_->Trim();
  taken->max_fill = std::max(
      taken->max_fill, static_cast<double>(buffered_total * sizeof(SampleCell)) /
                           static_cast<double>(buffers_.pool.budget_bytes()));
  return true;
}

bool BatchFiller::AddDropReports(uint64_t generation, OutgoingBatch& out, Write write) {
  StatState* next;
  for (StatState* stat = buffers_.TakeReady(); stat != nullptr; stat = next) {
    next = stat->ready_next;
    listed_.push_back(stat);
  }
  // A stat leaves the list once every drop counted so far is reported.
  for (size_t i = 0; i < listed_.size();) {
    StatState* stat = listed_[i];
    if (const uint64_t drops = stat->unreported_drops(); drops > 0) {
      if (!out.Fits(kDropReportBytes + DefinitionBytes(*stat)) && !write()) return false;
      DefineOnStream(*stat, generation, out);
      out.AddDropReport(*stat, drops);
      // Reported from now on: the batch is kept until acknowledged.
      stat->drops_written.fetch_add(drops, std::memory_order_relaxed);
    }
    // Unlisted before the last look: a producer that then drops finds the
    // flag clear and lists the stat again; a drop counted before the flag
    // cleared is caught by the second look.
    stat->listed.store(false, std::memory_order_seq_cst);
    if (stat->unreported_drops() != 0 && !stat->listed.exchange(true)) {
      ++i;
      continue;
    }
    listed_[i] = listed_.back();
    listed_.pop_back();
  }
  return true;
}

bool BatchFiller::AddEvents(EventQueue::Taken& taken, OutgoingBatch& out, Write write) {
  while (!taken.events.empty()) {
    const size_t size = taken.events.front().ByteSizeLong() + kFieldOverheadBytes;
    if (!out.Fits(size) && !write()) return false;
    out.AddEvent(std::move(taken.events.front()), size);
    taken.events.pop_front();
  }
  while (!taken.drops.empty()) {
    const auto& [name, dropped] = taken.drops.back();
    const size_t size = name.size() + kDropReportBytes;
    if (!out.Fits(size) && !write()) return false;
    out.AddEventDropReport(name, dropped, size);
    taken.drops.pop_back();
  }
  return true;
}

bool BatchFiller::AddReleases(const std::vector<uint32_t>& ids, OutgoingBatch& out, Write write) {
  for (const uint32_t id : ids) {
    if (!out.Fits(OutgoingBatch::kReleaseBytes) && !write()) return false;
    out.AddRelease(id);
  }
  return true;
}

bool BatchFiller::LookForBurst() const {
  uint64_t buffered_total = 0;
  for (const ClientBuffers::Log& l : buffers_.logs) {
    const uint64_t buffered = l.log.pushed() - l.log.popped();
    if (SendPacer::IsBurst(buffered, SampleLog::kPaceSamples)) return true;
    buffered_total += buffered;
  }
  return SendPacer::IsBurst(buffered_total * sizeof(SampleCell), buffers_.pool.budget_bytes());
}

}  // namespace torchmon::detail


#include "detail/stat_retirement.h"

#include <algorithm>

namespace torchmon::detail {

bool StatRetirement::LookDue(uint64_t closed, uint64_t cycles_completed, uint64_t stream_generation,
                             Clock::time_point now) {
  // Looking is O(stats): only when a stat was closed since, a release is
  // due (a new stream defined the closed stats again: each needs one
  // there), or now and then while closed ones wait for acknowledgements.
  const bool release_due = release_due_at_cycle_ != 0 && cycles_completed >= release_due_at_cycle_;
  const bool new_stream = closed_kept_ && stream_generation != generation_seen_;
  if (closed == closed_seen_ && !release_due && !new_stream &&
      !(closed_kept_ && now - last_look_ >= kLookInterval)) {
    return false;
  }
  closed_seen_ = closed;
  generation_seen_ = stream_generation;
  last_look_ = now;
  closed_kept_ = false;
  release_due_at_cycle_ = 0;
  return true;
}

bool StatRetirement::Consider(StatState& stat, uint64_t cycles_completed,
                              uint64_t stream_generation) {
  // Its last add came before `closed` was set, so a cycle that starts after
  // this look and completes takes its last sample from the logs. A listed
  // stat is on the sender's list or the ready stack: it waits until the
  // sender has unlisted it.
  const StatCounts& c = stat.counts;
  const SenderSlot& slot = stat.sent;
  if (stat.closed_at_cycle == 0) {
    stat.closed_at_cycle = cycles_completed + 1;
    release_due_at_cycle_ = std::max(release_due_at_cycle_, stat.closed_at_cycle);
    // Released at the look after that cycle, written in the next one.
    if (stat.valid) releases_written_by_ = std::max(releases_written_by_, stat.closed_at_cycle + 1);
  } else if (cycles_completed >= stat.closed_at_cycle && stream_generation != 0 &&
             slot.defined_on == stream_generation && stat.released_on != stream_generation) {
    // Every sample taken: the stream may let go of its definition, so that
    // the series can be redefined (a Stat made again with another window or
    // cap). On a later stream that defined it again (its samples were still
    // unacknowledged), again.
    stat.released_on = stream_generation;
    stat.release_pending = true;
    releases_.push_back({&stat, stream_generation});
    releases_written_by_ = std::max(releases_written_by_, cycles_completed + 1);
  }
  const bool retire = cycles_completed >= stat.closed_at_cycle &&
                      !stat.listed.load(std::memory_order_acquire) &&
                      !stat.HasPendingDefinitionOrDrops() &&
                      slot.taken.load(std::memory_order_relaxed) ==
                          c.delivered.load(std::memory_order_relaxed) +
                              c.abandoned.load(std::memory_order_relaxed) &&
                      // Its release written (in a cycle after the one that found it due): a
                      // stat made meanwhile is after_release.
                      !stat.release_pending;
  if (!retire) closed_kept_ = true;
  return retire;
}

std::vector<uint32_t> StatRetirement::TakeReleases(uint64_t generation) {
  std::vector<uint32_t> ids;
  for (const auto& [stat, released_on] : releases_) {
    if (released_on == generation) ids.push_back(stat->id);
    stat->release_pending = false;
  }
  releases_.clear();
  return ids;
}

}  // namespace torchmon::detail

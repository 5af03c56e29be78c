// When the sender lets go of a closed stat: its release (the stream lets
// go of the definition, so the series can be redefined) and its retirement
// from the registry (nothing of it left to send or to hear back).
#ifndef TORCHMON_CLIENT_DETAIL_STAT_RETIREMENT_H_
#define TORCHMON_CLIENT_DETAIL_STAT_RETIREMENT_H_

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "detail/stat_state.h"

namespace torchmon::detail {

// Sender thread only; it looks before each send cycle. A stat closed
// (~Stat) after its last add is:
//  - released on the current stream (IngestBatch.released) once a send
//    cycle that started after the sender saw it closed has completed (so
//    that cycle took its last sample), the release written in the last
//    batch of the next cycle;
//  - retired (StatRegistry lets go of it, and of its id once the batches
//    written so far are acknowledged) once it is released, unlisted, its
//    definition and drops acknowledged and every sample it handed the
//    sender acknowledged or abandoned.
// A flush waits for the releases of the stats closed before it
// (ReleasesWrittenBy), so that a Stat made again with another definition
// is settled on the daemon when the flush returns.
class StatRetirement {
 public:
  using Clock = std::chrono::steady_clock;
  // While closed stats wait for acknowledgements, the registry is looked
  // at no more often than this.
  static constexpr std::chrono::milliseconds kLookInterval{1000};
  // This many Stats destroyed since the last look are a burst: the sender
  // cycles at once rather than at its paced gap, so that a loop making
  // Stats has them released, retired and their ids free again within a few
  // cycles of their making, not a few paced gaps (their state, ~350 bytes
  // each, waits until then).
  static constexpr uint64_t kClosedBurst = 4096;

  // Whether `closed` (ClientBuffers::closed_stats) is a burst of Stats
  // destroyed since the last look.
  bool ClosedBurst(uint64_t closed) const { return closed - closed_seen_ >= kClosedBurst; }

  // Whether to look at the registry now: a stat was closed since the last
  // look (`closed`: ClientBuffers::closed_stats), a release fell due at
  // `cycles_completed`, the stream (`stream_generation`) is not the last
  // look's (it defined the closed stats again), or closed stats wait and
  // kLookInterval has passed. If so, a look starts: call Consider on each
  // closed stat.
  bool LookDue(uint64_t closed, uint64_t cycles_completed, uint64_t stream_generation,
               Clock::time_point now);
  // Within a look (under the client's mutex, from StatRegistry::RetireClosed):
  // notes a release of `stat` due on the stream of `stream_generation` (0:
  // none yet), and returns true if it can be retired now.
  bool Consider(StatState& stat, uint64_t cycles_completed, uint64_t stream_generation);
  // The ids to release on the stream of `generation`, each once; those of
  // an earlier stream are dropped (its end released them).
  std::vector<uint32_t> TakeReleases(uint64_t generation);
  // The count of complete cycles by which every release due to a stat
  // considered so far is written (0: none due): a flush taken before the
  // last look is served by that cycle, not before.
  uint64_t ReleasesWrittenBy() const { return releases_written_by_; }

 private:
  // ClientBuffers::closed_stats at the last look, whether that look kept a
  // closed stat, when it was, and on which stream.
  uint64_t closed_seen_ = 0;
  uint64_t generation_seen_ = 0;
  bool closed_kept_ = false;
  Clock::time_point last_look_{};
  // A closed stat's release is due after this complete cycle: the next look
  // comes then.
  uint64_t release_due_at_cycle_ = 0;
  uint64_t releases_written_by_ = 0;
  // (stat, stream generation), each with StatState::release_pending set:
  // a stat is not retired before its release is written.
  std::vector<std::pair<StatState*, uint64_t>> releases_;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_STAT_RETIREMENT_H_

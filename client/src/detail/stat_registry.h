// The stats a client has registered and not yet retired, by id and by the
// series (name and labels) they feed, and the ids they may use.
#ifndef TORCHMON_CLIENT_DETAIL_STAT_REGISTRY_H_
#define TORCHMON_CLIENT_DETAIL_STAT_REGISTRY_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <queue>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "detail/stat_state.h"

namespace torchmon::detail {

// Not thread-safe: ClientCore holds it under its mutex. Holds every stat
// from its registration until the sender retires it (StatRetirement), so a
// stat whose Stat is gone still has its samples, drops and definition sent.
//
// Ids are reused. A retired stat's id waits until the daemon has
// acknowledged every batch written up to its retirement (the last one to
// name the id carried its release: IngestBatch.released), then is free
// (at once if the stat was never defined: no batch named it);
// NextId hands out the lowest free id before a new one. So no batch that
// a broken stream re-sends can name an id for two stats, the daemon has
// unbound the id before its next definition, and the ids in use, and the
// StatTable's entries, follow the stats alive rather than every stat ever
// made.
class StatRegistry {
 public:
  // The lowest free id, else the next new one (1, 2, ...), or 0 once
  // StatTable::kMaxIds - 1 are in use or waiting (id 0's entry counts the
  // samples of every stat refused so).
  uint32_t NextId();
  // The largest id handed out (0: none): the StatTable's entries in use
  // lie in 1..max_id().
  uint32_t max_id() const { return next_id_ - 1; }

  // True if a closed stat of this series (StatState::key_hash) is not yet
  // retired: a stat made now is defined after_release (torchmon.proto).
  bool HasClosed(uint64_t key_hash) const;
  // Registers `stat`; a valid one's definition goes out in the next send
  // cycle (TakeNew).
  void Add(std::shared_ptr<StatState> stat);
  // The valid stats registered since the last call. Raw pointers: a stat
  // never defined has its definition pending, so it is not retired.
  std::vector<StatState*> TakeNew();
  // Every stat not yet retired, in registration order (a copy: O(stats)).
  std::vector<std::shared_ptr<StatState>> All() const { return stats_; }
  // True if some stat's definition or drops await a daemon's ack. O(stats).
  bool AnyPendingDefinitionOrDrops() const;
  // Calls `retire` on each closed stat and lets go of those it returns true
  // for; their ids wait for the acknowledgement of batch `written_through`
  // (the last written: everything that named them is at or before it).
  // O(stats).
  void RetireClosed(absl::FunctionRef<bool(StatState&)> retire, uint64_t written_through);
  // Frees the ids retired with a batch numbered below `first_unsettled`
  // (AckLedger::first_unsettled: every batch before it is acknowledged or
  // abandoned), and returns them: the caller resets their entries for the
  // next stat before it lets go of the client's mutex.
  std::vector<uint32_t> FreeIdsSettledBefore(uint64_t first_unsettled);
  // Stats retired so far.
  uint64_t retired() const { return retired_; }
  // Ids retired and not yet free, and ids free.
  size_t ids_waiting() const { return waiting_ids_.size() + unsent_ids_.size(); }
  size_t ids_free() const { return free_ids_.size(); }

 private:
  // Takes a valid stat out of by_key_ / more_by_key_.
  void RemoveFromSeries(StatState& stat);

  std::vector<std::shared_ptr<StatState>> stats_;
  // The valid stats by the hash of their name and labels: the first of a
  // series in by_key_, the others (a series' stats whose Stats were made
  // again before the sender retired the old ones) in more_by_key_. A stat's
  // StatState::key_slot is 0 for the first, else 1 + its index among the
  // others: a loop of Stats of one series leaves hundreds of thousands
  // here, and each retires in O(1). Apart, because nearly every series has
  // one stat: by_key_'s slot is 16 bytes, where one holding an
  // InlinedVector took 32 (26 bytes a stat at 10,000 stats).
  absl::flat_hash_map<uint64_t, StatState*> by_key_;
  absl::flat_hash_map<uint64_t, std::vector<StatState*>> more_by_key_;
  std::vector<StatState*> new_stats_;
  uint32_t next_id_ = 1;
  uint64_t retired_ = 0;
  // (id, batch sequence) in order of retirement, so in sequence order.
  std::deque<std::pair<uint32_t, uint64_t>> waiting_ids_;
  // Ids of stats retired without ever being defined: in no batch.
  std::vector<uint32_t> unsent_ids_;
  // Lowest first: ids stay dense, in the tables here and the daemon's.
  std::priority_queue<uint32_t, std::vector<uint32_t>, std::greater<>> free_ids_;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_STAT_REGISTRY_H_

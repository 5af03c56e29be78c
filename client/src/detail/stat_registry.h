// The stats a client has registered and not yet retired, by id and by the
// series (name and labels) they feed.
#ifndef TORCHMON_CLIENT_DETAIL_STAT_REGISTRY_H_
#define TORCHMON_CLIENT_DETAIL_STAT_REGISTRY_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/functional/function_ref.h"
#include "detail/stat_state.h"

namespace torchmon::detail {

// Not thread-safe: ClientCore holds it under its mutex. Holds every stat
// from its registration until the sender retires it (StatRetirement), so a
// stat whose Stat is gone still has its samples, drops and definition sent.
// Ids are handed out once, never reused.
class StatRegistry {
 public:
  // The next id (1, 2, ...), or 0 once StatTable::kMaxIds - 1 have been
  // handed out (id 0's entry counts the samples of every stat refused so).
  uint32_t NextId();
  // The largest id handed out (0: none).
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
  // for. O(stats).
  void RetireClosed(absl::FunctionRef<bool(StatState&)> retire);

 private:
  std::vector<std::shared_ptr<StatState>> stats_;
  // The valid stats by the hash of their name and labels.
  absl::flat_hash_map<uint64_t, absl::InlinedVector<StatState*, 1>> by_key_;
  std::vector<StatState*> new_stats_;
  uint32_t next_id_ = 1;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_STAT_REGISTRY_H_

#include "detail/stat_registry.h"

#include <algorithm>
#include <utility>

namespace torchmon::detail {

uint32_t StatRegistry::NextId() {
  if (!free_ids_.empty()) {
    const uint32_t id = free_ids_.top();
    free_ids_.pop();
    return id;
  }
  return next_id_ < StatTable::kMaxIds ? next_id_++ : 0;
}

bool StatRegistry::HasClosed(uint64_t key_hash) const {
  const auto closed = [](const StatState* other) {
    return other->closed.load(std::memory_order_acquire);
  };
  const auto it = by_key_.find(key_hash);
  if (it == by_key_.end()) return false;
  if (closed(it->second)) return true;
  const auto more = more_by_key_.find(key_hash);
  return more != more_by_key_.end() &&
         std::any_of(more->second.begin(), more->second.end(), closed);
}

void StatRegistry::Add(std::shared_ptr<StatState> stat) {
  if (stat->valid) {
    new_stats_.push_back(stat.get());
    if (by_key_.try_emplace(stat->key_hash, stat.get()).second) {
      stat->key_slot = 0;
    } else {
      auto& more = more_by_key_[stat->key_hash];
      more.push_back(stat.get());
      stat->key_slot = static_cast<uint32_t>(more.size());
    }
  }
  stats_.push_back(std::move(stat));
}

void StatRegistry::RemoveFromSeries(StatState& stat) {
  const auto first = by_key_.find(stat.key_hash);
  if (first == by_key_.end()) return;
  const auto more = more_by_key_.find(stat.key_hash);
  if (more == more_by_key_.end()) {
    if (first->second == &stat) by_key_.erase(first);
    return;
  }
  std::vector<StatState*>& others = more->second;
  // The place it leaves: the series' first, or its slot among the others;
  // the last of the others fills it.
  StatState*& place = stat.key_slot == 0 ? first->second : others[stat.key_slot - 1];
  StatState* const last = others.back();
  others.pop_back();
  if (last != &stat) {
    place = last;
    last->key_slot = stat.key_slot;
  }
  if (others.empty()) more_by_key_.erase(more);
}

std::vector<StatState*> StatRegistry::TakeNew() {
  std::vector<StatState*> fresh;
  fresh.swap(new_stats_);
  return fresh;
}

bool StatRegistry::AnyPendingDefinitionOrDrops() const {
  return std::any_of(stats_.begin(), stats_.end(),
                     [](const auto& stat) { return stat->HasPendingDefinitionOrDrops(); });
}

void StatRegistry::RetireClosed(absl::FunctionRef<bool(StatState&)> retire,
                                uint64_t written_through) {
  size_t kept = 0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    StatState& stat = *stats_[i];
    if (stat.closed.load(std::memory_order_acquire) && retire(stat)) {
      if (stat.valid) RemoveFromSeries(stat);
      ++retired_;
      // Id 0 is shared by the stats refused an id: never anyone's own. A
      // stat never defined was never in a batch: its id is free at once.
      if (stat.id != 0 && stat.ever_defined.load(std::memory_order_relaxed)) {
        waiting_ids_.emplace_back(stat.id, written_through);
      } else if (stat.id != 0) {
        unsent_ids_.push_back(stat.id);
      }
      continue;
    }
    if (kept != i) stats_[kept] = std::move(stats_[i]);
    ++kept;
  }
  stats_.resize(kept);
}

std::vector<uint32_t> StatRegistry::FreeIdsSettledBefore(uint64_t first_unsettled) {
  std::vector<uint32_t> freed;
  freed.swap(unsent_ids_);
  while (!waiting_ids_.empty() && waiting_ids_.front().second < first_unsettled) {
    freed.push_back(waiting_ids_.front().first);
    waiting_ids_.pop_front();
  }
  for (const uint32_t id : freed) free_ids_.push(id);
  return freed;
}

}  // namespace torchmon::detail

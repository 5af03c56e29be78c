#include "detail/stat_registry.h"

#include <algorithm>
#include <utility>

namespace torchmon::detail {

uint32_t StatRegistry::NextId() { return next_id_ < StatTable::kMaxIds ? next_id_++ : 0; }

bool StatRegistry::HasClosed(uint64_t key_hash) const {
  const auto it = by_key_.find(key_hash);
  if (it == by_key_.end()) return false;
  return std::any_of(it->second.begin(), it->second.end(), [](const StatState* other) {
    return other->closed.load(std::memory_order_acquire);
  });
}

void StatRegistry::Add(std::shared_ptr<StatState> stat) {
  if (stat->valid) {
    new_stats_.push_back(stat.get());
    by_key_[stat->key_hash].push_back(stat.get());
  }
  stats_.push_back(std::move(stat));
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

void StatRegistry::RetireClosed(absl::FunctionRef<bool(StatState&)> retire) {
  size_t kept = 0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    StatState& stat = *stats_[i];
    if (stat.closed.load(std::memory_order_acquire) && retire(stat)) {
      if (auto it = by_key_.find(stat.key_hash); it != by_key_.end()) {
        auto& same = it->second;
        same.erase(std::remove(same.begin(), same.end(), &stat), same.end());
        if (same.empty()) by_key_.erase(it);
      }
      continue;
    }
    if (kept != i) stats_[kept] = std::move(stats_[i]);
    ++kept;
  }
  stats_.resize(kept);
}

}  // namespace torchmon::detail

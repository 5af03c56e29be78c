#include "server/ingest/client_registry.h"

#include <algorithm>
#include <vector>

namespace torchmon::server {

ClientRegistry::ClientRegistry(const Clock& clock, int64_t idle_ttl_ms, size_t max_idle)
    : clock_(clock), idle_ttl_ms_(idle_ttl_ms), max_idle_(max_idle) {}

std::shared_ptr<ClientRegistry::Client> ClientRegistry::Acquire(uint64_t instance) {
  absl::MutexLock lock(&mu_);
  Entry& entry = clients_[instance];
  if (entry.client == nullptr) {
    entry.client = std::make_shared<Client>();
  } else if (entry.streams == 0) {
    --idle_;
  }
  ++entry.streams;
  return entry.client;
}

void ClientRegistry::Release(uint64_t instance) {
  absl::MutexLock lock(&mu_);
  auto it = clients_.find(instance);
  if (it == clients_.end() || it->second.streams == 0) return;
  if (--it->second.streams == 0) {
    it->second.idle_since_ms = clock_.NowMs();
    ++idle_;
    TrimIdleLocked();
  }
}

void ClientRegistry::TrimIdleLocked() {
  if (idle_ <= max_idle_) return;
  // Rare (only past max_idle_ idle clients): a sort of the idle ones.
  std::vector<std::pair<int64_t, uint64_t>> idle;
  idle.reserve(idle_);
  for (const auto& [instance, entry] : clients_) {
    if (entry.streams == 0) idle.emplace_back(entry.idle_since_ms, instance);
  }
  const size_t excess = idle.size() - max_idle_;
  std::nth_element(idle.begin(), idle.begin() + static_cast<ptrdiff_t>(excess), idle.end());
  for (size_t i = 0; i < excess; ++i) clients_.erase(idle[i].second);
  idle_ -= excess;
}

size_t ClientRegistry::ExpireIdle() {
  const int64_t cutoff = clock_.NowMs() - idle_ttl_ms_;
  absl::MutexLock lock(&mu_);
  size_t expired = 0;
  for (auto it = clients_.begin(); it != clients_.end();) {
    if (it->second.streams == 0 && it->second.idle_since_ms <= cutoff) {
      clients_.erase(it++);
      ++expired;
    } else {
      ++it;
    }
  }
  idle_ -= expired;
  return expired;
}

size_t ClientRegistry::size() const {
  absl::MutexLock lock(&mu_);
  return clients_.size();
}

}  // namespace torchmon::server

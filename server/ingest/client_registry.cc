#include "server/ingest/client_registry.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/core/state_wire.h"

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

void ClientRegistry::RecordApplied(uint64_t instance, uint64_t sequence) {
  if (journal_ == nullptr) return;
  journal_->gate().AssertHeld();
  state::Writer w(journal_->record());
  w.U8(static_cast<uint8_t>(JournalOp::kClientApplied));
  w.Varint(instance);
  w.Varint(sequence);
}

void ClientRegistry::SaveState(state::Writer& w) const {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<uint64_t, uint64_t>> clients;
  clients.reserve(clients_.size());
  for (const auto& [instance, entry] : clients_) {
    absl::MutexLock client(&entry.client->mu);
    if (entry.client->applied_through != 0) {
      clients.emplace_back(instance, entry.client->applied_through);
    }
  }
  w.Varint(clients.size());
  for (const auto& [instance, applied] : clients) {
    w.Varint(instance);
    w.Varint(applied);
  }
}

void ClientRegistry::RestoreLocked(uint64_t instance, uint64_t sequence) {
  auto [it, inserted] = clients_.try_emplace(instance);
  Entry& entry = it->second;
  if (inserted) {
    entry.client = std::make_shared<Client>();
    entry.idle_since_ms = clock_.NowMs();
    ++idle_;
  }
  absl::MutexLock client(&entry.client->mu);
  entry.client->applied_through = std::max(entry.client->applied_through, sequence);
}

bool ClientRegistry::LoadState(state::Reader& r) {
  const size_t n = r.Count("clients", 2);
  std::vector<std::pair<uint64_t, uint64_t>> clients;
  for (size_t i = 0; i < n && r.ok(); ++i) {
    const uint64_t instance = r.Varint("client instance");
    const uint64_t applied = r.Varint("client's newest batch");
    clients.emplace_back(instance, applied);
  }
  if (!r.ok()) return false;
  absl::MutexLock lock(&mu_);
  for (const auto& [instance, applied] : clients) RestoreLocked(instance, applied);
  TrimIdleLocked();
  return true;
}

bool ClientRegistry::Replay(state::Reader& r) {
  const uint64_t instance = r.Varint("client instance");
  const uint64_t applied = r.Varint("client's newest batch");
  if (!r.ok()) return false;
  absl::MutexLock lock(&mu_);
  RestoreLocked(instance, applied);
  TrimIdleLocked();
  return true;
}

}  // namespace torchmon::server

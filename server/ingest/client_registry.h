// What the daemon remembers about each client process across its streams:
// the newest batch it applied, so that a batch re-sent after a broken stream
// is acknowledged without being applied twice.
//
// Thread-safe.
#ifndef TORCHMON_SERVER_INGEST_CLIENT_REGISTRY_H_
#define TORCHMON_SERVER_INGEST_CLIENT_REGISTRY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/core/clock.h"
#include "server/core/state_journal.h"

namespace torchmon::server {
namespace state {
class Writer;
class Reader;
}  // namespace state

class ClientRegistry {
 public:
  // One client process (IngestHello.client_instance). Its streams hold
  // `mu` while they check and apply a batch, so two streams of one client
  // (an old one still draining, the new one re-sending) apply each batch
  // once between them.
  struct Client {
    absl::Mutex mu;
    // Sequence of the newest batch applied; batches at or below it are
    // duplicates.
    uint64_t applied_through ABSL_GUARDED_BY(mu) = 0;
  };

  // Clients with no open stream are forgotten `idle_ttl_ms` after their last
  // stream ended; at most `max_idle` idle ones are remembered (the oldest
  // go first). A client re-sending after it was forgotten may have a batch
  // applied twice, hence a TTL as long as the series TTL by default.
  ClientRegistry(const Clock& clock, int64_t idle_ttl_ms, size_t max_idle);

  // The record of `instance` (non-zero), created if new, counted as in use
  // by one more stream until Release.
  std::shared_ptr<Client> Acquire(uint64_t instance) ABSL_LOCKS_EXCLUDED(mu_);
  void Release(uint64_t instance) ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets idle clients past the TTL; returns how many.
  size_t ExpireIdle() ABSL_LOCKS_EXCLUDED(mu_);

  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

  // The daemon's state on disk (server/state/state_store.h). With a
  // journal, RecordApplied journals each batch a client's stream applied
  // (under the journal's gate, after the batch's changes); SaveState and
  // LoadState copy every client's newest batch, Replay applies one
  // journaled kClientApplied. Clients restored are idle (no stream
  // survives a restart) from the time of the restore.
  void SetJournal(StateJournal* journal) { journal_ = journal; }
  void RecordApplied(uint64_t instance, uint64_t sequence);
  void SaveState(state::Writer& out) const ABSL_LOCKS_EXCLUDED(mu_);
  bool LoadState(state::Reader& in) ABSL_LOCKS_EXCLUDED(mu_);
  bool Replay(state::Reader& in) ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Entry {
    std::shared_ptr<Client> client;
    int streams = 0;
    int64_t idle_since_ms = 0;
  };
  // Drops the longest-idle entries until at most max_idle_ are idle.
  void TrimIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // The newest batch of `instance` is `sequence` or later (restore).
  void RestoreLocked(uint64_t instance, uint64_t sequence) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Clock& clock_;
  StateJournal* journal_ = nullptr;
  const int64_t idle_ttl_ms_;
  const size_t max_idle_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, Entry> clients_ ABSL_GUARDED_BY(mu_);
  size_t idle_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_INGEST_CLIENT_REGISTRY_H_

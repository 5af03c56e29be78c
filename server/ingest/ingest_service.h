// gRPC edge of ingestion: one reactor per stream reads batches, applies them
// through an IngestSession and writes acks. Reactions never block on I/O:
// the next read starts as soon as a batch is applied; acks coalesce while a
// write is in flight.
#ifndef TORCHMON_SERVER_INGEST_INGEST_SERVICE_H_
#define TORCHMON_SERVER_INGEST_INGEST_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/aggregator.h"
#include "server/core/rate_limited_log.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/core/broadcaster.h"
#include "server/ingest/client_registry.h"
#include "server/core/daemon_stats.h"
#include "server/ingest/ingest_session.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::server {

class IngestReactor;

struct IngestServiceOptions {
  IngestLimits limits;
  // Ingest streams open at once; more are refused with RESOURCE_EXHAUSTED.
  int64_t max_streams = 4096;
  // How long a client that went away is remembered for de-duplicating its
  // re-sent batches, and how many such clients at most.
  int64_t client_memory_ms = 10 * 60 * 1000;
  size_t max_remembered_clients = 65536;
  // Where refused streams and batches with refused parts are logged
  // (rate-limited); none if null. Must outlive the service.
  RateLimitedLog* client_log = nullptr;
  // With --peer-labels: what the daemon vouches for about the client of a
  // stream, from its call (the peer string of a Unix connection the daemon
  // accepted, a named token or a client certificate; IngestSession's
  // VouchedIdentity). Unset: every stream's labels are the client's alone.
  std::function<VouchedIdentity(const grpc::CallbackServerContext& call)> vouch;
  // Whether a stream may open, asked before anything else (the daemon's
  // token check, which knows the caller's peer): OK, or the status the
  // stream ends with at once. Unset: every stream opens.
  std::function<grpc::Status(const grpc::CallbackServerContext& call)> admit;
};

// Thread-safe; outlives every stream it serves (the gRPC server is shut down
// before it is destroyed).
class IngestService final : public v1::Ingest::CallbackService {
 public:
  IngestService(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                Broadcaster<EventRecord>& events_out, const Clock& clock,
                IngestServiceOptions options = {});

  grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck>* Stream(
      grpc::CallbackServerContext* context) override;

  // Stops applying batches: waits for the batches being applied to finish,
  // then ends every open stream with UNAVAILABLE once its pending ack is
  // written; a batch that arrives meanwhile is neither applied nor
  // acknowledged (its client re-sends it to the next daemon). After this,
  // nothing reaches the aggregator through ingest. Idempotent.
  void StopApplying() ABSL_LOCKS_EXCLUDED(gate_, streams_mu_);

  // Waits until no ingest stream is open (each ended and done), or until
  // `deadline`. True if none is.
  bool AwaitNoStreams(absl::Time deadline) ABSL_LOCKS_EXCLUDED(streams_mu_);

  // Forgets clients gone longer than client_memory_ms.
  void ExpireIdleClients() { clients_.ExpireIdle(); }

  // The client registry (restored from the daemon's state before serving).
  ClientRegistry& clients() { return clients_; }
  // With --state-dir, before serving: every batch's changes are journaled
  // under its gate and written before the batch is acknowledged.
  void SetJournal(StateJournal* journal) { journal_ = journal; }

  // Random, non-zero, fixed for the life of this service: IngestAck.daemon_instance.
  uint64_t instance() const { return instance_; }

 private:
  friend class IngestReactor;

  Aggregator& aggregator_;
  EventLog& events_;
  DaemonStats& stats_;
  Broadcaster<EventRecord>& events_out_;
  const IngestServiceOptions options_;
  const uint64_t instance_;
  ClientRegistry clients_;
  StateJournal* journal_ = nullptr;  // set once, before serving
  // Held shared while a batch is applied; StopApplying takes it exclusively.
  absl::Mutex gate_;
  bool applying_ ABSL_GUARDED_BY(gate_) = true;
  // Open streams, so that StopApplying can end idle ones too. A reactor
  // leaves in OnDone, under streams_mu_, before it is deleted.
  absl::Mutex streams_mu_ ABSL_ACQUIRED_AFTER(gate_);
  absl::flat_hash_set<IngestReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool NoStreamsLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(streams_mu_) { return streams_.empty(); }
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_INGEST_INGEST_SERVICE_H_

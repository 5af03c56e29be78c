// The engine behind torchmon::Client: holds the client's parts (the stat
// registry, the event queue, the ack ledger, ...) and runs the threads that
// stream batches to torchmond and read its acks.
#ifndef TORCHMON_CLIENT_DETAIL_CLIENT_CORE_H_
#define TORCHMON_CLIENT_DETAIL_CLIENT_CORE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "detail/ack_ledger.h"
#include "detail/batch_filler.h"
#include "detail/error_log.h"
#include "detail/event_queue.h"
#include "detail/outgoing_batch.h"
#include "detail/sender_clock.h"
#include "detail/stat_registry.h"
#include "detail/stat_retirement.h"
#include "detail/stat_state.h"
#include "detail/wire_batch.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"  // IngestAck read by gRPC
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/sync_stream.h"
#include "torchmon/client.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// Thread-safe. Starts its sender thread on construction; Shutdown() (or the
// destructor) flushes, stops it and detaches every registered Stat.
//
// The core holds the client's parts and runs its threads; each part is a
// class of its own with its contract on its header:
//   option_checks.h    options, identity labels and stat definitions,
//                      checked before anything is sent;
//   stat_registry.h    the stats registered and not yet retired, and
//                      their ids;
//   event_queue.h      events logged and not yet in a batch, and drops;
//   ack_ledger.h       batches kept until acknowledged, what acks settle,
//                      and flush tickets;
//   batch_filler.h     what a send cycle puts in batches (sender only);
//   stat_retirement.h  when a closed stat is released and retired (sender
//                      only).
// The parts shared with API callers (registry, queue, ledger) are not
// thread-safe and are held ABSL_GUARDED_BY(mu_); the sender-only parts are
// touched by the sender thread alone. This file's .cc holds what API calls
// run (client_core.cc) and what the threads run (client_core_sender.cc).
//
// Threads: the sender thread connects, owns the gRPC stream and is the
// only consumer of the sample logs (the connect loop, the stream and the
// send cycle); a reader thread per stream reads IngestAcks.
//
// Delivery: every batch with samples, drops or events gets the next
// sequence number and is kept (AckLedger) until an ack covers it. When a
// stream breaks, the next one opens with a batch of sequence 0 carrying the
// hello and every definition, then re-sends the kept batches in order with
// their own numbers; the daemon, knowing this client by its instance
// number, acknowledges without re-applying any batch it had applied. So a
// sample is applied at most once by a daemon process and is counted as
// delivered, or as dropped when the client stops before an ack.
//
// Flush: Flush takes a ticket and wakes the sender; a complete send cycle
// marks the tickets it served written as of its last sequence, and the
// Flush waits for that sequence's ack, across reconnects (AckLedger). A
// cycle serves a ticket once it has taken everything buffered before the
// ticket and written the release of every Stat destroyed before it
// (StatRetirement::ReleasesWrittenBy): so when Flush returns, a Stat made
// again under the same name with another definition is settled on the
// daemon, its samples in the series.
//
// Ids: a retired stat's id is reused once the batches written up to its
// retirement are acknowledged (StatRegistry); its counts move to freed_.
class ClientCore {
 public:
  // `clock` paces the sender and times its waits and Flush's deadline; it
  // must outlive the core (tests pass a ManualSenderClock). Throws
  // std::invalid_argument if options.buffer_bytes is out of bounds
  // (CheckedBufferBudget); any other problem (a label, the target, the
  // credentials) is recorded for TakeErrors and printed once, and the
  // client runs without it.
  explicit ClientCore(ClientOptions options, const SenderClock& clock = SenderClock::Real());
  ~ClientCore();
  ClientCore(const ClientCore&) = delete;
  ClientCore& operator=(const ClientCore&) = delete;

  // Validates the definition, registers it and returns its state. Never
  // fails: an invalid stat gets a state that drops and counts every sample,
  // and the reason is recorded (TakeErrors) and printed once.
  std::shared_ptr<StatState> RegisterStat(std::string name,
                                          const std::vector<StatAggregation>& aggregations,
                                          std::chrono::milliseconds window_size,
                                          const StatOptions& options) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Status Flush(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);
  void LogEvent(const Event& event) ABSL_LOCKS_EXCLUDED(mu_);
  ClientStats Stats() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> TakeErrors() ABSL_LOCKS_EXCLUDED(mu_);

  // The largest stat id handed out so far (StatRegistry::max_id).
  uint32_t LargestStatId() const ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& target() const { return target_; }
  const Labels& labels() const { return labels_; }

  // True in a child forked after this core was made: its threads do not
  // exist there, so it must be neither flushed nor joined.
  bool InForkedChild() const;

  // Flushes (bounded by destructor_flush_timeout) and stops the threads.
  // Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Writes WireBatch: definitions go as the bytes the stats keep.
  using Stream = grpc::ClientReaderWriter<WireBatch, v1::IngestAck>;
  struct StreamState;

  // --- sender thread (client_core_sender.cc) ---
  // The connect loop: waits for the channel, runs a stream, backs off, until
  // stopped.
  void SenderMain() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `budget` for the channel to connect; false on timeout or stop.
  bool WaitForChannel(std::chrono::milliseconds budget) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens a stream and sends on it until it breaks or the client stops.
  // Returns true if the daemon acknowledged anything on it.
  bool RunStream() ABSL_LOCKS_EXCLUDED(mu_);
  // One send cycle: the new definitions, the logs, the listed stats' drop
  // counts, the event queue and the due releases into batches, written.
  // False if a write failed (the stream is broken; events taken go back to
  // the queue).
  bool RunCycle(StreamState& stream, BatchFiller::LogsTaken* taken) ABSL_LOCKS_EXCLUDED(mu_);
  // Numbers `out`, keeps it until acknowledged and writes it. `out` is left
  // empty. False if the write failed (the batch is re-sent on the next
  // stream).
  bool WriteBatch(StreamState& stream, OutgoingBatch& out) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens a stream: the hello and every definition (sequence 0), then the
  // batches still unacknowledged from earlier streams. False if a write
  // failed.
  bool OpenStream(StreamState& stream) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits while the unacknowledged batches, less `own_bytes` (a batch kept
  // but not yet written), hold max_unacked_bytes; false if the stream ended
  // or the client is stopping meanwhile.
  bool WaitForAckRoom(size_t own_bytes) ABSL_LOCKS_EXCLUDED(mu_);
  // Lets the registry go of closed stats with nothing left pending, when a
  // look is due (StatRetirement), and frees the ids whose batches are all
  // acknowledged. Before each send cycle.
  void RetireClosedStats() ABSL_LOCKS_EXCLUDED(mu_);
  // Before a cycle: queues flush ticket `ticket` (the newest handed out)
  // with the count of complete cycles that serves it. After a complete
  // cycle: marks the tickets it served written (AckLedger::CycleWrote).
  void QueueFlush(uint64_t ticket);
  void ServeFlushes() ABSL_LOCKS_EXCLUDED(mu_);

  // --- reader thread (client_core_sender.cc) ---
  void ReaderMain(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAck(const v1::IngestAck& ack) ABSL_LOCKS_EXCLUDED(mu_);

  // --- any thread (client_core.cc) ---
  // Counts everything still unacknowledged as dropped; the client stopped.
  void AbandonUndelivered() ABSL_LOCKS_EXCLUDED(mu_);
  bool HasPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stats destroyed and not yet retired.
  uint64_t StatsWaitingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Waits for progress_cv_ unless `deadline` has passed; false if it has.
  bool WaitProgressLocked(std::chrono::steady_clock::time_point deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Stopping() const ABSL_LOCKS_EXCLUDED(mu_);
  // Records a client-side error and prints it once, prefixed "torchmon: ".
  void RecordLocalError(std::string message) ABSL_LOCKS_EXCLUDED(mu_);
  // Prints `line` to stderr unless it was printed before.
  void PrintOnce(const std::string& line) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status FlushTimeoutStatus(std::chrono::milliseconds timeout) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const ClientOptions options_;
  const SenderClock& clock_;
  const std::string target_;
  // Set by the constructor, immutable afterwards.
  Labels labels_;
  const std::string client_name_;
  const pid_t owner_pid_;
  std::shared_ptr<grpc::Channel> channel_;
  // torchmon.v1.Ingest/Stream on channel_ (kIngestStreamMethod).
  std::optional<grpc::internal::RpcMethod> stream_method_;
  // Identifies this client to the daemon across its streams (never 0).
  const uint64_t client_instance_;

  // The sample budget, the logs and the per-stat counts, shared with every
  // StatState.
  const std::shared_ptr<ClientBuffers> buffers_;

  // Sender thread only.
  uint64_t last_sequence_ = 0;
  uint64_t stream_generation_ = 0;
  // Send cycles that took everything buffered at their start.
  uint64_t cycles_completed_ = 0;
  BatchFiller filler_;
  StatRetirement retirement_;
  // Flush tickets taken at a cycle's start, oldest first, each with the
  // count of complete cycles that serves it (never less than the one
  // before it).
  struct FlushDue {
    uint64_t ticket;
    uint64_t at_cycle;
  };
  std::deque<FlushDue> flushes_due_;
  uint64_t flush_queued_ = 0;  // the newest ticket queued

  mutable absl::Mutex mu_;
  // Wakes the sender: flush requested, stop, stream ended by the daemon,
  // room for more unacknowledged batches.
  absl::CondVar sender_cv_;
  // Wakes Flush and Shutdown: batches written, acknowledged or lost;
  // sender exited.
  absl::CondVar progress_cv_;
  // Wakes RegisterStat pacing a loop of Stats: stats retired, stream
  // ended, stop.
  absl::CondVar retired_cv_;

  StatRegistry registry_ ABSL_GUARDED_BY(mu_);
  // The counts of the stats whose ids were freed (Stats adds them).
  FreedCounts freed_ ABSL_GUARDED_BY(mu_);
  EventQueue events_ ABSL_GUARDED_BY(mu_);
  AckLedger ledger_ ABSL_GUARDED_BY(mu_);
  // Set once the client stopped and abandoned what was unacknowledged:
  // samples still in the logs are dropped from then on.
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;

  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  bool sender_exited_ ABSL_GUARDED_BY(mu_) = false;
  bool connected_ ABSL_GUARDED_BY(mu_) = false;
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;
  bool acked_on_stream_ ABSL_GUARDED_BY(mu_) = false;
  // Set when the last stream ended refused (UNAUTHENTICATED,
  // PERMISSION_DENIED); cleared by the next ack. Flush returns it at once.
  absl::Status credentials_refused_ ABSL_GUARDED_BY(mu_);
  // The live stream's context, so Shutdown can cancel a blocked Write.
  grpc::ClientContext* active_context_ ABSL_GUARDED_BY(mu_) = nullptr;

  // The non-sample counters; sample counts are summed from the stats.
  ClientStats counters_ ABSL_GUARDED_BY(mu_);
  ErrorLog error_log_ ABSL_GUARDED_BY(mu_);

  std::thread sender_;
};

// What the library's tests reach inside a Client through.
struct ClientInternals {
  // A Client whose core runs on `clock` (which must outlive it).
  static std::unique_ptr<Client> WithClock(ClientOptions options, const SenderClock& clock) {
    return std::unique_ptr<Client>(
        new Client(std::make_shared<ClientCore>(std::move(options), clock)));
  }
  // The largest stat id `client` has handed out: its tables hold that many
  // entries.
  static uint32_t LargestStatId(const Client& client) { return client.core_->LargestStatId(); }
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_CLIENT_CORE_H_

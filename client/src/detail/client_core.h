// The engine behind torchmon::Client: the stat registry, the event queue,
// the sender thread that streams batches to torchmond, and the flush
// bookkeeping.
#ifndef TORCHMON_CLIENT_DETAIL_CLIENT_CORE_H_
#define TORCHMON_CLIENT_DETAIL_CLIENT_CORE_H_

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "detail/error_log.h"
#include "detail/outgoing_batch.h"
#include "detail/sender_clock.h"
#include "detail/stat_state.h"
#include "grpcpp/grpcpp.h"
#include "torchmon/client.h"
#include "torchmon/v1/torchmon.grpc.pb.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// Converts an Event to its wire form, validating what the daemon would
// refuse (names, label keys, UTF-8, size).
absl::Status EventToProto(const Event& event, v1::Event* out);

// Thread-safe. Starts its sender thread on construction; Shutdown() (or the
// destructor) flushes, stops it and detaches every registered Stat.
//
// Threads: the sender thread owns the gRPC stream and is the only consumer
// of the sample logs; a reader thread per stream reads IngestAcks. Everything
// they share with API callers is guarded by mu_.
//
// Delivery: every batch with samples, drops or events gets the next
// sequence number and is kept (retained_) until an ack covers it. When a
// stream breaks, the next one opens with a batch of sequence 0 carrying the
// hello and every definition, then re-sends the kept batches in order with
// their own numbers; the daemon, knowing this client by its instance
// number, acknowledges without re-applying any batch it had applied. So a
// sample is applied at most once by a daemon process and is counted as
// delivered, or as dropped when the client stops before an ack.
//
// Flush protocol: Flush takes a ticket and wakes the sender. A send cycle
// records the newest ticket before draining; once the cycle has written
// everything that was buffered when it started, tickets up to that one are
// "written" as of the last sequence the cycle used. The Flush then waits for
// that sequence to be acknowledged, across reconnects.
class ClientCore {
 public:
  // `clock` paces the sender and times its waits and Flush's deadline; it
  // must outlive the core (tests pass a ManualSenderClock).
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
                                          const StatOptions& options);

  absl::Status Flush(std::chrono::milliseconds timeout) ABSL_LOCKS_EXCLUDED(mu_);
  void LogEvent(const Event& event) ABSL_LOCKS_EXCLUDED(mu_);
  ClientStats Stats() const ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> TakeErrors() ABSL_LOCKS_EXCLUDED(mu_);

  const std::string& target() const { return target_; }
  const Labels& labels() const { return labels_; }

  // True in a child forked after this core was made: its threads do not
  // exist there, so it must be neither flushed nor joined.
  bool InForkedChild() const;

  // Flushes (bounded by destructor_flush_timeout) and stops the threads.
  // Idempotent.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  using Stream = grpc::ClientReaderWriter<v1::IngestBatch, v1::IngestAck>;
  struct StreamState;

  // --- sender thread ---
  void SenderMain() ABSL_LOCKS_EXCLUDED(mu_);
  // Waits up to `budget` for the channel to connect; false on timeout or stop.
  bool WaitForChannel(std::chrono::milliseconds budget) ABSL_LOCKS_EXCLUDED(mu_);
  // Opens a stream and sends on it until it breaks or the client stops.
  // Returns true if the daemon acknowledged anything on it.
  bool RunStream() ABSL_LOCKS_EXCLUDED(mu_);
  struct CycleResult {
    // False if a sample buffered at the start could not be taken yet (a
    // producer was mid-push): the cycle does not complete a flush.
    bool complete = true;
    // The largest fraction of a log, or of the client's budget,
    // found occupied, for pacing.
    double max_fill = 0;
  };
  // Drains the logs, the listed stats' drop counts and the event queue into
  // batches and writes them. False if a write failed (the stream is broken).
  bool RunCycle(StreamState& stream, CycleResult* result) ABSL_LOCKS_EXCLUDED(mu_);
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
  // Counts everything still unacknowledged as dropped; the client stopped.
  void AbandonUndelivered() ABSL_LOCKS_EXCLUDED(mu_);
  // True if the budget, or a log, is full enough that a cycle should not
  // wait.
  bool LookForBurstLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts events taken for a cycle but never written back at the queue head.
  void RequeueEvents(std::deque<v1::Event>& events) ABSL_LOCKS_EXCLUDED(mu_);
  // Event drops taken for a batch but not written: counted again.
  void RequeueEventDrops(std::vector<std::pair<std::string, uint64_t>>& drops)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Counts one dropped event under its name (under mu_).
  void CountEventDropLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RetireClosedStats() ABSL_LOCKS_EXCLUDED(mu_);

  // --- reader thread ---
  void ReaderMain(Stream* stream) ABSL_LOCKS_EXCLUDED(mu_);
  void OnAck(const v1::IngestAck& ack) ABSL_LOCKS_EXCLUDED(mu_);
  // The only writers of the counts StatCounts keeps "under the client's
  // mutex" (delivered, drops acknowledged, their per-daemon twins,
  // abandoned), so -Wthread-safety checks every write holds mu_.
  void CountDeliveredLocked(const OutgoingBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountAbandonedLocked(const OutgoingBatch& batch) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ResetCurrentDaemonCountsLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Moves the stats that woke since the last cycle onto listed_.
  void TakeReadyStats();
  // Takes up to `max` samples from `log` into `out`, counts them to their
  // stats and defines on the stream any stat not yet defined there. Returns
  // how many (0: none published yet).
  size_t TakeSamples(SampleLog& log, uint64_t max, const StreamState& stream, OutgoingBatch& out);
  // Adds the definition of `stat` to `out` unless it went out on this
  // stream already (then it is known to the daemon before `out`).
  void DefineOnStream(StatState& stat, const StreamState& stream, OutgoingBatch& out);

  // --- any thread ---
  bool HasPendingLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
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
  std::unique_ptr<v1::Ingest::Stub> stub_;

  // The sample budget, shared with every StatState.
  const std::shared_ptr<ClientBuffers> buffers_;

  // Sender thread only.
  uint64_t last_sequence_ = 0;
  uint64_t stream_generation_ = 0;
  // The listed stats (StatState::listed): those with drops to report. Raw
  // pointers: a listed stat is never retired.
  std::vector<StatState*> listed_;
  // Scratch for TakeSamples.
  SampleGroups groups_;
  // The memory of batches' arenas, recycled; freed once no thread has
  // added for kIdleRelease (as idle logs give their chunks back).
  const std::shared_ptr<BatchMemory> batch_memory_ = std::make_shared<BatchMemory>();
  // Send cycles that took everything buffered at their start.
  uint64_t cycles_completed_ = 0;
  // ClientBuffers::closed_stats when RetireClosedStats last ran, whether
  // that pass kept a closed stat (still pending), and when it ran.
  uint64_t closed_seen_ = 0;
  bool closed_kept_ = false;
  // A closed stat's release is due after the next complete cycle (its last
  // samples taken by then): RetireClosedStats looks again at once.
  uint64_t release_due_at_cycle_ = 0;
  // Ids of closed stats whose samples have all been taken, for the next
  // batch's `released` (those of another stream than the current one's are
  // skipped: its end released them).
  std::vector<std::pair<uint32_t, uint64_t>> releases_;  // (id, stream generation)
  std::chrono::steady_clock::time_point last_retire_{};

  mutable absl::Mutex mu_;
  // Wakes the sender: flush requested, stop, stream ended by the daemon.
  absl::CondVar sender_cv_;
  // Wakes Flush and Shutdown: batches written, acknowledged or lost;
  // sender exited.
  absl::CondVar progress_cv_;

  std::vector<std::shared_ptr<StatState>> stats_ ABSL_GUARDED_BY(mu_);
  // The registered valid stats by the hash of their name and labels: a
  // stat made while one of its name and labels is closed, not yet retired,
  // is defined after_release (torchmon.proto, StatDefinition).
  absl::flat_hash_map<uint64_t, absl::InlinedVector<StatState*, 1>> by_key_ ABSL_GUARDED_BY(mu_);
  // Valid stats registered since the sender last looked: their definitions
  // go out in the next cycle. Raw pointers: a stat never defined is pending,
  // so it is not retired.
  std::vector<StatState*> new_stats_ ABSL_GUARDED_BY(mu_);
  uint32_t next_stat_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Samples acknowledged or abandoned, over all stats: every sample pushed
  // to a log is pending until it is one of these.
  uint64_t samples_settled_ ABSL_GUARDED_BY(mu_) = 0;
  // Set once the client stopped and abandoned what was unacknowledged:
  // samples still in the logs are dropped from then on.
  bool abandoned_ ABSL_GUARDED_BY(mu_) = false;

  std::deque<v1::Event> events_ ABSL_GUARDED_BY(mu_);
  // Events dropped and not yet reported to a daemon, by name
  // (EventDropReport). At most kMaxEventDropNames names; drops of others
  // are counted under kOtherEventsName.
  absl::flat_hash_map<std::string, uint64_t> event_drops_ ABSL_GUARDED_BY(mu_);
  static constexpr size_t kMaxEventDropNames = 1024;
  static constexpr char kOtherEventsName[] = "<other events>";
  static constexpr char kInvalidEventName[] = "<invalid name>";
  // Events accepted into the queue, and those since written or dropped.
  uint64_t events_queued_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t events_resolved_ ABSL_GUARDED_BY(mu_) = 0;

  // Flush tickets: the last one handed out, and the last one whose data has
  // all been written; written_sequence_ is the newest batch at that point.
  uint64_t flush_requested_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t flush_written_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t written_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches numbered and not yet acknowledged, in sequence order, and their
  // estimated size. Shared so that a re-send can write one while an ack
  // retires it.
  std::deque<std::shared_ptr<const OutgoingBatch>> retained_ ABSL_GUARDED_BY(mu_);
  size_t retained_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // Identifies this client to the daemon across its streams (never 0), and
  // the daemon process that acknowledged last (0: none yet).
  const uint64_t client_instance_;
  uint64_t daemon_instance_ ABSL_GUARDED_BY(mu_) = 0;

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
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_CLIENT_CORE_H_

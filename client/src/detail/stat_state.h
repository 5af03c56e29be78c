// The state behind one torchmon::Stat, shared by the Stat (producers) and
// its Client's sender thread (the consumer), and what all the stats of a
// client share: the sample budget, the logs and the per-stat counts.
#ifndef TORCHMON_CLIENT_DETAIL_STAT_STATE_H_
#define TORCHMON_CLIENT_DETAIL_STAT_STATE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "detail/asymmetric_fence.h"
#include "detail/chunk_pool.h"
#include "detail/sample_log.h"
#include "detail/stat_table.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

struct StatState;

// One of a client's sample logs, on its own cache lines, with the sender's
// notes on it.
struct alignas(64) ProducerLog {
  // A log's first chunk: 4 KiB (168 samples). Logs are per thread, not
  // per stat, so this costs little, and a thread that starts adding
  // millions of samples a second ramps up to the largest chunks before the
  // sender's first look.
  static constexpr uint32_t kFirstClass = 4;
  static constexpr uint32_t kCount = 64;  // per client
  // Logs that a thread may own (the first ones); the others are shared.
  static constexpr uint32_t kOwnable = kCount - 1;

  SampleLog log{kFirstClass};
  // Sender thread only: the log's pushed() when it last changed, and when.
  uint64_t pushed_seen = 0;
  std::chrono::steady_clock::time_point active_at{};
};

// This thread's log in a client's array of ProducerLogs, as the byte
// offset of the log (a multiple of 64) plus flags: kThreadLogSet once
// assigned (0 until the thread's first add), kThreadLogOwned if the thread
// owns the log (SampleLog::TryPushOwned). Kept as an offset so that add()
// finds its log with one load and a mask: an index taken modulo and
// multiplied on every add lengthened its chain of dependent work (~5 ns of
// Stat::add on this VM).
inline constexpr uint32_t kThreadLogSet = 1;
inline constexpr uint32_t kThreadLogOwned = 2;
inline thread_local uint32_t tls_log_offset = 0;

// Assigns this thread's log and sets tls_log_offset; returns it. Once
// PrepareThreadLogs() has succeeded, a thread takes a log of its own while
// one of ProducerLog::kOwnable is free, gives it back when it exits, and
// threads beyond that share the last log; otherwise threads share the logs
// by their index, modulo the count. No lock, no system call (one
// pthread_setspecific, which allocates only in a process with more than 32
// pthread keys, once per thread).
[[gnu::noinline, gnu::cold]] uint32_t AssignThreadLog() noexcept;
// Once per process, from a Client's construction: the thread-exit hook
// and the asymmetric fences that owned logs need (AsymmetricFence). True
// if threads own logs (then in every client, and for the life of the
// process): the first ProducerLog::kOwnable logs of each client may each
// have an owner.
bool PrepareThreadLogs() noexcept;

inline ProducerLog& LogAt(ProducerLog* logs, uint32_t offset) noexcept {
  return *reinterpret_cast<ProducerLog*>(reinterpret_cast<char*>(logs) + (offset & ~uint32_t{63}));
}

// What a client's stats share with it, kept alive by every StatState so that
// a Stat outliving its Client never touches freed memory: the sample budget,
// the logs the samples wait in, the per-stat counts, and the list of stats
// with drops to report.
//
// Samples of all stats go to kLogs logs, one per thread (AssignThreadLog: a
// thread owns its log, or shares one, which is correct, only slower). So an
// add writes the next cell of its thread's log, and the sender reads each
// log front to back: neither walks per-stat buffers, and a stat holds no
// sample memory of its own.
struct ClientBuffers {
  static constexpr uint32_t kLogs = ProducerLog::kCount;

  // Prepares the process (once) for threads to own their logs, and lets
  // the logs a thread may own have an owner (before any thread sees them).
  explicit ClientBuffers(size_t budget_bytes) : pool(budget_bytes) {
    if (PrepareThreadLogs()) {
      for (uint32_t i = 0; i < ProducerLog::kOwnable; ++i) logs[i].log.AllowOwner();
    }
  }
  ~ClientBuffers() {
    for (Log& l : logs) l.log.ReleaseAll(pool);
  }

  SampleLog& LogOfThisThread() noexcept { return LogAt(logs, ThisThreadsLog()).log; }
  static uint32_t ThisThreadsLog() noexcept {
    const uint32_t offset = tls_log_offset;
    return offset != 0 ? offset : AssignThreadLog();
  }

  // The whole of a valid stat's add(), but for what a refusal costs: false
  // if the sample was not taken (client stopped, no room), for the caller
  // to count (StatState::Reject). The timestamp is now() (an int64_t of
  // microseconds), called once the log has a cell for the sample, so that
  // the log's loads overlap the clock read (SampleLog::TryPushNow).
  // Inline, with everything but the common case out of line, so that the
  // common case keeps the value in a register and its chain of dependent
  // loads short.
  template <typename Now>
  [[gnu::always_inline]] bool TryAddNow(uint32_t id, double value, Now&& now) noexcept {
    const uint32_t offset = tls_log_offset;
    if (offset == 0 || !accepting.load(std::memory_order_relaxed)) [[unlikely]] {
      return TryAddFirstOrStopped(id, value, now());
    }
    return Push(offset, id, value, now);
  }
  // The same with the timestamp given.
  [[gnu::always_inline]] bool TryAdd(uint32_t id, double value, int64_t timestamp_us) noexcept {
    return TryAddNow(id, value, SampleLog::Given{timestamp_us});
  }
  [[gnu::noinline]] bool TryAddFirstOrStopped(uint32_t id, double value,
                                              int64_t timestamp_us) noexcept {
    return accepting.load(std::memory_order_relaxed) &&
           Push(ThisThreadsLog(), id, value, SampleLog::Given{timestamp_us});
  }
  // Into the log at `offset`: its owner's push if this thread owns it.
  template <typename Now>
  [[gnu::always_inline]] bool Push(uint32_t offset, uint32_t id, double value,
                                   Now&& now) noexcept {
    SampleLog& log = LogAt(logs, offset).log;
    const SampleLog::PushResult pushed = (offset & kThreadLogOwned) != 0
                                             ? log.TryPushOwnedNow(pool, value, now, id)
                                             : log.TryPushNow(pool, value, now, id);
    return pushed != SampleLog::PushResult::kDropped;
  }

  // Lock-free multi-producer stack of stats that asked to be looked at
  // (StatState::Wake); the sender takes it whole.
  void PushReady(StatState* stat) noexcept;
  StatState* TakeReady() noexcept { return ready_.exchange(nullptr, std::memory_order_acquire); }

  // False once the client has stopped: add() then counts every sample as
  // dropped without touching the logs.
  std::atomic<bool> accepting{true};
  ChunkPool pool;
  // Each log on its own cache lines, with the sender's notes on it.
  using Log = ProducerLog;
  Log logs[kLogs];
  // The consumer side of the logs: held by the sender while it takes
  // samples from them and counts them (StatCounts::taken), and by whoever
  // reads a stat's samples still waiting in them (Peek), so that a sample
  // is counted in exactly one place.
  absl::Mutex drain_mu;
  StatTable table;
  SenderTable sent;
  // Stats closed so far (~Stat); the sender retires closed stats when it
  // changes rather than scanning every stat every cycle.
  std::atomic<uint64_t> closed_stats{0};

  // Samples of stat `id` still in the logs. Takes drain_mu.
  uint64_t BufferedOf(uint32_t id) ABSL_LOCKS_EXCLUDED(drain_mu);
  // Samples in all logs, pushed ever and still waiting.
  uint64_t PushedTotal() const noexcept;
  uint64_t BufferedTotal() const noexcept;

 private:
  std::atomic<StatState*> ready_{nullptr};
};

// A definition's wire bytes, exactly as many as it has: a std::string
// cost each stat 32 bytes in place and a 48-byte heap block for a
// 24-byte definition, this 16 and a 32-byte block.
class SerializedDefinition {
 public:
  explicit SerializedDefinition(const v1::StatDefinition& def)
      : size_(static_cast<uint32_t>(def.ByteSizeLong())), bytes_(new char[size_]) {
    def.SerializeToArray(bytes_.get(), static_cast<int>(size_));
  }
  absl::string_view view() const noexcept { return {bytes_.get(), size_}; }
  size_t size() const noexcept { return size_; }

 private:
  uint32_t size_;
  std::unique_ptr<char[]> bytes_;
};

// Owned jointly by the Stat and its Client's registry, so either may go
// first: a Stat destroyed early leaves its buffered samples to be sent, and a
// Stat that outlives its Client just counts its samples as dropped.
//
// Accounting, per stat (the counts are in its StatCounts), exact once
// producers are quiescent:
//   added     = samples in the logs + taken + rejected
//   taken     = delivered + (samples in batches not yet acknowledged)
//               + abandoned
//   dropped   = rejected + abandoned (+ whatever is still in the logs once
//               the client has stopped, since nothing will send it)
// A sample taken from a log stays in a kept batch until a daemon
// acknowledges it, however many streams that takes; only a client that
// stops with batches unacknowledged abandons them.
//
// The sender looks at a stat only when it is "listed": a stat lists itself
// (Wake) when an add drops a sample, so that the drop is reported; the
// sender unlists it once every drop is reported. Its samples need no
// listing: they are in the logs, which the sender reads every cycle.
struct StatState {
  StatState(const v1::StatDefinition& def, bool is_valid,
            std::shared_ptr<ClientBuffers> shared_buffers)
      : buffers(std::move(shared_buffers)),
        counts(buffers->table.Create(def.id())),
        sent(buffers->sent.Create(def.id())),
        valid(is_valid),
        id(def.id()),
        name(def.name()),
        definition_bytes(def) {
    counts.state.store(this, std::memory_order_relaxed);
  }
  ~StatState() {
    // Only if the id is still this stat's: a Stat's last reference may go
    // after the registry retired it and the id was handed out again.
    StatState* self = this;
    counts.state.compare_exchange_strong(self, nullptr, std::memory_order_relaxed);
  }
  StatState(const StatState&) = delete;
  StatState& operator=(const StatState&) = delete;

  // Records a sample: what Stat::add does after the timestamp (which
  // keeps buffers and id in the Stat, so that it does not read this).
  void Add(double value, int64_t timestamp_us) noexcept {
    if (!valid || !buffers->TryAdd(id, value, timestamp_us)) Reject();
  }

  // Counts a sample add() could not buffer as dropped, and has the drop
  // reported if it can still be.
  [[gnu::noinline]] void Reject() noexcept {
    if (valid && buffers->accepting.load(std::memory_order_relaxed)) {
      counts.rejected.fetch_add(1, std::memory_order_seq_cst);
      // The drop is reported to the daemon by the sender.
      Wake();
      return;
    }
    counts.rejected.fetch_add(1, std::memory_order_relaxed);
  }

  // Makes sure the sender looks at this stat.
  void Wake() noexcept {
    if (!listed.load(std::memory_order_seq_cst) && !listed.exchange(true)) {
      buffers->PushReady(this);
    }
  }

  uint64_t added() const {
    return buffers->BufferedOf(id) + sent.taken.load(std::memory_order_relaxed) +
           counts.rejected.load(std::memory_order_relaxed);
  }

  uint64_t dropped() const {
    uint64_t n = counts.rejected.load(std::memory_order_relaxed) +
                 counts.abandoned.load(std::memory_order_relaxed);
    if (valid && !buffers->accepting.load(std::memory_order_acquire)) n += buffers->BufferedOf(id);
    return n;
  }

  // Drops not yet carried by a DropReport in some batch.
  uint64_t unreported_drops() const noexcept {
    return counts.rejected.load(std::memory_order_seq_cst) +
           counts.abandoned.load(std::memory_order_relaxed) -
           drops_written.load(std::memory_order_relaxed);
  }

  // True while a daemon has not acknowledged this stat's definition or one
  // of its drops. (Its samples are pending while any log or kept batch
  // holds one: ClientCore checks those for all stats at once.) A Stat
  // destroyed before its definition went out needs none unless a sample
  // or drop of it is sent, which defines it then. Callers hold the
  // client's mutex, under which the sender-side counters change, so they
  // are read consistently.
  bool HasPendingDefinitionOrDrops() const noexcept {
    if (!valid) return false;
    return (!ever_defined.load(std::memory_order_relaxed) &&
            !closed.load(std::memory_order_acquire)) ||
           counts.rejected.load(std::memory_order_relaxed) +
                   counts.abandoned.load(std::memory_order_relaxed) !=
               counts.drops_acked.load(std::memory_order_relaxed);
  }

  const std::shared_ptr<ClientBuffers> buffers;
  StatCounts& counts;
  SenderSlot& sent;
  // On the sender's list (see above); set by Wake, cleared by the sender.
  std::atomic<bool> listed{false};
  // Set by ~Stat; the registry lets go once nothing is pending.
  std::atomic<bool> closed{false};
  // False if the definition failed local validation: nothing is ever sent.
  const bool valid;
  // The definition's id (below: its name, and the whole of it serialized).
  const uint32_t id;
  std::atomic<bool> ever_defined{false};  // definition written on some stream
  // Sender thread only: a release is due and not yet written
  // (StatRetirement).
  bool release_pending = false;
  // Its place among the stats of its series (StatRegistry, under the
  // client's mutex).
  uint32_t key_slot = 0;

  // Sender thread only: drop counts put in DropReports, the link in
  // ClientBuffers' ready stack, the count of complete send cycles when the
  // sender first found the stat closed (0: not yet), and its release.
  std::atomic<uint64_t> drops_written{0};
  StatState* ready_next = nullptr;
  uint64_t closed_at_cycle = 0;
  // The stream generation the stat was released on (IngestBatch.released:
  // the Stat is gone and its samples are taken), 0 if none.
  uint64_t released_on = 0;
  // Of its name and labels (StatRegistry's key), and of its spec, set at
  // registration.
  uint64_t key_hash = 0;
  uint64_t spec_hash = 0;

  // The name, and the whole definition (id, name, labels, spec)
  // serialized: a third of the parsed message's footprint with its strings
  // and submessages, read only when the stat is defined on a stream, and
  // sent as these bytes (AppendDefinitionEntry).
  const std::string name;
  const SerializedDefinition definition_bytes;
};

inline void ClientBuffers::PushReady(StatState* stat) noexcept {
  StatState* head = ready_.load(std::memory_order_relaxed);
  do {
    stat->ready_next = head;
  } while (!ready_.compare_exchange_weak(head, stat, std::memory_order_release,
                                         std::memory_order_relaxed));
}

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_STAT_STATE_H_

// The state behind one torchmon::Stat, shared by the Stat (producers) and
// its Client's sender thread (the consumer), and the buffer space all the
// stats of a client share.
#ifndef TORCHMON_CLIENT_DETAIL_STAT_STATE_H_
#define TORCHMON_CLIENT_DETAIL_STAT_STATE_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "detail/chunk_pool.h"
#include "detail/stat_buffer.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

struct StatState;

// What a client's stats share with it, kept alive by every StatState so that
// a Stat outliving its Client never touches freed memory: the sample budget
// and the list of stats that have something to send.
struct ClientBuffers {
  explicit ClientBuffers(size_t budget_bytes) : pool(budget_bytes) {}

  // Lock-free multi-producer stack of stats that asked to be looked at
  // (StatState::Wake); the sender takes it whole.
  void PushReady(StatState* stat) noexcept;
  StatState* TakeReady() noexcept { return ready_.exchange(nullptr, std::memory_order_acquire); }

  ChunkPool pool;
  // Stats closed so far (~Stat); the sender retires closed stats when it
  // changes rather than scanning every stat every cycle.
  std::atomic<uint64_t> closed_stats{0};

 private:
  std::atomic<StatState*> ready_{nullptr};
};

// Owned jointly by the Stat and its Client's registry, so either may go
// first: a Stat destroyed early leaves its buffered samples to be sent, and a
// Stat that outlives its Client just counts its samples as dropped.
//
// Accounting, exact once producers are quiescent:
//   added          = buffer.pushed() + rejected
//   buffer.popped() = delivered + (samples in batches not yet acknowledged)
//                     + abandoned
//   dropped        = rejected + abandoned (+ whatever is still buffered once
//                    the client has stopped, since nothing will send it)
// A sample taken from the buffer stays in a kept batch until a daemon
// acknowledges it, however many streams that takes; only a client that
// stops with batches unacknowledged abandons them.
//
// The sender looks only at "listed" stats: a stat lists itself (Wake) when
// an add takes a chunk for it after it held none, or drops a sample; the
// sender unlists a stat once it has been drained, idle for a while and has
// given its chunk back (see ClientCore::RunCycle). So a defined stat that is
// not sending costs the sender nothing, and holds no buffer memory.
struct StatState {
  StatState(const v1::StatDefinition& def, bool is_valid,
            std::shared_ptr<ClientBuffers> shared_buffers)
      : buffers(std::move(shared_buffers)),
        accepting(is_valid),
        valid(is_valid),
        id(def.id()),
        name(def.name()),
        definition_bytes(def.SerializeAsString()) {}
  ~StatState() { buffer.ReleaseAll(buffers->pool); }
  StatState(const StatState&) = delete;
  StatState& operator=(const StatState&) = delete;

  // Records a sample; the whole of Stat::add after the timestamp.
  void Add(double value, int64_t timestamp_us) noexcept {
    if (accepting.load(std::memory_order_relaxed)) {
      switch (buffer.TryPush(buffers->pool, value, timestamp_us)) {
        case StatBuffer::PushResult::kPushed:
          return;
        case StatBuffer::PushResult::kPushedAndBound:
          Wake();
          return;
        case StatBuffer::PushResult::kDropped:
          rejected.fetch_add(1, std::memory_order_seq_cst);
          // The drop is reported to the daemon by the sender.
          Wake();
          return;
      }
    }
    rejected.fetch_add(1, std::memory_order_relaxed);
  }

  // Makes sure the sender looks at this stat.
  void Wake() noexcept {
    if (!listed.load(std::memory_order_seq_cst) && !listed.exchange(true)) {
      buffers->PushReady(this);
    }
  }

  void CopyDefinition(v1::StatDefinition* out) const {
    // Serialized from a valid message here: parsing it back cannot fail.
    const bool parsed = out->ParseFromString(definition_bytes);
    static_cast<void>(parsed);
  }

  uint64_t added() const noexcept {
    return buffer.pushed() + rejected.load(std::memory_order_relaxed);
  }

  uint64_t dropped() const noexcept {
    uint64_t n =
        rejected.load(std::memory_order_relaxed) + abandoned.load(std::memory_order_relaxed);
    if (valid && !accepting.load(std::memory_order_acquire)) n += buffer.pushed() - buffer.popped();
    return n;
  }

  // Drops not yet carried by a DropReport in some batch.
  uint64_t unreported_drops() const noexcept {
    return rejected.load(std::memory_order_seq_cst) + abandoned.load(std::memory_order_relaxed) -
           drops_written.load(std::memory_order_relaxed);
  }

  // True while a daemon has not acknowledged everything about this stat:
  // its definition, every buffered or in-flight sample, every drop.
  // Callers hold the client's mutex, under which the sender-side counters
  // change, so they are read consistently.
  bool HasPending() const noexcept {
    if (!valid) return false;
    return !ever_defined.load(std::memory_order_relaxed) ||
           buffer.pushed() != delivered.load(std::memory_order_relaxed) +
                                  abandoned.load(std::memory_order_relaxed) ||
           rejected.load(std::memory_order_relaxed) + abandoned.load(std::memory_order_relaxed) !=
               drops_acked.load(std::memory_order_relaxed);
  }

  // In the order they are touched, so that an add reads two cache lines of
  // this and a sender's look at a stat three (with tens of thousands of
  // stats, each is cold): what add() reads, the buffer, what the sender's
  // look reads, then the rest.
  const std::shared_ptr<ClientBuffers> buffers;
  // False for invalid stats and once the client has stopped: add() then
  // counts the sample as dropped without touching the buffer.
  std::atomic<bool> accepting;
  // On the sender's list (see above); set by Wake, cleared by the sender.
  std::atomic<bool> listed{false};
  // Set by ~Stat; the registry lets go once nothing is pending.
  std::atomic<bool> closed{false};
  // False if the definition failed local validation: nothing is ever sent.
  const bool valid;
  // The definition's id (below: its name, and the whole of it serialized).
  const uint32_t id;
  StatBuffer buffer;
  // Samples add() could not buffer (no room, invalid, client stopped).
  std::atomic<uint64_t> rejected{0};

  // Written only under the client's mutex (by its sender and ack threads);
  // atomics so that Stat's getters may read them without it.
  std::atomic<uint64_t> abandoned{0};      // samples unacknowledged when the client stopped
  std::atomic<uint64_t> drops_written{0};  // drop counts put in DropReports

  // Sender thread only: when its count of accepted samples last moved, and
  // the stream generation this stat was last defined on.
  uint64_t pushed_seen = 0;
  std::chrono::steady_clock::time_point active_at{};
  uint64_t defined_on_stream = 0;

  // Link in ClientBuffers' ready stack.
  StatState* ready_next = nullptr;
  std::atomic<uint64_t> delivered{0};    // samples in acknowledged batches
  std::atomic<uint64_t> drops_acked{0};  // drop counts a daemon acknowledged
  // The same two counts, for the daemon process the client talks to now.
  std::atomic<uint64_t> delivered_current{0};
  std::atomic<uint64_t> drops_acked_current{0};
  std::atomic<bool> ever_defined{false};  // definition written on some stream

  // The name, and the whole definition (id, name, labels, spec)
  // serialized: a third of the parsed message's footprint with its strings
  // and submessages, read only when the stat is defined on a stream
  // (CopyDefinition).
  const std::string name;
  const std::string definition_bytes;
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

// The state behind one torchmon::Stat, shared by the Stat (producers) and
// its Client's sender thread (the consumer).
#ifndef TORCHMON_CLIENT_DETAIL_STAT_STATE_H_
#define TORCHMON_CLIENT_DETAIL_STAT_STATE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "detail/sample_ring.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// Owned jointly by the Stat and its Client's registry, so either may go
// first: a Stat destroyed early leaves its buffered samples to be sent, and a
// Stat that outlives its Client just counts its samples as dropped.
//
// Accounting, exact once producers are quiescent:
//   added        = ring.pushed() + rejected
//   ring.popped() = delivered + (samples in batches not yet acknowledged)
//                   + abandoned
//   dropped      = rejected + abandoned (+ whatever is still in the ring once
//                  the client has stopped, since nothing will send it)
// A sample taken from the ring stays in a kept batch until a daemon
// acknowledges it, however many streams that takes; only a client that
// stops with batches unacknowledged abandons them.
struct StatState {
  // `buffer_samples` is ignored (a minimal ring is made) for invalid stats,
  // which never buffer anything.
  StatState(v1::StatDefinition def, bool is_valid, size_t buffer_samples)
      : definition(std::move(def)),
        valid(is_valid),
        ring(is_valid ? buffer_samples : 0),
        accepting(is_valid) {}

  // Records a sample; the whole of Stat::add after the timestamp.
  void Add(double value, int64_t timestamp_us) noexcept {
    if (accepting.load(std::memory_order_relaxed) && ring.TryPush(value, timestamp_us)) return;
    rejected.fetch_add(1, std::memory_order_relaxed);
  }

  uint64_t added() const noexcept {
    return ring.pushed() + rejected.load(std::memory_order_relaxed);
  }

  uint64_t dropped() const noexcept {
    uint64_t n =
        rejected.load(std::memory_order_relaxed) + abandoned.load(std::memory_order_relaxed);
    if (valid && !accepting.load(std::memory_order_acquire)) n += ring.pushed() - ring.popped();
    return n;
  }

  // Drops not yet carried by a DropReport in some batch.
  uint64_t unreported_drops() const noexcept {
    return rejected.load(std::memory_order_relaxed) + abandoned.load(std::memory_order_relaxed) -
           drops_written.load(std::memory_order_relaxed);
  }

  // True while a daemon has not acknowledged everything about this stat:
  // its definition, every buffered or in-flight sample, every drop.
  // Callers hold the client's mutex, under which the sender-side counters
  // change, so they are read consistently.
  bool HasPending() const noexcept {
    if (!valid) return false;
    return !ever_defined.load(std::memory_order_relaxed) ||
           ring.pushed() != delivered.load(std::memory_order_relaxed) +
                                abandoned.load(std::memory_order_relaxed) ||
           rejected.load(std::memory_order_relaxed) + abandoned.load(std::memory_order_relaxed) !=
               drops_acked.load(std::memory_order_relaxed);
  }

  // id, name, labels and spec, ready to put on a stream.
  const v1::StatDefinition definition;
  // False if the definition failed local validation: nothing is ever sent.
  const bool valid;
  SampleRing ring;

  // False for invalid stats and once the client has stopped: add() then
  // counts the sample as dropped without touching the ring.
  std::atomic<bool> accepting;
  // Set by ~Stat; the registry lets go once nothing is pending.
  std::atomic<bool> closed{false};
  // Samples add() could not buffer (ring full, invalid, client stopped).
  std::atomic<uint64_t> rejected{0};

  // Written only under the client's mutex (by its sender and ack threads);
  // atomics so that Stat's getters may read them without it.
  std::atomic<uint64_t> delivered{0};      // samples in acknowledged batches
  std::atomic<uint64_t> abandoned{0};      // samples unacknowledged when the client stopped
  std::atomic<uint64_t> drops_written{0};  // drop counts put in DropReports
  std::atomic<uint64_t> drops_acked{0};    // ... of which a daemon acknowledged
  // The same two counts, for the daemon process the client talks to now.
  std::atomic<uint64_t> delivered_current{0};
  std::atomic<uint64_t> drops_acked_current{0};
  std::atomic<bool> ever_defined{false};   // definition written on some stream

  // Sender thread only: the stream generation this stat was last defined on.
  uint64_t defined_on_stream = 0;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_STAT_STATE_H_

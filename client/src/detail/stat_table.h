// The per-stat counts of a client, in a dense table indexed by stat id, so
// that the threads that count a sample of each of tens of thousands of
// stats (the sender taking it from a log, the ack thread when a daemon
// acknowledges it) touch one small entry each instead of the stat's state.
#ifndef TORCHMON_CLIENT_DETAIL_STAT_TABLE_H_
#define TORCHMON_CLIENT_DETAIL_STAT_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace torchmon::detail {

struct StatState;

// One stat's counts, but for the sender's (SenderSlot). Each counter has
// one writer (named) and may be read by any thread; single writers add
// with a load and a store, not a locked read-modify-write.
struct alignas(64) StatCounts {
  // Set when the stat is registered; cleared when its state is destroyed
  // (unless the id serves another stat by then).
  std::atomic<StatState*> state{nullptr};
  // Producers (any thread; fetch_add): samples add() could not buffer.
  std::atomic<uint64_t> rejected{0};
  // Ack thread, under the client's mutex (written only by AckLedger, which
  // ClientCore holds ABSL_GUARDED_BY it): samples and drop counts in
  // acknowledged batches, ever and from the daemon process of now.
  std::atomic<uint64_t> delivered{0};
  std::atomic<uint64_t> drops_acked{0};
  std::atomic<uint64_t> delivered_current{0};
  std::atomic<uint64_t> drops_acked_current{0};
  // Under the client's mutex, once it stopped: samples in batches never
  // acknowledged.
  std::atomic<uint64_t> abandoned{0};
};
static_assert(sizeof(StatCounts) == 64);

// What the sender notes per stat as it takes samples from the logs, apart
// from StatCounts so that a sample costs it 16 bytes of table, not 64.
struct SenderSlot {
  // Samples taken from the logs into batches (read under drain_mu).
  std::atomic<uint64_t> taken{0};
  // The stream generation the stat was last defined on.
  uint64_t defined_on = 0;
};

// Adds `n` to a counter that only the calling thread writes.
inline void Bump(std::atomic<uint64_t>& counter, uint64_t n) noexcept {
  counter.store(counter.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// What the stats whose ids were freed counted, so that a client's totals
// (Client::Stats) still count every stat it ever had once their entries
// serve other stats. Not thread-safe: ClientCore holds it under its mutex.
struct FreedCounts {
  uint64_t rejected = 0;
  uint64_t taken = 0;
  uint64_t delivered = 0;
  uint64_t abandoned = 0;

  // Adds an id's counts and resets its entries for the id's next stat.
  // Called when nothing else writes them: the stat is retired and every
  // batch that named the id acknowledged (StatRegistry).
  void Absorb(StatCounts& counts, SenderSlot& slot) noexcept {
    rejected += counts.rejected.exchange(0, std::memory_order_relaxed);
    delivered += counts.delivered.exchange(0, std::memory_order_relaxed);
    abandoned += counts.abandoned.exchange(0, std::memory_order_relaxed);
    counts.drops_acked.store(0, std::memory_order_relaxed);
    counts.delivered_current.store(0, std::memory_order_relaxed);
    counts.drops_acked_current.store(0, std::memory_order_relaxed);
    taken += slot.taken.exchange(0, std::memory_order_relaxed);
    slot.defined_on = 0;
  }
};

// Entries for ids 0..kMaxIds - 1, in pages allocated as ids are handed out
// and never moved or freed before the table: an entry's address is stable,
// so readers need no lock. The registry reuses the ids of retired stats
// (StatRegistry), so the table holds as many entries (80 bytes each, with
// the SenderTable's) as the most ids in use at once, not one per stat ever
// registered.
template <typename Entry>
class PagedTable {
 public:
  static constexpr uint32_t kPageBits = 10;
  static constexpr uint32_t kPageEntries = 1u << kPageBits;
  static constexpr uint32_t kMaxPages = 1u << 14;
  static constexpr uint32_t kMaxIds = kPageEntries * kMaxPages;

  PagedTable() : pages_(new std::atomic<Entry*>[kMaxPages]) {
    for (uint32_t p = 0; p < kMaxPages; ++p) pages_[p].store(nullptr, std::memory_order_relaxed);
    // Id 0 is never a stat's own: its entry counts the samples of stats
    // refused an id (past kMaxIds).
    Create(0);
  }
  ~PagedTable() {
    for (uint32_t p = 0; p < kMaxPages; ++p) delete[] pages_[p].load(std::memory_order_relaxed);
  }
  PagedTable(const PagedTable&) = delete;
  PagedTable& operator=(const PagedTable&) = delete;

  // Makes id's entry exist (id < kMaxIds). One thread at a time (the
  // client registers stats under its mutex); the entry is published to
  // other threads by whatever publishes the id (the Stat's construction).
  Entry& Create(uint32_t id) {
    std::atomic<Entry*>& page = pages_[id >> kPageBits];
    if (page.load(std::memory_order_relaxed) == nullptr) {
      page.store(new Entry[kPageEntries], std::memory_order_release);
    }
    return At(id);
  }

  // The entry of an id that was created.
  Entry& At(uint32_t id) const noexcept {
    return pages_[id >> kPageBits].load(std::memory_order_acquire)[id & (kPageEntries - 1)];
  }

  // Calls fn(id, entry) for ids 1..last.
  template <typename Fn>
  void ForEach(uint32_t last, Fn&& fn) const {
    for (uint32_t id = 1; id <= last; ++id) fn(id, At(id));
  }

 private:
  std::unique_ptr<std::atomic<Entry*>[]> pages_;
};

using StatTable = PagedTable<StatCounts>;
using SenderTable = PagedTable<SenderSlot>;

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_STAT_TABLE_H_

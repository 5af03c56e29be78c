// A queue of samples, each tagged with its stat's id, between Stat::add and
// the sender thread: chunks from the client's ChunkPool, held only while
// samples wait in them. A client keeps a fixed set of them and each thread
// adds to the one its thread index picks (ClientBuffers::LogOfThisThread),
// so an add writes the next cell of a chunk its thread already has in cache,
// whatever stat it is for, and the sender reads them front to back.
#ifndef TORCHMON_CLIENT_DETAIL_SAMPLE_LOG_H_
#define TORCHMON_CLIENT_DETAIL_SAMPLE_LOG_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "detail/asymmetric_fence.h"
#include "detail/chunk_pool.h"

namespace torchmon::detail {

// Producers: any number of threads call TryPush; or one thread at a time,
// the log's owner, calls TryPushOwned, and no one calls TryPush (see "An
// owned log" below). Consumer: one thread at a time calls Drain, Release
// and ReleaseAll (the sender thread), and Peek.
//
// Every accepted sample gets the next position (0, 1, 2, ... for the life
// of the log). The positions live in a sequence of chunks, one per
// "generation"; the chunk of generation g sits in slot g % kSlots of a
// small directory, tagged with g. The claim word packs the current
// generation with the next position, so one CAS both reserves a cell and
// proves that the generation (hence its chunk) is still current: a chunk is
// given back only after the claim has left its generation, and the claim
// never returns to a generation, so a producer that wins the CAS writes into
// a chunk that is still this log's, whatever it read before.
//
// - A log that holds no chunk ("unbound": its generation's slot is empty)
//   takes a chunk of its first class on its next push (Bind).
// - A full chunk is followed by one four times larger (up to the pool's
//   largest) if the consumer has not read half of it yet, else by one of
//   the same size (NextClass); whichever producer finds it full installs
//   it in the next slot. A busy thread's log reaches large chunks in a few
//   steps; one the sender keeps up with stays at its size.
// - At most kSlots chunks per log: a producer that finds the next slot
//   still holding an undrained chunk drops. With the largest chunks that is
//   64 MiB: a thread is bounded by the budget, not by its log.
//   A stopped daemon fills a log to the budget's growth limit (about 27 of
//   the default 32 MiB; with 16 slots it stopped at 22, and at 32 MiB
//   whatever the budget: tests/bench/stall_capacity_bench.py).
// - The consumer reads each chunk in order, gives it back when it is read
//   and the claim has moved on, and gives back the last one of an idle
//   log (Release), which unbinds it.
//
// Cells are published by a release store of the chunk's epoch and the
// sample's stat id into the cell's stamp, so the consumer tells a written
// cell from a claimed one or one left from the chunk's previous use; it
// never reads past the claimed positions.
//
// An owned log (one producer thread at a time, handed over with a
// happens-before, as ClientBuffers does by thread index) lets its owner
// push without the CAS, the largest part of a push's cost: TryPushOwned
// writes the cell, then stores the claim. Nothing else moves the claim
// while the owner is in such a push: the owner's own slow path uses the
// CAS, Drain gives back only chunks the claim has left, and Release, the
// one consumer step that moves the claim, first revokes the fast path by a
// Dekker handshake on asymmetric fences (the owner's in_push_ against the
// consumer's revoked_; AsymmetricFence). While revoked, the owner pushes by
// TryPush's CAS. A log may have an owner only once AllowOwner() was called
// on it; Release of any other log (the client's shared one, every log where
// there are no asymmetric fences, a test's) pays no system call.
class SampleLog {
 public:
  static constexpr uint32_t kSlots = 32;
  // Each new chunk of a log is 2^kGrowth times as large as the last.
  static constexpr uint32_t kGrowth = 2;
  // What the sender paces a log's fill against (SendPacer): kPaceSlots of
  // the largest chunks, 32 MiB. The slots past those are room to ride out a
  // daemon that stops reading, not a reason to send less often.
  static constexpr uint32_t kPaceSlots = 16;
  static_assert(kPaceSlots <= kSlots);
  static constexpr uint64_t kPaceSamples =
      uint64_t{kPaceSlots} * ChunkPool::ChunkCells(ChunkPool::kMaxClass);

  enum class PushResult {
    kPushed,
    // Pushed, and this push installed a chunk of the log: the first of an
    // unbound log, or a next one. (A consumer that stops looking at an
    // unbound log must be told; ClientCore looks at every log each cycle.)
    kPushedAndBound,
    // No room: the pool is out of chunks or the log holds kSlots chunks.
    kDropped,
  };

  // `first_class`: the size class of the chunk an unbound log takes.
  explicit SampleLog(uint32_t first_class = 0) : first_class_(first_class) {
    for (uint32_t g = 0; g < kSlots; ++g) dir_[g].store(Entry(g, 0), std::memory_order_relaxed);
  }
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  // Never blocks (lock-free), allocates, throws or makes a system call.
  PushResult TryPush(ChunkPool& pool, double value, int64_t timestamp_us,
                     uint32_t stat_id = 0) noexcept {
    return TryPushNow(pool, value, Given{timestamp_us}, stat_id);
  }

  // TryPush with the sample's timestamp taken by now() (an int64_t of
  // microseconds) once a cell is claimed, not before: the log's loads are
  // then on their way while the clock is read, which on some CPUs holds up
  // every instruction after it (rdtsc is microcoded on Zen 3: 12 ns).
  template <typename Now>
  [[gnu::always_inline]] PushResult TryPushNow(ChunkPool& pool, double value, Now&& now,
                                               uint32_t stat_id = 0) noexcept {
    // The common case inline: a chunk with room and no other producer in
    // the way. Everything else (binding, a full chunk, a lost race) is
    // PushSlow's.
    uint64_t claim = claim_.load(std::memory_order_acquire);
    uint32_t chunk;
    uint64_t index;
    if (CellOf(claim, chunk, index) &&
        claim_.compare_exchange_strong(claim, claim + 1, std::memory_order_acquire,
                                       std::memory_order_relaxed)) [[likely]] {
      Publish(pool, chunk, index, value, now(), stat_id);
      return PushResult::kPushed;
    }
    return PushSlow(pool, value, now(), stat_id);
  }

  // Lets one thread at a time own this log (TryPushOwned); Release then
  // revokes the owner's fast path with a membarrier. Only once
  // AsymmetricFence::Available(), and before the log is shared with any
  // thread (ClientBuffers calls it from its constructor): a consumer that
  // releases the log must see it, and it must come before any owned push.
  // Producers never read it.
  void AllowOwner() noexcept { may_have_owner_ = true; }
  bool may_have_owner() const noexcept { return may_have_owner_; }

  // TryPush for the log's owner (see "An owned log" above): the same
  // result, without the CAS when the chunk has room and the consumer is not
  // releasing. Only on a log AllowOwner() was called on, and only by the
  // one thread that owns the log now.
  PushResult TryPushOwned(ChunkPool& pool, double value, int64_t timestamp_us,
                          uint32_t stat_id = 0) noexcept {
    return TryPushOwnedNow(pool, value, Given{timestamp_us}, stat_id);
  }

  // TryPushOwned with the timestamp taken by now() once the cell is found
  // (see TryPushNow).
  template <typename Now>
  [[gnu::always_inline]] PushResult TryPushOwnedNow(ChunkPool& pool, double value, Now&& now,
                                                    uint32_t stat_id = 0) noexcept {
    in_push_.store(1, std::memory_order_relaxed);
    AsymmetricFence::LightFence();
    if (revoked_.load(std::memory_order_acquire) == 0) [[likely]] {
      // Only this thread moves the claim now (the consumer's last move
      // happened before revoked_ was cleared, which the load above saw).
      const uint64_t claim = claim_.load(std::memory_order_relaxed);
      uint32_t chunk;
      uint64_t index;
      if (CellOf(claim, chunk, index)) [[likely]] {
        Publish(pool, chunk, index, value, now(), stat_id);
        claim_.store(claim + 1, std::memory_order_release);
        in_push_.store(0, std::memory_order_release);
        return PushResult::kPushed;
      }
    }
    in_push_.store(0, std::memory_order_release);
    return PushSlow(pool, value, now(), stat_id);
  }

  // A timestamp given by the caller, as a Now.
  struct Given {
    int64_t timestamp_us;
    int64_t operator()() const noexcept { return timestamp_us; }
  };

  // The fast paths' one look: the chunk and cell index that position `claim`
  // would write, if its generation's chunk is installed and has room. The
  // chunk's size comes with its directory entry and its base from this log
  // (not from the chunk's header, whose address depends on the entry): one
  // load fewer on the way to the claim. Both may be of a later generation
  // when read; then the claim has left this one, which a CAS on it (or, for
  // an owner, nobody else moving it) settles.
  [[gnu::always_inline]] bool CellOf(uint64_t claim, uint32_t& chunk,
                                     uint64_t& index) const noexcept {
    const uint32_t slot = ClaimGen(claim) % kSlots;
    const uint64_t entry = dir_[slot].load(std::memory_order_acquire);
    const uint64_t base = bases_[slot].load(std::memory_order_relaxed);
    chunk = EntryChunk(entry);
    index = ClaimPos(claim) - base;
    return chunk != 0 && (EntryGen(entry) & kGenMask) == ClaimGen(claim) &&
           index < ChunkPool::ChunkCells(EntryClass(entry));
  }

  // TryPush's general case.
  [[gnu::noinline]] PushResult PushSlow(ChunkPool& pool, double value, int64_t timestamp_us,
                                        uint32_t stat_id) noexcept {
    bool bound = false;
    uint64_t claim = claim_.load(std::memory_order_acquire);
    for (;;) {
      const uint32_t gen = ClaimGen(claim);
      const uint64_t pos = ClaimPos(claim);
      const uint64_t entry = dir_[gen % kSlots].load(std::memory_order_acquire);
      if ((EntryGen(entry) & kGenMask) != gen) {
        // The slot has moved on: so has the claim since it was read.
        claim = claim_.load(std::memory_order_acquire);
        continue;
      }
      const uint32_t chunk = EntryChunk(entry);
      if (chunk == 0) {
        const InstallResult installed = Install(pool, EntryGen(entry), pos, first_class_, false);
        if (installed == InstallResult::kNoChunk) return PushResult::kDropped;
        bound = bound || installed == InstallResult::kInstalled;
        claim = claim_.load(std::memory_order_acquire);
        continue;
      }
      const ChunkHeader& h = pool.header(chunk);
      const uint64_t base = h.base.load(std::memory_order_relaxed);
      const uint32_t cells = h.cells.load(std::memory_order_relaxed);
      if (pos - base < cells) {
        if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acquire,
                                          std::memory_order_acquire)) {
          continue;
        }
        Publish(pool, chunk, pos - base, value, timestamp_us, stat_id);
        return bound ? PushResult::kPushedAndBound : PushResult::kPushed;
      }
      // Full, if the header was read while the chunk was still ours.
      const uint32_t size_class = h.size_class.load(std::memory_order_relaxed);
      const uint64_t again = claim_.load(std::memory_order_acquire);
      if (again != claim) {
        claim = again;
        continue;
      }
      const uint32_t next_gen = EntryGen(entry) + 1;
      const uint64_t next = dir_[next_gen % kSlots].load(std::memory_order_acquire);
      if (EntryGen(next) != next_gen) {
        // Still holding the chunk of next_gen - kSlots: this log has all
        // the chunks it may have, unless the claim moved on meanwhile.
        const uint64_t now = claim_.load(std::memory_order_acquire);
        if (now == claim) return PushResult::kDropped;
        claim = now;
        continue;
      }
      if (EntryChunk(next) == 0) {
        const InstallResult installed =
            Install(pool, next_gen, base + cells, NextClass(size_class, base, cells), true);
        if (installed == InstallResult::kNoChunk) return PushResult::kDropped;
        bound = bound || installed == InstallResult::kInstalled;
      }
      // Move the claim to the next generation; losing means another thread
      // did, a sample was claimed meanwhile, or the consumer's Release
      // moved it (then it may have found next_gen's slot still empty and
      // unbound the log: the report of the chunk installed here tells it).
      claim_.compare_exchange_strong(claim, Claim(next_gen, pos), std::memory_order_acq_rel,
                                     std::memory_order_acquire);
    }
  }

  // The size of the chunk after a full one of `size_class` that held
  // positions [base, base + cells): four times larger while the consumer
  // has not read half of it (the log fills chunks faster than they are
  // drained), the same size otherwise, so a log that takes a few samples
  // per sender cycle keeps small chunks however long it runs.
  uint32_t NextClass(uint32_t size_class, uint64_t base, uint32_t cells) const noexcept {
    const uint64_t read = popped_.load(std::memory_order_relaxed);
    return read >= base + cells / 2 ? size_class : size_class + kGrowth;
  }

  // Consumer. Calls fn(value, timestamp_us, stat_id) (or fn(value,
  // timestamp_us)) for up to `max` samples in order and returns how many.
  // Stops early at a cell that is claimed but not yet written; it is taken
  // by a later call.
  template <typename Fn>
  size_t Drain(ChunkPool& pool, uint64_t max, Fn&& fn) noexcept {
    size_t n = 0;
    uint64_t read = popped_.load(std::memory_order_relaxed);
    // Never past what was claimed: a cell beyond may hold anything.
    const uint64_t claimed = ClaimPos(claim_.load(std::memory_order_acquire));
    while (n < max) {
      const uint64_t entry = dir_[read_gen_ % kSlots].load(std::memory_order_acquire);
      const uint32_t chunk = EntryChunk(entry);
      if (chunk == 0 || EntryGen(entry) != read_gen_) break;  // unbound
      const ChunkHeader& h = pool.header(chunk);
      const uint64_t base = h.base.load(std::memory_order_relaxed);
      const uint64_t end = base + h.cells.load(std::memory_order_relaxed);
      const uint32_t epoch = h.epoch.load(std::memory_order_relaxed);
      const SampleCell* cells = pool.cells(chunk);
      const uint64_t stop = std::min(end, claimed);
      while (n < max && read < stop) {
        const SampleCell& cell = cells[read - base];
        const uint64_t stamp = cell.stamp.load(std::memory_order_acquire);
        if (StampEpoch(stamp) != epoch) break;
        Call(fn, cell, StampStatId(stamp));
        ++read;
        ++n;
      }
      if (read < end) break;
      // Read to its end; give it back once the claim has left it (until
      // then a producer may still be looking at its header).
      if (ClaimGen(claim_.load(std::memory_order_acquire)) == (read_gen_ & kGenMask)) break;
      GiveBack(pool, chunk);
    }
    popped_.store(read, std::memory_order_release);
    return n;
  }

  // Consumer side, read-only: calls fn(value, timestamp_us, stat_id) for
  // up to `max` samples pushed and not yet drained, in order, stopping at a
  // cell claimed but not yet written (its add has not returned), and
  // returns how many. Needs the consumer's exclusion (no Drain or Release
  // meanwhile); producers may go on pushing. A Drain(pool, n) that follows
  // with the exclusion still held takes exactly the n samples this showed:
  // a published cell stays published until the consumer gives its chunk
  // back, and both stop at the same claimed position or later.
  template <typename Fn>
  uint64_t Peek(const ChunkPool& pool, uint64_t max, Fn&& fn) const noexcept {
    const uint64_t start = popped_.load(std::memory_order_relaxed);
    uint64_t read = start;
    const uint64_t claimed = ClaimPos(claim_.load(std::memory_order_acquire));
    const uint64_t stop = claimed - start > max ? start + max : claimed;
    for (uint32_t gen = read_gen_;; ++gen) {
      const uint64_t entry = dir_[gen % kSlots].load(std::memory_order_acquire);
      const uint32_t chunk = EntryChunk(entry);
      if (chunk == 0 || EntryGen(entry) != gen) return read - start;
      const ChunkHeader& h = pool.header(chunk);
      const uint64_t base = h.base.load(std::memory_order_relaxed);
      const uint64_t end = base + h.cells.load(std::memory_order_relaxed);
      const uint32_t epoch = h.epoch.load(std::memory_order_relaxed);
      const SampleCell* cells = pool.cells(chunk);
      for (; read < end; ++read) {
        if (read >= stop) return read - start;
        const SampleCell& cell = cells[read - base];
        const uint64_t stamp = cell.stamp.load(std::memory_order_acquire);
        if (StampEpoch(stamp) != epoch) return read - start;
        Call(fn, cell, StampStatId(stamp));
      }
    }
  }
  template <typename Fn>
  uint64_t Peek(const ChunkPool& pool, Fn&& fn) const noexcept {
    return Peek(pool, UINT64_MAX, std::forward<Fn>(fn));
  }

  // Consumer. If every accepted sample has been drained, gives the log's
  // chunk back so the log holds no memory until its next push. True if the
  // log holds no chunk now. A producer that installs a chunk after that
  // answer (it found the released chunk full just before) returns
  // kPushedAndBound, as every push that installs a chunk does.
  //
  // If the log may have an owner (AllowOwner), it first revokes the
  // owner's fast path, and gives up (false) if the owner is in the middle
  // of a push: one membarrier system call. Any other log's producers all
  // take the CAS, which settles a race with the claim's move here.
  bool Release(ChunkPool& pool) noexcept {
    const uint64_t entry = dir_[read_gen_ % kSlots].load(std::memory_order_acquire);
    const uint32_t chunk = EntryChunk(entry);
    if (chunk == 0) return true;
    const bool revoke = may_have_owner_;
    if (revoke) {
      revoked_.store(1, std::memory_order_relaxed);
      // After this, an owner's push either was seen in progress here or
      // sees revoked_ and takes the CAS path.
      if (!AsymmetricFence::HeavyFence() || in_push_.load(std::memory_order_acquire) != 0) {
        revoked_.store(0, std::memory_order_release);
        return false;
      }
    }
    uint64_t claim = Claim(read_gen_, popped_.load(std::memory_order_relaxed));
    const bool moved =
        claim_.compare_exchange_strong(claim, Claim(read_gen_ + 1, ClaimPos(claim)),
                                       std::memory_order_acq_rel, std::memory_order_acquire);
    // Not moved: samples claimed since, or the chunk is full and a producer
    // moved on.
    if (moved) GiveBack(pool, chunk);
    // The owner's next fast push sees the claim as it is now.
    if (revoke) revoked_.store(0, std::memory_order_release);
    if (!moved) return false;
    // A producer that found the chunk full may have installed the next one
    // just before the claim moved: then the log is still bound.
    return EntryChunk(dir_[read_gen_ % kSlots].load(std::memory_order_acquire)) == 0;
  }

  // Gives back every chunk. Only once no producer can push any more (the
  // client's buffers are being destroyed).
  void ReleaseAll(ChunkPool& pool) noexcept {
    for (auto& slot : dir_) {
      const uint64_t entry = slot.load(std::memory_order_acquire);
      if (EntryChunk(entry) != 0) pool.Give(EntryChunk(entry));
      slot.store(Entry(EntryGen(entry) + kSlots, 0), std::memory_order_relaxed);
    }
  }

  // Samples accepted so far.
  uint64_t pushed() const noexcept { return ClaimPos(claim_.load(std::memory_order_acquire)); }
  // Samples drained so far; pushed() - popped() are buffered or being written.
  uint64_t popped() const noexcept { return popped_.load(std::memory_order_acquire); }

 private:
  template <typename Fn>
  static void Call(Fn& fn, const SampleCell& cell, uint32_t stat_id) {
    if constexpr (std::is_invocable_v<Fn&, double, int64_t, uint32_t>) {
      fn(cell.value, cell.timestamp_us, stat_id);
    } else {
      fn(cell.value, cell.timestamp_us);
    }
  }

  // Claim: generation (low kGenBits) << kPosBits | next position.
  static constexpr int kPosBits = 52;
  static constexpr uint32_t kGenMask = (1u << (64 - kPosBits)) - 1;
  static constexpr uint64_t kPosMask = (uint64_t{1} << kPosBits) - 1;
  static_assert(kSlots <= kGenMask, "a claim must tell a generation from the one kSlots later");

  static uint64_t Claim(uint32_t gen, uint64_t pos) {
    return (uint64_t{gen & kGenMask} << kPosBits) | (pos & kPosMask);
  }
  static uint32_t ClaimGen(uint64_t claim) { return static_cast<uint32_t>(claim >> kPosBits); }
  static uint64_t ClaimPos(uint64_t claim) { return claim & kPosMask; }
  // Directory entry: generation (32 bits) << 32 | the chunk's size class
  // (4 bits) << 28 | chunk (28 bits; 0: none).
  static constexpr uint32_t kChunkBits = 28;
  static_assert(ChunkPool::kMaxClass < 16 &&
                    ChunkPool::MaxBudgetBytes() / ChunkPool::kUnitBytes < (uint64_t{1} << kChunkBits),
                "a directory entry must hold any chunk and its size class");
  static uint64_t Entry(uint32_t gen, uint32_t chunk, uint32_t size_class = 0) {
    return (uint64_t{gen} << 32) | (uint64_t{size_class} << kChunkBits) | chunk;
  }
  static uint32_t EntryGen(uint64_t entry) { return static_cast<uint32_t>(entry >> 32); }
  static uint32_t EntryChunk(uint64_t entry) {
    return static_cast<uint32_t>(entry) & ((1u << kChunkBits) - 1);
  }
  static uint32_t EntryClass(uint64_t entry) {
    return (static_cast<uint32_t>(entry) >> kChunkBits) & 0xf;
  }

  // Writes a claimed cell and publishes it. Only after winning the claim's
  // CAS: the claim was still in the chunk's generation, so the chunk is
  // still ours and what was read from its header is current. Always
  // inline: four stores on every push's fast path, which GCC otherwise
  // calls out of line once the push is instantiated for more than one clock.
  [[gnu::always_inline]] static void Publish(ChunkPool& pool, uint32_t chunk, uint64_t index,
                                             double value, int64_t timestamp_us,
                                             uint32_t stat_id) noexcept {
    SampleCell& cell = pool.cells(chunk)[index];
    cell.value = value;
    cell.timestamp_us = timestamp_us;
    cell.stamp.store(CellStamp(pool.header(chunk).epoch.load(std::memory_order_relaxed), stat_id),
                     std::memory_order_release);
  }

  enum class InstallResult {
    kInstalled,
    // Another producer installed one first, or the slot moved on: look again.
    kLost,
    // The pool had no chunk and the slot is still the empty one of `gen`.
    kNoChunk,
  };

  // Puts a new chunk starting at `base` in the empty slot of `gen`.
  InstallResult Install(ChunkPool& pool, uint32_t gen, uint64_t base, uint32_t size_class,
                        bool growing) noexcept {
    const uint32_t chunk = pool.Take(size_class, growing);
    if (chunk == 0) {
      return dir_[gen % kSlots].load(std::memory_order_acquire) != Entry(gen, 0)
                 ? InstallResult::kLost
                 : InstallResult::kNoChunk;
    }
    pool.header(chunk).base.store(base, std::memory_order_relaxed);
    // Every producer installing for `gen` writes the same base (the end of
    // the chunk before, or the position of an unbound log, which cannot
    // move), and before the entry that publishes it.
    bases_[gen % kSlots].store(base, std::memory_order_relaxed);
    const uint32_t taken_class = pool.header(chunk).size_class.load(std::memory_order_relaxed);
    uint64_t expected = Entry(gen, 0);
    if (!dir_[gen % kSlots].compare_exchange_strong(expected, Entry(gen, chunk, taken_class),
                                                   std::memory_order_acq_rel)) {
      pool.Give(chunk);
      return InstallResult::kLost;
    }
    return InstallResult::kInstalled;
  }

  // Consumer: the chunk of read_gen_ is done with.
  void GiveBack(ChunkPool& pool, uint32_t chunk) noexcept {
    dir_[read_gen_ % kSlots].store(Entry(read_gen_ + kSlots, 0),
                                   std::memory_order_release);
    pool.Give(chunk);
    ++read_gen_;
  }

  // What the consumer writes (popped_) changes once per drain, so a
  // producer sharing its line pays one miss per sender cycle, not per add.
  // (ClientBuffers pads each log to its own cache lines.)
  // CAS'd by producers on every add (stored by an owner).
  std::atomic<uint64_t> claim_{0};
  // An owned log's handshake (see Release): 1 while the owner is in a fast
  // push; 1 while the consumer is releasing.
  std::atomic<uint32_t> in_push_{0};
  std::atomic<uint32_t> revoked_{0};
  // Read by producers, written at chunk changes.
  std::atomic<uint64_t> dir_[kSlots];
  // The base position of each slot's chunk (see Install).
  std::atomic<uint64_t> bases_[kSlots] = {};
  // Consumer's.
  std::atomic<uint64_t> popped_{0};
  // The generation the consumer reads (wraps with the directory's tags).
  uint32_t read_gen_ = 0;
  const uint32_t first_class_;
  // Set by AllowOwner before the log is shared; read by Release.
  bool may_have_owner_ = false;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_SAMPLE_LOG_H_

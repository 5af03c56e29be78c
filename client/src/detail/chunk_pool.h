// The client's sample memory: one byte budget, handed out in chunks to the
// sample logs that are being written, and taken back when they have been
// drained.
#ifndef TORCHMON_CLIENT_DETAIL_CHUNK_POOL_H_
#define TORCHMON_CLIENT_DETAIL_CHUNK_POOL_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace torchmon::detail {

// One buffered sample. `stamp` is written last (release): the owning
// chunk's epoch in its high 32 bits once the cell holds a sample of the
// chunk's current use, and the sample's stat id in its low 32 bits. A cell
// left from an earlier use carries an older epoch or 0 (ChunkPool::Take
// sees to it; an epoch is never 0, and one chunk would have to be taken
// 2^32 times for its epoch to come round).
struct SampleCell {
  std::atomic<uint64_t> stamp;
  double value;
  int64_t timestamp_us;
};
static_assert(sizeof(SampleCell) == 24);

inline uint64_t CellStamp(uint32_t epoch, uint32_t stat_id) {
  return (uint64_t{epoch} << 32) | stat_id;
}
inline uint32_t StampEpoch(uint64_t stamp) { return static_cast<uint32_t>(stamp >> 32); }
inline uint32_t StampStatId(uint64_t stamp) { return static_cast<uint32_t>(stamp); }

// A chunk: this 64-byte header, then its cells. The fields are atomics
// because a producer holding a stale reference may read them while the
// chunk is being reused; it then finds out (its CAS fails) and discards
// what it read.
struct alignas(64) ChunkHeader {
  // This use of the chunk: one more than its previous use's, never 0, so
  // it repeats only after 2^32 uses of this chunk.
  std::atomic<uint32_t> epoch;
  uint32_t unused;
  // Position (in the owning stat's count of accepted samples) of cell 0.
  std::atomic<uint64_t> base;
  std::atomic<uint32_t> cells;
  std::atomic<uint32_t> size_class;
  // Free-list link (a chunk index) while the chunk is free.
  std::atomic<uint32_t> free_next;
  // 1 while the chunk's cells may hold bytes laid out for another chunk
  // (it was split from a larger one): a value or timestamp of the larger
  // chunk can sit where this chunk's stamps are and equal any epoch, so
  // Take clears the stamps before handing it out.
  std::atomic<uint32_t> foreign_cells;
};
static_assert(sizeof(ChunkHeader) == 64);

// A fixed byte budget carved into chunks of 256 B << k (k = 0..kMaxClass),
// each a header and (bytes - 64) / 24 cells: 8 cells for the smallest
// (256 B), 87378 for the largest (2 MiB). A log that stays busy cycles
// through a few of the largest chunks, which stay warm in cache.
//
// The budget is reserved as address space (mmap, MAP_NORESERVE) when the
// pool is made and becomes resident only as chunks are first carved from it,
// so an idle client costs no memory. Freed chunks go to a lock-free free
// list per size class and are reused; a larger free chunk is split to serve
// a smaller request. Freed chunks are never merged back: after a storm of
// small chunks a busy log may have to work in smaller ones (more chunk
// changes, no drops while any chunk is free). A split piece's stamps are
// cleared the first time it is taken, so that cost is paid once per piece
// and bounded by the budget.
//
// Take and Give are lock-free (a CAS on a tagged free-list head, or on the
// carve offset) and never allocate or make a system call, so add() may call
// them. Any thread may call any method.
class ChunkPool {
 public:
  static constexpr uint32_t kMaxClass = 13;
  static constexpr size_t kUnitBytes = 256;

  static constexpr size_t ChunkBytes(uint32_t size_class) { return kUnitBytes << size_class; }
  static constexpr uint32_t ChunkCells(uint32_t size_class) {
    return static_cast<uint32_t>((ChunkBytes(size_class) - sizeof(ChunkHeader)) /
                                 sizeof(SampleCell));
  }
  // The smallest budget a client accepts: room for a whole batch of
  // samples (65536 of 24 bytes) with a margin.
  static constexpr size_t MinBudgetBytes() { return size_t{2} << 20; }
  // Largest budget (64 GiB): a log's directory entry keeps a chunk index in
  // 28 bits beside its size class.
  static constexpr size_t MaxBudgetBytes() { return (size_t{1} << 28) * kUnitBytes - kUnitBytes; }

  // `budget_bytes` is rounded down to a multiple of kUnitBytes. Throws
  // std::bad_alloc if the address space cannot be reserved.
  explicit ChunkPool(size_t budget_bytes);
  ~ChunkPool();
  ChunkPool(const ChunkPool&) = delete;
  ChunkPool& operator=(const ChunkPool&) = delete;

  // A chunk of `size_class`, or of a smaller class if none of that size can
  // be had; 0 if nothing can. A `growing` request (a log that already holds
  // a chunk and wants another) gets at most an eighth of what is left of the
  // budget less its last eighth, and is refused once not even the smallest
  // chunk fits there: that reserve serves only a log's first chunk, so one
  // thread flooding the budget cannot keep the others from starting. The
  // chunk's epoch is fresh; its base is the caller's to set.
  uint32_t Take(uint32_t size_class, bool growing) noexcept;
  // Returns a chunk taken from this pool.
  void Give(uint32_t chunk) noexcept;

  // Makes the memory of the next PopulateLead() bytes past what has been
  // carved resident (madvise MADV_POPULATE_WRITE: contents untouched, so it
  // is safe while chunks are carved and written), so that add() does not
  // take the page faults of fresh memory. For a thread other than add()'s
  // (the sender, once per cycle): a system call when chunks were carved
  // since, a few loads otherwise. A kernel without MADV_POPULATE_WRITE
  // (before Linux 5.14) makes it a no-op.
  void PopulateAhead() noexcept;
  // How far ahead PopulateAhead makes memory resident: one chunk as large
  // as the largest carved so far (at most one of the largest class), room
  // for the next chunk of a log that cycles through chunks of that size.
  // A log that grows (to a chunk four times its last, SampleLog) takes the
  // page faults of the new chunk's rest in add(), once per size class it
  // grows to: about 2 MiB of them (4 KiB to 2 MiB chunks) in all. A client
  // whose logs stay small (many stats, a sample each now and then) then
  // holds 256 KiB ahead, not 1 MiB; a busy one 2 MiB, not 4.
  static constexpr size_t kMaxPopulateLeadBytes = kUnitBytes << kMaxClass;
  size_t PopulateLead() const noexcept {
    return std::min(kMaxPopulateLeadBytes, largest_carved_.load(std::memory_order_relaxed));
  }
  // Bytes made resident by PopulateAhead so far.
  size_t bytes_populated() const noexcept { return populated_.load(std::memory_order_relaxed); }

  ChunkHeader& header(uint32_t chunk) const noexcept {
    return *reinterpret_cast<ChunkHeader*>(arena_ + (size_t{chunk} - 1) * kUnitBytes);
  }
  SampleCell* cells(uint32_t chunk) const noexcept {
    return reinterpret_cast<SampleCell*>(arena_ + (size_t{chunk} - 1) * kUnitBytes +
                                         sizeof(ChunkHeader));
  }

  size_t budget_bytes() const noexcept { return budget_; }
  // Bytes in chunks handed out and not given back.
  size_t bytes_in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  // Bytes ever carved from the budget: what the pool has made resident.
  size_t bytes_carved() const noexcept { return carved_.load(std::memory_order_relaxed); }

 private:
  uint32_t PopFree(uint32_t size_class) noexcept;
  void PushFree(uint32_t chunk, uint32_t size_class) noexcept;
  uint32_t Carve(uint32_t size_class) noexcept;
  // Takes a free chunk of the smallest class above `size_class` and splits
  // it, keeping one piece of `size_class` and freeing the rest.
  uint32_t SplitLarger(uint32_t size_class) noexcept;
  uint32_t Prepare(uint32_t chunk, uint32_t size_class) noexcept;

  const size_t budget_;
  char* arena_ = nullptr;
  alignas(64) std::atomic<size_t> carved_{0};
  alignas(64) std::atomic<size_t> in_use_{0};
  // The largest chunk carved so far (bytes): PopulateLead.
  std::atomic<size_t> largest_carved_{0};
  // PopulateAhead's: how far it has populated, and whether the kernel can.
  std::atomic<size_t> populated_{0};
  std::atomic<bool> populate_works_{true};
  // Per class: (tag << 32) | first free chunk; the tag defeats ABA.
  alignas(64) std::atomic<uint64_t> free_heads_[kMaxClass + 1] = {};
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_CHUNK_POOL_H_

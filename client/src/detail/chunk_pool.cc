#include "detail/chunk_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <new>

namespace torchmon::detail {
namespace {

constexpr uint64_t kIndexMask = 0xffffffffu;

size_t UsableBudget(size_t bytes) {
  bytes = std::min(bytes, ChunkPool::MaxBudgetBytes());
  return bytes / ChunkPool::kUnitBytes * ChunkPool::kUnitBytes;
}

}  // namespace

ChunkPool::ChunkPool(size_t budget_bytes) : budget_(UsableBudget(budget_bytes)) {
  if (budget_ == 0) return;
  // Address space only: pages become resident when a chunk is first
  // carved and written, so the budget costs nothing until it is used.
  void* p = mmap(nullptr, budget_, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  arena_ = static_cast<char*>(p);
}

ChunkPool::~ChunkPool() {
  if (arena_ != nullptr) munmap(arena_, budget_);
}

uint32_t ChunkPool::PopFree(uint32_t size_class) noexcept {
  std::atomic<uint64_t>& head = free_heads_[size_class];
  uint64_t h = head.load(std::memory_order_acquire);
  for (;;) {
    const auto chunk = static_cast<uint32_t>(h & kIndexMask);
    if (chunk == 0) return 0;
    // May read a chunk another thread has just popped and reused: the
    // arena stays mapped, and the tag makes the CAS fail.
    const uint32_t next = header(chunk).free_next.load(std::memory_order_relaxed);
    const uint64_t tag = (h >> 32) + 1;
    if (head.compare_exchange_weak(h, (tag << 32) | next, std::memory_order_acquire,
                                   std::memory_order_acquire)) {
      return chunk;
    }
  }
}

void ChunkPool::PushFree(uint32_t chunk, uint32_t size_class) noexcept {
  std::atomic<uint64_t>& head = free_heads_[size_class];
  uint64_t h = head.load(std::memory_order_relaxed);
  for (;;) {
    header(chunk).free_next.store(static_cast<uint32_t>(h & kIndexMask),
                                  std::memory_order_relaxed);
    const uint64_t tag = (h >> 32) + 1;
    if (head.compare_exchange_weak(h, (tag << 32) | chunk, std::memory_order_release,
                                   std::memory_order_relaxed)) {
      return;
    }
  }
}

uint32_t ChunkPool::Carve(uint32_t size_class) noexcept {
  const size_t bytes = ChunkBytes(size_class);
  size_t offset = carved_.load(std::memory_order_relaxed);
  do {
    if (offset + bytes > budget_) return 0;
  } while (!carved_.compare_exchange_weak(offset, offset + bytes, std::memory_order_relaxed));
  size_t largest = largest_carved_.load(std::memory_order_relaxed);
  while (largest < bytes &&
         !largest_carved_.compare_exchange_weak(largest, bytes, std::memory_order_relaxed)) {
  }
  return static_cast<uint32_t>(offset / kUnitBytes + 1);
}

uint32_t ChunkPool::SplitLarger(uint32_t size_class) noexcept {
  for (uint32_t larger = size_class + 1; larger <= kMaxClass; ++larger) {
    const uint32_t chunk = PopFree(larger);
    if (chunk == 0) continue;
    // [chunk: size_class][size_class][size_class + 1]...[larger - 1]
    // The first piece starts where the larger chunk did, so its cells lie
    // where the larger chunk's did (and it keeps its foreign_cells); every
    // other piece's stamps fall on the larger chunk's values and times.
    uint32_t piece = chunk + static_cast<uint32_t>(ChunkBytes(size_class) / kUnitBytes);
    for (uint32_t c = size_class; c < larger; ++c) {
      header(piece).size_class.store(c, std::memory_order_relaxed);
      header(piece).foreign_cells.store(1, std::memory_order_relaxed);
      PushFree(piece, c);
      piece += static_cast<uint32_t>(ChunkBytes(c) / kUnitBytes);
    }
    return chunk;
  }
  return 0;
}

uint32_t ChunkPool::Prepare(uint32_t chunk, uint32_t size_class) noexcept {
  ChunkHeader& h = header(chunk);
  if (h.foreign_cells.load(std::memory_order_relaxed) != 0) {
    // Ours alone until the caller publishes it, which orders these stores
    // before any reader's look at the cells.
    SampleCell* c = cells(chunk);
    for (uint32_t i = 0, n = ChunkCells(size_class); i < n; ++i) {
      c[i].stamp.store(0, std::memory_order_relaxed);
    }
    h.foreign_cells.store(0, std::memory_order_relaxed);
  }
  uint32_t epoch = h.epoch.load(std::memory_order_relaxed) + 1;
  if (epoch == 0) epoch = 1;
  h.epoch.store(epoch, std::memory_order_relaxed);
  h.cells.store(ChunkCells(size_class), std::memory_order_relaxed);
  h.size_class.store(size_class, std::memory_order_relaxed);
  in_use_.fetch_add(ChunkBytes(size_class), std::memory_order_relaxed);
  return chunk;
}

uint32_t ChunkPool::Take(uint32_t size_class, bool growing) noexcept {
  size_class = std::min(size_class, kMaxClass);
  if (growing) {
    // Growth gets smaller as the budget fills: at most an eighth of what
    // is left above the reserve, so many busy stats settle on chunks that
    // fit together instead of each holding a large, half-used one; refused
    // once not even the smallest chunk fits above the reserve.
    const size_t limit = budget_ - budget_ / 8;
    const size_t used = bytes_in_use();
    const size_t room = used < limit ? limit - used : 0;
    while (size_class > 0 && ChunkBytes(size_class) > room / 8) --size_class;
    if (ChunkBytes(size_class) > room) return 0;
  }
  // Reuse before carving fresh memory: the same size, then a larger one
  // split, then new memory, then anything smaller.
  uint32_t chunk = PopFree(size_class);
  if (chunk == 0) chunk = SplitLarger(size_class);
  if (chunk == 0) chunk = Carve(size_class);
  if (chunk != 0) return Prepare(chunk, size_class);
  for (uint32_t c = size_class; c-- > 0;) {
    chunk = PopFree(c);
    if (chunk == 0) chunk = Carve(c);
    if (chunk != 0) return Prepare(chunk, c);
  }
  return 0;
}

void ChunkPool::PopulateAhead() noexcept {
  if (arena_ == nullptr || !populate_works_.load(std::memory_order_relaxed)) return;
  // madvise wants page-aligned ranges; pages are 16 or 64 KiB on some arm64 kernels.
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t done = populated_.load(std::memory_order_relaxed);
  const size_t carved = carved_.load(std::memory_order_relaxed);
  // Nothing before the first chunk: a client that adds nothing stays small.
  if (carved == 0) return;
  // Top up once less than the lead is left: a log's next chunk of the
  // largest size carved is then resident before add() writes it.
  const size_t lead = PopulateLead();
  if (done >= budget_ || (done > carved && done - carved >= lead)) return;
  // From where it stopped: chunks carved meanwhile may not be written yet.
  const size_t from = done;
  const size_t to = std::min(budget_, (carved + lead + page - 1) / page * page);
  if (to <= from) return;
#ifdef MADV_POPULATE_WRITE
  if (madvise(arena_ + from, to - from, MADV_POPULATE_WRITE) != 0) {
    // EINVAL: a kernel without it. Anything else (ENOMEM under memory
    // pressure): the pages fault in on first use, as without this.
    populate_works_.store(false, std::memory_order_relaxed);
    return;
  }
  populated_.store(to, std::memory_order_relaxed);
#else
  populate_works_.store(false, std::memory_order_relaxed);
#endif
}

void ChunkPool::Give(uint32_t chunk) noexcept {
  const uint32_t size_class = header(chunk).size_class.load(std::memory_order_relaxed);
  in_use_.fetch_sub(ChunkBytes(size_class), std::memory_order_relaxed);
  PushFree(chunk, size_class);
}

}  // namespace torchmon::detail

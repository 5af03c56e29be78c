// The bounded buffer between Stat::add and the sender thread.
#ifndef TORCHMON_CLIENT_DETAIL_SAMPLE_RING_H_
#define TORCHMON_CLIENT_DETAIL_SAMPLE_RING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace torchmon::detail {

struct Sample {
  double value;
  int64_t timestamp_us;
};

// A bounded ring of samples after Dmitry Vyukov's MPMC queue: every cell
// carries a sequence number that tells producers and the consumer whose turn
// it is, so a push is one CAS on the shared position plus a release store in
// the cell, and never waits for another producer.
//
// Any number of threads may TryPush concurrently. Only one thread may consume
// (TryPop / PopMany) at a time: the sender thread is the only consumer, and a
// single consumer needs no CAS on the read side, which matters at tens of
// millions of samples per second. pushed() and popped() may be read anywhere.
class SampleRing {
 public:
  // Capacity is rounded up to a power of two, at least 2 (a one-cell ring
  // cannot tell full from empty with per-cell sequence numbers).
  explicit SampleRing(size_t min_capacity)
      : capacity_(RoundUpCapacity(min_capacity)),
        mask_(capacity_ - 1),
        cells_(new Cell[capacity_]) {
    for (uint64_t i = 0; i < capacity_; ++i) {
      cells_[i].sequence.store(i, std::memory_order_relaxed);
    }
  }

  SampleRing(const SampleRing&) = delete;
  SampleRing& operator=(const SampleRing&) = delete;

  // False if the ring is full. Never blocks, allocates or throws.
  bool TryPush(double value, int64_t timestamp_us) noexcept {
    uint64_t pos = enqueue_pos_.load(std::memory_order_relaxed);
    Cell* cell;
    for (;;) {
      cell = &cells_[pos & mask_];
      const uint64_t seq = cell->sequence.load(std::memory_order_acquire);
      const auto dif = static_cast<int64_t>(seq - pos);
      if (dif == 0) {
        if (enqueue_pos_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) break;
      } else if (dif < 0) {
        // The cell still holds the sample from one lap ago: full.
        return false;
      } else {
        pos = enqueue_pos_.load(std::memory_order_relaxed);
      }
    }
    cell->value = value;
    cell->timestamp_us = timestamp_us;
    cell->sequence.store(pos + 1, std::memory_order_release);
    return true;
  }

  // Single consumer. Calls fn(const Sample&) for up to `max` published
  // samples in order and returns how many. Stops early at a cell whose
  // producer has claimed it but not finished writing it; that sample (and
  // those behind it) are taken by a later call.
  template <typename Fn>
  size_t PopMany(size_t max, Fn&& fn) noexcept {
    uint64_t pos = dequeue_pos_.load(std::memory_order_relaxed);
    size_t n = 0;
    while (n < max) {
      Cell& cell = cells_[pos & mask_];
      if (cell.sequence.load(std::memory_order_acquire) != pos + 1) break;
      fn(Sample{cell.value, cell.timestamp_us});
      cell.sequence.store(pos + capacity_, std::memory_order_release);
      ++pos;
      ++n;
    }
    if (n > 0) dequeue_pos_.store(pos, std::memory_order_release);
    return n;
  }

  // Successful pushes so far.
  uint64_t pushed() const noexcept { return enqueue_pos_.load(std::memory_order_acquire); }
  // Samples consumed so far; pushed() - popped() are buffered or being written.
  uint64_t popped() const noexcept { return dequeue_pos_.load(std::memory_order_acquire); }
  size_t capacity() const noexcept { return capacity_; }

 private:
  struct Cell {
    std::atomic<uint64_t> sequence;
    double value;
    int64_t timestamp_us;
  };

  static size_t RoundUpCapacity(size_t n) {
    // 2^40 cells (24 TiB) is past any sane request; the cap only keeps the
    // loop from overflowing.
    constexpr size_t kMaxCapacity = size_t{1} << 40;
    size_t c = 2;
    while (c < n && c < kMaxCapacity) c <<= 1;
    return c;
  }

  const uint64_t capacity_;
  const uint64_t mask_;
  const std::unique_ptr<Cell[]> cells_;
  // Producers hammer enqueue_pos_ while the consumer advances dequeue_pos_;
  // separate cache lines keep them from invalidating each other.
  alignas(64) std::atomic<uint64_t> enqueue_pos_{0};
  alignas(64) std::atomic<uint64_t> dequeue_pos_{0};
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_SAMPLE_RING_H_

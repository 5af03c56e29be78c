// The closed windows one series keeps for queries.
#ifndef TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_
#define TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "server/core/types.h"

namespace torchmon::server {

// The newest `limit` closed windows of a series, oldest first, each with
// its quantile estimates: a record and its row of `quantile_count` values
// are pushed, kept and forgotten together.
//
// The newest window (what the scrape shows) is held inline, so a series
// that closed one window, or keeps only one (--history 1), is a single
// allocation. Older windows go to a ring whose storage grows with the
// windows actually closed (never more than twice those held, never more
// than limit - 1 records). std::deque, by contrast, allocates 576 bytes the
// moment it exists. A series with quantiles keeps the rows in one more
// array, allocated in step with the ring (row 0 the newest window's, row
// 1 + j the ring's slot j); one without pays 8 bytes for it.
//
// Thread-compatible.
class WindowHistory {
 public:
  // One kept window: its record and its quantiles' values, in the order of
  // the series' quantiles (empty without quantiles).
  struct Entry {
    const WindowRecord& record;
    absl::Span<const double> quantiles;
  };

  // quantile_count ≤ 65535 (the protocol allows 16).
  explicit WindowHistory(uint16_t quantile_count = 0) : width_(quantile_count) {}

  // Appends `record` and its `quantiles` (at most the width's values; the
  // rest of its row is NaN), forgetting the oldest once `limit` (≥ 1) are
  // kept.
  void Push(const WindowRecord& record, absl::Span<const double> quantiles, size_t limit) {
    if (has_newest_ && limit > 1) PushOlder(limit - 1);
    newest_ = record;
    if (width_ != 0) {
      if (rows_ == nullptr) rows_ = std::make_unique<double[]>(width_);
      const size_t n = std::min<size_t>(quantiles.size(), width_);
      std::copy_n(quantiles.begin(), n, rows_.get());
      std::fill(rows_.get() + n, rows_.get() + width_, std::numeric_limits<double>::quiet_NaN());
    }
    has_newest_ = true;
  }

  // Rows of `width` (≥ the current width) from now on; the rows kept keep
  // their values in their first columns (a series redefined with more
  // quantiles: each record's row holds its own definition's quantiles).
  void Widen(uint16_t width) {
    if (width <= width_) return;
    const size_t rows = 1 + older_.capacity();
    // The new columns are NaN, as Push leaves a shorter row's: a history
    // rebuilt by pushing the same windows holds the same rows.
    auto grown = std::make_unique<double[]>(rows * width);
    std::fill_n(grown.get(), rows * width, std::numeric_limits<double>::quiet_NaN());
    if (rows_ != nullptr) {
      for (size_t r = 0; r < rows; ++r) {
        std::copy_n(rows_.get() + r * width_, width_, grown.get() + r * width);
      }
    }
    rows_ = std::move(grown);
    width_ = width;
  }
  uint16_t width() const { return width_; }

  // Room for `records` in all without growing (a restore, which knows how
  // many it pushes: growing by doubling would allocate, fault in and copy
  // twice the memory).
  void Reserve(size_t records) {
    if (records <= 1 + older_.capacity()) return;
    older_.reserve(records - 1);
    GrowRows();
  }

  size_t size() const { return has_newest_ ? older_.size() + 1 : 0; }
  bool empty() const { return !has_newest_; }
  // i = 0 is the oldest kept window.
  Entry operator[](size_t i) const {
    if (i >= older_.size()) return back();
    const size_t slot = (head_ + i) % older_.size();
    return Entry{older_[slot], Row(1 + slot)};
  }
  Entry back() const { return Entry{newest_, Row(0)}; }
  // Records allocated on the heap (the newest one is inline).
  size_t heap_records() const { return older_.capacity(); }

 private:
  absl::Span<const double> Row(size_t row) const {
    return width_ == 0 ? absl::Span<const double>() : absl::MakeConstSpan(rows_.get() + row * width_, width_);
  }

  // The newest window moves to the ring.
  void PushOlder(size_t limit) {
    size_t slot;
    if (older_.size() < limit) {
      if (older_.size() == older_.capacity()) {
        // Exact growth: reserve() allocates what it is asked for, so the
        // capacity never overshoots `limit`.
        older_.reserve(std::min(limit, std::max<size_t>(1, older_.size() * 2)));
        GrowRows();
      }
      // Below the limit the ring has never wrapped: head_ is 0.
      slot = older_.size();
      older_.push_back(newest_);
    } else {
      slot = head_;
      older_[slot] = newest_;
      head_ = static_cast<uint32_t>((head_ + 1) % older_.size());
    }
    if (width_ != 0) std::copy_n(rows_.get(), width_, rows_.get() + (1 + slot) * width_);
  }

  // Rows for the newest window and every slot of the ring's capacity.
  void GrowRows() {
    if (width_ == 0) return;
    auto grown = std::make_unique<double[]>((1 + older_.capacity()) * width_);
    if (rows_ != nullptr) std::copy_n(rows_.get(), (1 + older_.size()) * width_, grown.get());
    rows_ = std::move(grown);
  }

  WindowRecord newest_;
  bool has_newest_ = false;
  uint16_t width_;  // quantiles per window
  // Index of the oldest record of older_ once the ring has wrapped.
  uint32_t head_ = 0;
  std::vector<WindowRecord> older_;
  std::unique_ptr<double[]> rows_;  // null without quantiles
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

// The closed windows one series keeps for queries.
#ifndef TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_
#define TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "server/core/types.h"

namespace torchmon::server {

// The newest `limit` closed windows of a series, oldest first.
//
// The newest window (what the scrape shows) is held inline, so a series
// that closed one window, or keeps only one (--history 1), is a single
// allocation. Older windows go to a ring whose storage grows with the
// windows actually closed (never more than twice those held, never more
// than limit - 1 records). std::deque, by contrast, allocates 576 bytes the
// moment it exists.
//
// Thread-compatible.
class WindowHistory {
 public:
  // Appends `record`, forgetting the oldest once `limit` (≥ 1) are kept.
  void Push(const WindowRecord& record, size_t limit) {
    if (has_newest_ && limit > 1) PushOlder(newest_, limit - 1);
    newest_ = record;
    has_newest_ = true;
  }

  size_t size() const { return has_newest_ ? older_.size() + 1 : 0; }
  bool empty() const { return !has_newest_; }
  // i = 0 is the oldest kept window.
  const WindowRecord& operator[](size_t i) const {
    return i < older_.size() ? older_[(head_ + i) % older_.size()] : newest_;
  }
  const WindowRecord& back() const { return newest_; }
  // Records allocated on the heap (the newest one is inline).
  size_t heap_records() const { return older_.capacity(); }

 private:
  void PushOlder(const WindowRecord& record, size_t limit) {
    if (older_.size() < limit) {
      if (older_.size() == older_.capacity()) {
        // Exact growth: reserve() allocates what it is asked for, so the
        // capacity never overshoots `limit`.
        older_.reserve(std::min(limit, std::max<size_t>(1, older_.size() * 2)));
      }
      // Below the limit the ring has never wrapped: head_ is 0.
      older_.push_back(record);
      return;
    }
    older_[head_] = record;
    head_ = static_cast<uint32_t>((head_ + 1) % older_.size());
  }

  WindowRecord newest_;
  bool has_newest_ = false;
  // Index of the oldest record of older_ once the ring has wrapped.
  uint32_t head_ = 0;
  std::vector<WindowRecord> older_;
};

// The quantiles' values of the newest `limit` closed windows of a series,
// oldest first: one row of `width` values per window, pushed in step with
// the series' WindowHistory (same limit), so row i belongs to its record i.
// Only series with quantiles have one.
//
// Thread-compatible.
class QuantileHistory {
 public:
  explicit QuantileHistory(size_t width) : width_(width) {}

  // Appends `row` (width values), forgetting the oldest once `limit` (≥ 1)
  // rows are kept.
  void Push(absl::Span<const double> row, size_t limit) {
    if (rows_ < limit) {
      // Below the limit the ring has never wrapped: head_ is 0.
      values_.insert(values_.end(), row.begin(), row.end());
      ++rows_;
      return;
    }
    std::copy(row.begin(), row.end(), values_.begin() + static_cast<std::ptrdiff_t>(head_ * width_));
    head_ = (head_ + 1) % rows_;
  }

  size_t size() const { return rows_; }
  // i = 0 is the oldest kept row.
  absl::Span<const double> operator[](size_t i) const {
    return absl::MakeConstSpan(values_).subspan(((head_ + i) % rows_) * width_, width_);
  }
  absl::Span<const double> back() const { return (*this)[rows_ - 1]; }

 private:
  size_t width_;
  size_t rows_ = 0;
  size_t head_ = 0;  // the oldest row once the ring has wrapped
  std::vector<double> values_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

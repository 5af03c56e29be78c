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
// A series with quantiles keeps their values beside each record, the same
// number for every record (the series' spec fixes it); a series without
// allocates nothing for them.
//
// Thread-compatible.
class WindowHistory {
 public:
  // Appends `record` and its quantiles' values, forgetting the oldest once
  // `limit` (≥ 1) are kept. `quantiles` has the same size at every call.
  void Push(const WindowRecord& record, size_t limit, absl::Span<const double> quantiles = {}) {
    if (has_newest_ && limit > 1) PushOlder(newest_, limit - 1);
    newest_ = record;
    newest_quantiles_.assign(quantiles.begin(), quantiles.end());
    has_newest_ = true;
  }

  size_t size() const { return has_newest_ ? older_.size() + 1 : 0; }
  bool empty() const { return !has_newest_; }
  // i = 0 is the oldest kept window.
  const WindowRecord& operator[](size_t i) const {
    return i < older_.size() ? older_[(head_ + i) % older_.size()] : newest_;
  }
  const WindowRecord& back() const { return newest_; }
  // The quantiles' values of record i (empty for a series without).
  absl::Span<const double> quantiles(size_t i) const {
    if (i >= older_.size()) return newest_quantiles_;
    const size_t n = newest_quantiles_.size();
    return absl::MakeConstSpan(older_quantiles_).subspan(((head_ + i) % older_.size()) * n, n);
  }
  absl::Span<const double> back_quantiles() const { return newest_quantiles_; }
  // Records allocated on the heap (the newest one is inline).
  size_t heap_records() const { return older_.capacity(); }

 private:
  // Moves `record`, with newest_quantiles_, into the ring.
  void PushOlder(const WindowRecord& record, size_t limit) {
    if (older_.size() < limit) {
      if (older_.size() == older_.capacity()) {
        // Exact growth: reserve() allocates what it is asked for, so the
        // capacity never overshoots `limit`.
        older_.reserve(std::min(limit, std::max<size_t>(1, older_.size() * 2)));
        older_quantiles_.reserve(older_.capacity() * newest_quantiles_.size());
      }
      // Below the limit the ring has never wrapped: head_ is 0.
      older_.push_back(record);
      older_quantiles_.insert(older_quantiles_.end(), newest_quantiles_.begin(),
                              newest_quantiles_.end());
      return;
    }
    older_[head_] = record;
    std::copy(newest_quantiles_.begin(), newest_quantiles_.end(),
              older_quantiles_.begin() + head_ * newest_quantiles_.size());
    head_ = static_cast<uint32_t>((head_ + 1) % older_.size());
  }

  WindowRecord newest_;
  bool has_newest_ = false;
  // Index of the oldest record of older_ once the ring has wrapped.
  uint32_t head_ = 0;
  std::vector<WindowRecord> older_;
  // The values of newest_'s quantiles, and of older_'s (n per record, in
  // the same ring positions).
  std::vector<double> newest_quantiles_;
  std::vector<double> older_quantiles_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

// The closed windows one series keeps for queries.
#ifndef TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_
#define TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "server/core/types.h"

namespace torchmon::server {

// The newest `limit` closed windows of a series, oldest first. Storage grows
// with the windows actually closed (a series that closed one window holds
// one record, not `limit`; never more than twice the records held, never
// more than `limit`), then becomes a ring. std::deque, by contrast,
// allocates 576 bytes the moment it exists.
//
// Thread-compatible.
class WindowHistory {
 public:
  // Appends `record`, forgetting the oldest once `limit` (≥ 1) are kept.
  void Push(const WindowRecord& record, size_t limit) {
    if (records_.size() < limit) {
      if (records_.size() == records_.capacity()) {
        // Exact growth: reserve() allocates what it is asked for, so the
        // capacity never overshoots `limit`.
        records_.reserve(std::min(limit, std::max<size_t>(1, records_.size() * 2)));
      }
      // Below the limit the ring has never wrapped: head_ is 0.
      records_.push_back(record);
      return;
    }
    records_[head_] = record;
    head_ = static_cast<uint32_t>((head_ + 1) % records_.size());
  }

  size_t size() const { return records_.size(); }
  bool empty() const { return records_.empty(); }
  // i = 0 is the oldest kept window.
  const WindowRecord& operator[](size_t i) const {
    return records_[(head_ + i) % records_.size()];
  }
  const WindowRecord& back() const { return (*this)[records_.size() - 1]; }
  // Records allocated.
  size_t capacity() const { return records_.capacity(); }

 private:
  std::vector<WindowRecord> records_;
  // Index of the oldest record once the ring has wrapped.
  uint32_t head_ = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_WINDOW_HISTORY_H_

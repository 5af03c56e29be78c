#include "detail/stat_state.h"

namespace torchmon::detail {

uint32_t AssignThreadLog() noexcept {
  static std::atomic<uint32_t> next{0};
  const uint32_t index = next.fetch_add(1, std::memory_order_relaxed);
  tls_log_offset = 1 + (index % ProducerLog::kCount) * static_cast<uint32_t>(sizeof(ProducerLog));
  return tls_log_offset;
}

uint64_t ClientBuffers::BufferedOf(uint32_t id) {
  absl::MutexLock lock(&drain_mu);
  uint64_t n = 0;
  for (const Log& l : logs) {
    l.log.Peek(pool, [&](double, int64_t, uint32_t stat_id) { n += stat_id == id; });
  }
  return n;
}

uint64_t ClientBuffers::PushedTotal() const noexcept {
  uint64_t n = 0;
  for (const Log& l : logs) n += l.log.pushed();
  return n;
}

uint64_t ClientBuffers::BufferedTotal() const noexcept {
  uint64_t n = 0;
  for (const Log& l : logs) n += l.log.pushed() - l.log.popped();
  return n;
}

}  // namespace torchmon::detail

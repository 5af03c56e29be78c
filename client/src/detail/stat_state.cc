#include "detail/stat_state.h"

#include <pthread.h>

#include <cstdint>

namespace torchmon::detail {

namespace {

constexpr uint32_t OffsetOf(uint32_t index) {
  return index * static_cast<uint32_t>(sizeof(ProducerLog)) + kThreadLogSet;
}
static_assert(sizeof(ProducerLog) % 64 == 0, "LogAt masks the flags off a log's offset");

// The log that threads without one of their own share.
constexpr uint32_t kSharedLog = OffsetOf(ProducerLog::kOwnable);

// The ownable logs taken by live threads, a bit each.
std::atomic<uint64_t> owned_logs{0};
static_assert(ProducerLog::kOwnable <= 64);

// Release: the next owner's pushes come after this owner's last one.
void FreeOwnableLog(uint32_t index) {
  owned_logs.fetch_and(~(uint64_t{1} << index), std::memory_order_release);
}

// Gives a thread's log back when the thread exits (a pthread key's
// destructor, not a thread_local object's: registering one of those takes
// the dynamic linker's lock and allocates, on the thread's first add).
// pthread runs it after the thread's C++ thread_local destructors; a later
// add on the thread uses the shared log.
void GiveBackOwnedLog(void* value) {
  tls_log_offset = kSharedLog;
  FreeOwnableLog(static_cast<uint32_t>(reinterpret_cast<uintptr_t>(value) - 1));
}

pthread_key_t owned_log_key;
// Set once the key exists; logs are owned only then.
std::atomic<bool> owned_logs_ready{false};

uint32_t TakeOwnableLog() noexcept {
  uint64_t taken = owned_logs.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t free = ~taken & ((uint64_t{1} << ProducerLog::kOwnable) - 1);
    if (free == 0) return ProducerLog::kOwnable;
    const auto index = static_cast<uint32_t>(__builtin_ctzll(free));
    // Acquire: this thread's pushes come after the last owner's.
    if (owned_logs.compare_exchange_weak(taken, taken | (uint64_t{1} << index),
                                         std::memory_order_acquire, std::memory_order_relaxed)) {
      return index;
    }
  }
}

}  // namespace

bool PrepareThreadLogs() noexcept {
  static const bool ready = [] {
    return pthread_key_create(&owned_log_key, GiveBackOwnedLog) == 0 && AsymmetricFence::Register();
  }();
  if (ready) owned_logs_ready.store(true, std::memory_order_release);
  return ready;
}

uint32_t AssignThreadLog() noexcept {
  if (!owned_logs_ready.load(std::memory_order_acquire)) {
    static std::atomic<uint32_t> next{0};
    tls_log_offset = OffsetOf(next.fetch_add(1, std::memory_order_relaxed) % ProducerLog::kCount);
    return tls_log_offset;
  }
  const uint32_t index = TakeOwnableLog();
  // Without the key's value the log would never be given back: then share.
  if (index == ProducerLog::kOwnable ||
      pthread_setspecific(owned_log_key, reinterpret_cast<void*>(uintptr_t{index} + 1)) != 0) {
    if (index != ProducerLog::kOwnable) FreeOwnableLog(index);
    tls_log_offset = kSharedLog;
    return tls_log_offset;
  }
  tls_log_offset = OffsetOf(index) | kThreadLogOwned;
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

// The daemon's notion of "now". Everything time-dependent in the core takes a
// Clock so that tests drive time by hand instead of sleeping.
#ifndef TORCHMON_SERVER_CORE_CLOCK_H_
#define TORCHMON_SERVER_CORE_CLOCK_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace torchmon::server {

// Thread-safe: implementations must allow concurrent NowMs() calls.
class Clock {
 public:
  virtual ~Clock() = default;
  // Unix epoch time in milliseconds.
  virtual int64_t NowMs() const = 0;
};

// Wall-clock time. Windows are defined on wall-clock sample timestamps, so
// the daemon compares them against wall-clock time too.
class SystemClock final : public Clock {
 public:
  int64_t NowMs() const override {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
};

// A clock that moves only when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(int64_t now_ms) : now_ms_(now_ms) {}
  int64_t NowMs() const override { return now_ms_.load(std::memory_order_acquire); }
  void Set(int64_t now_ms) { now_ms_.store(now_ms, std::memory_order_release); }
  void Advance(int64_t delta_ms) { now_ms_.fetch_add(delta_ms, std::memory_order_acq_rel); }

 private:
  std::atomic<int64_t> now_ms_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_CLOCK_H_

// Wall-clock microseconds for Stat::add, cheaper than clock_gettime.
//
// On x86-64 with an invariant TSC, NowMicros() reads the TSC and scales it
// with a calibration against CLOCK_REALTIME that the clients' sender threads
// refresh every send cycle (Recalibrate), so a clock step or NTP slew is
// followed within one cycle and the scale's error never accumulates for
// long. Until two calibration points exist, or without an invariant TSC, it
// is clock_gettime(CLOCK_REALTIME).
//
// Thread-safe. NowMicros() never blocks, allocates or makes a syscall.
#ifndef TORCHMON_CLIENT_DETAIL_WALL_CLOCK_H_
#define TORCHMON_CLIENT_DETAIL_WALL_CLOCK_H_

#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

namespace torchmon::detail {

class WallClock {
 public:
  static int64_t NowMicros() noexcept {
#if defined(__x86_64__)
    const Calibration* c = current_.load(std::memory_order_acquire);
    if (c != nullptr) {
      const auto ticks = static_cast<int64_t>(__rdtsc() - c->base_tsc.load(std::memory_order_relaxed));
      const auto scaled = static_cast<__int128>(ticks) * c->micros_per_tick_q32.load(std::memory_order_relaxed);
      return c->base_us.load(std::memory_order_relaxed) + static_cast<int64_t>(scaled >> 32);
    }
#endif
    return SystemMicros();
  }

  // clock_gettime(CLOCK_REALTIME) in microseconds (vDSO, no syscall).
  static int64_t SystemMicros() noexcept;

  // Takes a new calibration point; at most every kMinRecalibrationMicros
  // takes effect. Cheap; called from sender threads, never from add().
  static void Recalibrate() noexcept;

  // Whether NowMicros() uses the TSC now (for tests and diagnostics).
  static bool UsesTsc() noexcept { return current_.load(std::memory_order_acquire) != nullptr; }

 private:
  // Immutable once published, except when its slot is reused (see kSlots).
  struct Calibration {
    std::atomic<uint64_t> base_tsc{0};
    std::atomic<int64_t> base_us{0};
    // Microseconds per TSC tick, as a 32.32 fixed-point number.
    std::atomic<uint64_t> micros_per_tick_q32{0};
  };
  static std::atomic<const Calibration*> current_;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_WALL_CLOCK_H_

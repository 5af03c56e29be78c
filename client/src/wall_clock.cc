#include "detail/wall_clock.h"

#include <time.h>

#include <mutex>

namespace torchmon::detail {
namespace {

// Calibrations are published round-robin into these slots rather than
// allocated, so a reader never touches freed memory. A slot is rewritten
// only after kSlots newer calibrations (≥ kSlots × 10 ms = 2.5 s): a reader
// preempted that long between loading the pointer and reading it could get
// a mixed timestamp, never a crash.
constexpr int kSlots = 256;
constexpr int64_t kMinRecalibrationMicros = 10'000;
// The scale is estimated over at least this long a baseline.
constexpr int64_t kMinBaselineMicros = 10'000;

bool HasInvariantTsc() {
#if defined(__x86_64__)
  unsigned max_ext, a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(max_ext), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u));
  if (max_ext < 0x80000007u) return false;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u));
  return (d >> 8) & 1u;
#else
  return false;
#endif
}

}  // namespace

std::atomic<const WallClock::Calibration*> WallClock::current_{nullptr};

int64_t WallClock::SystemMicros() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

void WallClock::Recalibrate() noexcept {
#if defined(__x86_64__)
  static const bool tsc_ok = HasInvariantTsc();
  if (!tsc_ok) return;
  static std::mutex mu;
  static Calibration slots[kSlots];
  static int next_slot = 0;
  static bool have_anchor = false;
  static uint64_t anchor_tsc = 0;
  static int64_t anchor_us = 0;
  static int64_t last_us = 0;

  std::lock_guard<std::mutex> lock(mu);
  // Bracket the system clock read with two TSC reads and take the midpoint,
  // so a preemption in between shows up as a wide bracket and is skipped.
  const uint64_t t0 = __rdtsc();
  const int64_t now_us = SystemMicros();
  const uint64_t t1 = __rdtsc();
  if (t1 - t0 > 100'000) return;  // preempted mid-read: try next cycle
  const uint64_t tsc = t0 + (t1 - t0) / 2;
  if (!have_anchor || now_us < last_us) {
    // First point, or the system clock stepped back: start a new baseline.
    have_anchor = true;
    anchor_tsc = tsc;
    anchor_us = now_us;
    last_us = now_us;
    return;
  }
  if (now_us - last_us < kMinRecalibrationMicros || now_us - anchor_us < kMinBaselineMicros) {
    return;
  }
  last_us = now_us;
  const auto scale = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(now_us - anchor_us) << 32) / (tsc - anchor_tsc));
  Calibration& slot = slots[next_slot];
  next_slot = (next_slot + 1) % kSlots;
  slot.base_tsc.store(tsc, std::memory_order_relaxed);
  slot.base_us.store(now_us, std::memory_order_relaxed);
  slot.micros_per_tick_q32.store(scale, std::memory_order_relaxed);
  current_.store(&slot, std::memory_order_release);
#endif
}

}  // namespace torchmon::detail

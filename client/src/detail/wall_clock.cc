#include "detail/wall_clock.h"

#include <time.h>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace torchmon::detail {
namespace {

#if defined(__x86_64__)
// The TSC's calibration (x86-64 only: elsewhere, aarch64 included,
// NowMicros() is clock_gettime's, which the vDSO answers there from the
// generic timer).

// Calibrations are published round-robin into these slots rather than
// allocated, so a reader never touches freed memory. A slot is rewritten
// only after kSlots newer calibrations (≥ kSlots × 10 ms = 2.5 s): a reader
// preempted that long between loading the pointer and reading it could get
// a mixed timestamp, never a crash.
constexpr int kSlots = 256;
constexpr int64_t kMinRecalibrationMicros = 10'000;
// The scale is estimated over at least this long a baseline.
constexpr int64_t kMinBaselineMicros = 10'000;
// A clock_gettime between two rdtsc takes a few hundred ticks; a bracket
// this tight is taken at once, one wider than the last is never used.
constexpr uint64_t kGoodBracketTicks = 2'000;
constexpr uint64_t kMaxBracketTicks = 20'000;
constexpr int kReadTries = 8;

bool HasInvariantTsc() {
  unsigned max_ext, a, b, c, d;
  __asm__ volatile("cpuid" : "=a"(max_ext), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u));
  if (max_ext < 0x80000007u) return false;
  __asm__ volatile("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000007u));
  return (d >> 8) & 1u;
}
#endif  // __x86_64__

}  // namespace

std::atomic<const WallClock::Calibration*> WallClock::current_{nullptr};

int64_t WallClock::SystemMicros() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

namespace {

// Recalibrate's bookkeeping between calls (the calibration slots are read
// without a lock, through current_, and are not part of it).
struct Calibrator {
  absl::Mutex mu;
  int next_slot ABSL_GUARDED_BY(mu) = 0;
  bool have_anchor ABSL_GUARDED_BY(mu) = false;
  uint64_t anchor_tsc ABSL_GUARDED_BY(mu) = 0;
  int64_t anchor_us ABSL_GUARDED_BY(mu) = 0;
  int64_t last_us ABSL_GUARDED_BY(mu) = 0;
};

}  // namespace

void WallClock::Recalibrate() noexcept {
#if defined(__x86_64__)
  static const bool tsc_ok = HasInvariantTsc();
  if (!tsc_ok) return;
  static Calibration slots[kSlots];
  // Never destroyed: sender threads recalibrate until their client stops
  // them, and a client may do so only in a destructor that exit() runs
  // after this object's would have run (Client::Default()'s: that client is
  // constructed before its sender first gets here).
  static Calibrator& c = *new Calibrator;

  absl::MutexLock lock(&c.mu);
  // Bracket the system clock read with two TSC reads and take the midpoint
  // of the tightest of a few tries: a preemption or a VM exit in between
  // widens a bracket. Half its width is the point's error, and on a short
  // baseline the scale's too: with brackets of up to 100,000 ticks (the
  // limit before) a loaded 2-CPU VM read 68 µs off after 50 ms.
  uint64_t tsc = 0;
  uint64_t width = UINT64_MAX;
  int64_t now_us = 0;
  for (int i = 0; i < kReadTries && width > kGoodBracketTicks; ++i) {
    const uint64_t t0 = __rdtsc();
    const int64_t us = SystemMicros();
    const uint64_t t1 = __rdtsc();
    if (t1 - t0 < width) {
      width = t1 - t0;
      tsc = t0 + (t1 - t0) / 2;
      now_us = us;
    }
  }
  if (width > kMaxBracketTicks) return;  // preempted each time: try next cycle
  if (!c.have_anchor || now_us < c.last_us) {
    // First point, or the system clock stepped back: start a new baseline.
    c.have_anchor = true;
    c.anchor_tsc = tsc;
    c.anchor_us = now_us;
    c.last_us = now_us;
    return;
  }
  if (now_us - c.last_us < kMinRecalibrationMicros || now_us - c.anchor_us < kMinBaselineMicros) {
    return;
  }
  c.last_us = now_us;
  const auto scale = static_cast<uint64_t>(
      (static_cast<unsigned __int128>(now_us - c.anchor_us) << 32) / (tsc - c.anchor_tsc));
  Calibration& slot = slots[c.next_slot];
  c.next_slot = (c.next_slot + 1) % kSlots;
  slot.base_tsc.store(tsc, std::memory_order_relaxed);
  slot.base_us.store(now_us, std::memory_order_relaxed);
  slot.micros_per_tick_q32.store(scale, std::memory_order_relaxed);
  current_.store(&slot, std::memory_order_release);
#endif
}

}  // namespace torchmon::detail

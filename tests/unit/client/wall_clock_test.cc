// The TSC-based wall clock behind Stat::add agrees with CLOCK_REALTIME.
#include "detail/wall_clock.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <thread>

#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

// Calibrates over `baseline_us` of real time, recalibrating as a sender
// thread would. Waiting for real time to pass is the point here.
void CalibrateFor(int64_t baseline_us) {
  const int64_t start = WallClock::SystemMicros();
  while (WallClock::SystemMicros() - start < baseline_us) WallClock::Recalibrate();
}

// The smallest |fast - system| over `tries` back-to-back reads: a read pair
// split by a preemption shows a large gap, the clocks themselves do not.
int64_t ClosestAgreementMicros(int tries) {
  int64_t best = INT64_MAX;
  for (int i = 0; i < tries; ++i) {
    const int64_t system = WallClock::SystemMicros();
    const int64_t fast = WallClock::NowMicros();
    best = std::min<int64_t>(best, fast > system ? fast - system : system - fast);
  }
  return best;
}

TEST(WallClockTest, BeforeCalibrationItIsTheSystemClock) {
  // Whatever the calibration state, a reading is within a few ms of the
  // system clock; before any calibration it is the system clock itself.
  EXPECT_LT(ClosestAgreementMicros(100), 5000);
}

TEST(WallClockTest, CalibratedTscReadingsAgreeWithTheSystemClock) {
  CalibrateFor(50'000);
  if (!WallClock::UsesTsc()) GTEST_SKIP() << "no invariant TSC: the system clock is used";
  EXPECT_LE(ClosestAgreementMicros(1000), 50);
  // Extrapolating 100 ms past the last calibration stays within 50 µs too.
  const int64_t start = WallClock::SystemMicros();
  while (WallClock::SystemMicros() - start < 100'000) {
  }
  EXPECT_LE(ClosestAgreementMicros(1000), 50);
}

TEST(WallClockTest, ReadingsNeverGoBackwardsWithinOneThread) {
  CalibrateFor(20'000);
  int64_t previous = WallClock::NowMicros();
  for (int i = 0; i < 100'000; ++i) {
    if (i % 1000 == 0) WallClock::Recalibrate();
    const int64_t now = WallClock::NowMicros();
    // Recalibration may step by the estimation error; allow a few µs.
    ASSERT_GE(now, previous - 5) << "at read " << i;
    previous = std::max(previous, now);
  }
}

// A client's sender recalibrates until the client is destroyed, and a client
// may be destroyed at exit (Client::Default() is, after the statics
// constructed later than it), so recalibrating while exit() destroys the
// statics must use none of them. A TSan build reports such a use, and the
// report makes the exit status non-zero.
TEST(WallClockDeathTest, RecalibratingWhileTheProcessExitsUsesNothingExitDestroyed) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: nothing calibrated yet
  EXPECT_EXIT(
      {
        static std::atomic<int> calls{0};
        std::thread([] {
          for (;;) {
            WallClock::Recalibrate();
            // Relaxed: the exit below must not be ordered after any of this.
            calls.fetch_add(1, std::memory_order_relaxed);
          }
        }).detach();
        while (calls.load(std::memory_order_relaxed) < 2) std::this_thread::yield();
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace torchmon::detail

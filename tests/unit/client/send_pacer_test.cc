// The sender's pacing rules, driven by hand: no threads, no clock.
#include "detail/send_pacer.h"

#include <chrono>

#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;
using Duration = SendPacer::Duration;

constexpr milliseconds kMaxGap{100};

double Ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

TEST(SendPacerTest, QuietGapStartsShortAndAtMostDoublesUpToTheMaximum) {
  SendPacer pacer(kMaxGap);
  Duration gap = pacer.NextGap(Duration::zero(), 0);
  EXPECT_EQ(gap, SendPacer::kInitialGap * 2);
  for (int i = 0; i < 20; ++i) {
    const Duration next = pacer.NextGap(gap, 0);
    EXPECT_LE(next, 2 * gap);
    EXPECT_LE(next, kMaxGap);
    gap = next;
  }
  EXPECT_EQ(gap, kMaxGap);
}

TEST(SendPacerTest, BusyRingSetsTheGapThatReachesTheTargetFill) {
  SendPacer pacer(kMaxGap);
  for (int i = 0; i < 10; ++i) pacer.NextGap(milliseconds(100), 0);  // quiet: at the maximum
  // A ring half full after 10 ms fills at 50 per second: 25 % takes 5 ms.
  EXPECT_NEAR(Ms(pacer.NextGap(milliseconds(10), 0.5)), 5.0, 0.01);
}

TEST(SendPacerTest, EmptyRingsJustAfterABusyCycleDoNotStretchTheGap) {
  SendPacer pacer(kMaxGap);
  const Duration busy = pacer.NextGap(milliseconds(10), 0.5);  // 5 ms
  // The next cycle came a moment later (a flush) and found nothing: the
  // rate seen a moment ago still holds.
  EXPECT_LE(pacer.NextGap(std::chrono::microseconds(200), 0), 2 * busy);
  EXPECT_LT(Ms(pacer.NextGap(milliseconds(5), 0)), 6.0);
}

TEST(SendPacerTest, BusyPaceOutlastsAQuietPatch) {
  SendPacer pacer(kMaxGap);
  pacer.NextGap(milliseconds(20), 0.25);  // 12.5 per second: 20 ms gaps
  // 60 ms of a stalled producer: almost nothing arrived.
  const Duration gap = pacer.NextGap(milliseconds(60), 0.01);
  EXPECT_LT(Ms(gap), 25.0);
}

TEST(SendPacerTest, BusyPaceRelaxesToTheMaximumAfterSecondsOfQuiet) {
  SendPacer pacer(kMaxGap);
  Duration gap = pacer.NextGap(milliseconds(10), 0.5);  // 50 per second: 5 ms
  Duration quiet{};
  // The peak decays by e every 2 s: from 50 per second to the 2.5 that a
  // 100 ms gap allows takes 2 s x ln 20, about 6 s.
  while (quiet < std::chrono::seconds(5)) {
    gap = pacer.NextGap(gap, 0);
    quiet += gap;
  }
  EXPECT_LT(gap, kMaxGap);
  while (quiet < std::chrono::seconds(8)) {
    gap = pacer.NextGap(gap, 0);
    quiet += gap;
  }
  EXPECT_EQ(gap, kMaxGap);
}

// A client that was busy once and then quiet for minutes (a rank that
// stopped) decays its peak rate towards 0: the time to fill a ring at that
// rate is past what a Duration holds, then infinite. The gap stays the
// maximum, with no overflow on the way (UBSan's float-cast-overflow check
// found one in the live page's test, in a client of a stopped rank).
TEST(SendPacerTest, MinutesOfQuietAfterABusyPatchKeepTheMaximumGap) {
  SendPacer pacer(kMaxGap);
  pacer.NextGap(milliseconds(10), 0.5);  // 50 per second
  for (int i = 0; i < 2000; ++i) {       // 2000 x 100 ms of nothing: exp(-100) and on to 0
    EXPECT_LE(pacer.NextGap(kMaxGap, 0), kMaxGap);
  }
  EXPECT_EQ(pacer.NextGap(std::chrono::hours(1), 0), kMaxGap);  // one long look: exp(-1800) = 0
  // And a burst after it is paced again.
  EXPECT_NEAR(Ms(pacer.NextGap(milliseconds(10), 0.5)), 5.0, 0.01);
}

TEST(SendPacerTest, GapNeverExceedsTheMaximumEvenWithNothingLearned) {
  SendPacer pacer(milliseconds(3));
  for (int i = 0; i < 10; ++i) EXPECT_LE(pacer.NextGap(milliseconds(50), 0), milliseconds(3));
}

TEST(SendPacerTest, BurstIsAnEighthOfTheRing) {
  EXPECT_FALSE(SendPacer::IsBurst(127, 1024));
  EXPECT_TRUE(SendPacer::IsBurst(128, 1024));
  EXPECT_TRUE(SendPacer::IsBurst(1024, 1024));
  EXPECT_FALSE(SendPacer::IsBurst(0, 2));
}

}  // namespace
}  // namespace torchmon::detail

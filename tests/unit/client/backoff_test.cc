// Backoff: the sender's reconnect delays. Pure.
#include "detail/backoff.h"

#include <chrono>

#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

using std::chrono::milliseconds;

TEST(BackoffTest, DoublesUpToTheMaxAndResets) {
  Backoff b(milliseconds(50), milliseconds(300), 1);
  EXPECT_EQ(b.current(), milliseconds(50));
  b.Grow();
  EXPECT_EQ(b.current(), milliseconds(100));
  b.Grow();
  b.Grow();
  EXPECT_EQ(b.current(), milliseconds(300));
  b.Grow();
  EXPECT_EQ(b.current(), milliseconds(300));
  b.Reset();
  EXPECT_EQ(b.current(), milliseconds(50));
}

TEST(BackoffTest, DelaysAreJitteredWithinTwentyPercentAndSpread) {
  Backoff b(milliseconds(1000), milliseconds(1000), 7);
  milliseconds lo = milliseconds::max(), hi = milliseconds::min();
  for (int i = 0; i < 1000; ++i) {
    const milliseconds d = b.Next();
    ASSERT_GE(d, milliseconds(800));
    ASSERT_LE(d, milliseconds(1200));
    lo = std::min(lo, d);
    hi = std::max(hi, d);
  }
  // Two ranks seeded differently do not reconnect in lockstep.
  EXPECT_LT(lo, milliseconds(850));
  EXPECT_GT(hi, milliseconds(1150));
}

TEST(BackoffTest, NeverLessThanOneMillisecond) {
  Backoff b(milliseconds(1), milliseconds(1), 3);
  for (int i = 0; i < 100; ++i) ASSERT_GE(b.Next(), milliseconds(1));
}

TEST(BackoffTest, AMaxBelowTheInitialDelayIsRaisedToIt) {
  Backoff b(milliseconds(100), milliseconds(10), 3);
  b.Grow();
  EXPECT_EQ(b.current(), milliseconds(100));
}

}  // namespace
}  // namespace torchmon::detail

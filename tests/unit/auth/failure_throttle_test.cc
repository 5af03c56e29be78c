// FailureThrottle: a peer that keeps failing waits longer and longer before
// it is checked again; nobody else waits at all.
#include "server/auth/failure_throttle.h"

#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

TEST(FailureThrottleTest, EachFailureInARowDoublesTheWaitUpToTheLongest) {
  FailureThrottle throttle({absl::Seconds(1), absl::Seconds(8), 16});
  EXPECT_EQ(throttle.Wait("10.0.0.9", kT0), absl::ZeroDuration());
  absl::Time now = kT0;
  for (absl::Duration expected : {absl::Seconds(1), absl::Seconds(2), absl::Seconds(4),
                                  absl::Seconds(8), absl::Seconds(8)}) {
    throttle.Failed("10.0.0.9", now);
    EXPECT_EQ(throttle.Wait("10.0.0.9", now), expected);
    EXPECT_EQ(throttle.Wait("10.0.0.9", now + expected / 2), expected / 2);
    now += expected;
    EXPECT_EQ(throttle.Wait("10.0.0.9", now), absl::ZeroDuration());
  }
}

TEST(FailureThrottleTest, TheToleratedFailuresInARowAreNotSlowed) {
  FailureThrottle throttle({absl::Seconds(1), absl::Seconds(8), 16, 3});
  for (int i = 0; i < 3; ++i) {
    throttle.Failed("10.0.0.9", kT0);
    EXPECT_EQ(throttle.Wait("10.0.0.9", kT0), absl::ZeroDuration()) << i;
  }
  throttle.Failed("10.0.0.9", kT0);
  EXPECT_EQ(throttle.Wait("10.0.0.9", kT0), absl::Seconds(1));
  throttle.Failed("10.0.0.9", kT0);
  EXPECT_EQ(throttle.Wait("10.0.0.9", kT0), absl::Seconds(2));
  // A success starts the count again.
  throttle.Succeeded("10.0.0.9");
  throttle.Failed("10.0.0.9", kT0);
  EXPECT_EQ(throttle.Wait("10.0.0.9", kT0), absl::ZeroDuration());
}

TEST(FailureThrottleTest, OtherPeersAreNeverSlowedAndASuccessForgets) {
  FailureThrottle throttle({absl::Seconds(1), absl::Seconds(60), 16});
  for (int i = 0; i < 10; ++i) throttle.Failed("10.0.0.9", kT0);
  EXPECT_GT(throttle.Wait("10.0.0.9", kT0), absl::Seconds(59));
  EXPECT_EQ(throttle.Wait("10.0.0.8", kT0), absl::ZeroDuration());
  throttle.Succeeded("10.0.0.9");
  EXPECT_EQ(throttle.Wait("10.0.0.9", kT0), absl::ZeroDuration());
  EXPECT_EQ(throttle.peers(), 0u);
}

TEST(FailureThrottleTest, AFloodOfPeersIsBoundedForgettingTheOldestFailure) {
  FailureThrottle throttle({absl::Seconds(1), absl::Seconds(60), 3});
  throttle.Failed("a", kT0);
  throttle.Failed("b", kT0 + absl::Milliseconds(1));
  throttle.Failed("c", kT0 + absl::Milliseconds(2));
  throttle.Failed("d", kT0 + absl::Milliseconds(3));
  EXPECT_EQ(throttle.peers(), 3u);
  EXPECT_EQ(throttle.Wait("a", kT0), absl::ZeroDuration());  // forgotten
  EXPECT_GT(throttle.Wait("b", kT0 + absl::Milliseconds(3)), absl::ZeroDuration());
  EXPECT_GT(throttle.Wait("d", kT0 + absl::Milliseconds(3)), absl::ZeroDuration());
}

}  // namespace
}  // namespace torchmon::server

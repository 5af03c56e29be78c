// Broadcaster: fan-out to bounded queues, and waiting until the subscribers
// have taken what was queued (the daemon's shutdown waits on it).
#include "server/core/broadcaster.h"

#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

std::shared_ptr<Broadcaster<int>::Subscription> Subscribe(Broadcaster<int>& b, size_t capacity,
                                                          bool (*filter)(const int&) = nullptr) {
  return b.Subscribe(filter != nullptr ? filter : +[](const int&) { return true; }, [] {},
                     capacity);
}

TEST(BroadcasterTest, EachSubscriberGetsWhatItsFilterTakesInOrder) {
  Broadcaster<int> b;
  auto all = Subscribe(b, 10);
  auto even = Subscribe(b, 10, +[](const int& v) { return v % 2 == 0; });
  for (int v = 1; v <= 4; ++v) b.Publish(v);
  EXPECT_EQ(b.Queued(), 6u);
  for (int v = 1; v <= 4; ++v) EXPECT_EQ(all->Pop(), v);
  EXPECT_EQ(even->Pop(), 2);
  EXPECT_EQ(even->Pop(), 4);
  EXPECT_EQ(even->Pop(), std::nullopt);
  EXPECT_EQ(b.Queued(), 0u);
}

TEST(BroadcasterTest, AFullQueueLosesItsOldestAndCountsIt) {
  Broadcaster<int> b;
  auto sub = Subscribe(b, 2);
  uint64_t dropped = 0;
  for (int v = 1; v <= 5; ++v) dropped += b.Publish(v);
  EXPECT_EQ(dropped, 3u);
  EXPECT_EQ(sub->Dropped(), 3u);
  EXPECT_EQ(b.Queued(), 2u);
  EXPECT_EQ(sub->Pop(), 4);
  EXPECT_EQ(sub->Pop(), 5);
  EXPECT_EQ(b.Queued(), 0u);
}

TEST(BroadcasterTest, AClosedSubscriptionFinishesOnceDrained) {
  Broadcaster<int> b;
  auto sub = Subscribe(b, 10);
  b.Publish(7);
  b.Close();
  EXPECT_FALSE(sub->Finished());
  EXPECT_EQ(sub->Pop(), 7);
  EXPECT_TRUE(sub->Finished());
}

TEST(BroadcasterTest, AwaitTakenReturnsOnceEveryQueuedItemIsTaken) {
  Broadcaster<int> b;
  EXPECT_TRUE(b.AwaitTaken(absl::Now()));  // nothing queued
  auto sub = Subscribe(b, 10);
  b.Publish(1);
  b.Publish(2);
  // Nobody takes them: the wait ends at its deadline, false.
  EXPECT_FALSE(b.AwaitTaken(absl::Now() + absl::Milliseconds(20)));
  std::thread taker([&] {
    absl::SleepFor(absl::Milliseconds(20));
    sub->Pop();
    sub->Pop();
  });
  EXPECT_TRUE(b.AwaitTaken(absl::Now() + absl::Seconds(30)));
  taker.join();
}

TEST(BroadcasterTest, WhatAnUnsubscribedQueueHeldIsNoLongerAwaited) {
  Broadcaster<int> b;
  auto kept = Subscribe(b, 10);
  auto gone = Subscribe(b, 10);
  b.Publish(1);
  EXPECT_EQ(kept->Pop(), 1);
  EXPECT_EQ(b.Queued(), 1u);
  b.Unsubscribe(gone);
  EXPECT_EQ(b.Queued(), 0u);
  EXPECT_TRUE(b.AwaitTaken(absl::Now()));
}

}  // namespace
}  // namespace torchmon::server

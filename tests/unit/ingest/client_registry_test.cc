// ClientRegistry (server/ingest/client_registry.h): one record per client
// process across its streams, forgotten only once idle past the TTL or past
// the idle bound, oldest first. Time is a ManualClock.
#include "server/ingest/client_registry.h"

#include <memory>

#include "gtest/gtest.h"
#include "server/core/clock.h"

namespace torchmon::server {
namespace {

constexpr int64_t kTtlMs = 10'000;

TEST(ClientRegistryTest, StreamsOfOneClientShareItsRecord) {
  ManualClock clock(1'000'000);
  ClientRegistry registry(clock, kTtlMs, 100);
  std::shared_ptr<ClientRegistry::Client> first = registry.Acquire(7);
  {
    absl::MutexLock lock(&first->mu);
    first->applied_through = 41;
  }
  std::shared_ptr<ClientRegistry::Client> second = registry.Acquire(7);
  EXPECT_EQ(first, second);
  EXPECT_NE(registry.Acquire(8), first);
  EXPECT_EQ(registry.size(), 2u);
}

TEST(ClientRegistryTest, AClientIsForgottenOnlyWhenIdlePastTheTtl) {
  ManualClock clock(1'000'000);
  ClientRegistry registry(clock, kTtlMs, 100);
  std::shared_ptr<ClientRegistry::Client> record = registry.Acquire(7);
  {
    absl::MutexLock lock(&record->mu);
    record->applied_through = 41;
  }
  registry.Acquire(7);  // a second stream
  registry.Release(7);
  clock.Advance(kTtlMs * 5);
  EXPECT_EQ(registry.ExpireIdle(), 0u) << "one stream is still open";

  registry.Release(7);  // idle from now
  clock.Advance(kTtlMs - 1);
  EXPECT_EQ(registry.ExpireIdle(), 0u);
  // A stream back within the TTL finds what the client had applied.
  std::shared_ptr<ClientRegistry::Client> again = registry.Acquire(7);
  {
    absl::MutexLock lock(&again->mu);
    EXPECT_EQ(again->applied_through, 41u);
  }
  registry.Release(7);
  clock.Advance(kTtlMs);
  EXPECT_EQ(registry.ExpireIdle(), 1u);
  EXPECT_EQ(registry.size(), 0u);
  std::shared_ptr<ClientRegistry::Client> fresh = registry.Acquire(7);
  absl::MutexLock lock(&fresh->mu);
  EXPECT_EQ(fresh->applied_through, 0u);
}

TEST(ClientRegistryTest, PastTheIdleBoundTheLongestIdleGoFirst) {
  ManualClock clock(1'000'000);
  ClientRegistry registry(clock, kTtlMs, 2);
  for (uint64_t instance = 1; instance <= 4; ++instance) registry.Acquire(instance);
  for (uint64_t instance = 1; instance <= 4; ++instance) {
    clock.Advance(10);
    registry.Release(instance);
  }
  // 1 and 2 went idle first: past the bound of two idle ones, they went.
  EXPECT_EQ(registry.size(), 2u);
  registry.Acquire(5);  // in use: not counted against the bound
  EXPECT_EQ(registry.size(), 3u);
  std::shared_ptr<ClientRegistry::Client> three = registry.Acquire(3);
  {
    absl::MutexLock lock(&three->mu);
    three->applied_through = 9;
  }
  clock.Advance(10);
  registry.Release(3);
  clock.Advance(10);
  registry.Release(5);  // now 3, 4 and 5 are idle: 4 is the longest idle
  EXPECT_EQ(registry.size(), 2u);
  std::shared_ptr<ClientRegistry::Client> kept = registry.Acquire(3);
  absl::MutexLock lock(&kept->mu);
  EXPECT_EQ(kept->applied_through, 9u) << "3 was idle for less time than 4";
}

TEST(ClientRegistryTest, AReleaseWithoutAnAcquireChangesNothing) {
  ManualClock clock(1'000'000);
  ClientRegistry registry(clock, kTtlMs, 0);
  registry.Release(99);
  EXPECT_EQ(registry.size(), 0u);
  registry.Acquire(1);
  registry.Release(1);  // idle, past a bound of none: gone at once
  EXPECT_EQ(registry.size(), 0u);
  registry.Release(1);
  EXPECT_EQ(registry.size(), 0u);
  EXPECT_EQ(registry.ExpireIdle(), 0u);
}

}  // namespace
}  // namespace torchmon::server

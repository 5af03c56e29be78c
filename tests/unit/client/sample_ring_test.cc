// SampleRing and StatState: the lock-free buffer between Stat::add and the
// sender thread, and the accounting of what it refuses.
#include "detail/sample_ring.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "detail/stat_state.h"
#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

std::vector<Sample> PopAll(SampleRing& ring) {
  std::vector<Sample> out;
  ring.PopMany(SIZE_MAX, [&](const Sample& s) { out.push_back(s); });
  return out;
}

TEST(SampleRingTest, PopsSamplesInTheOrderTheyWerePushed) {
  SampleRing ring(8);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(ring.TryPush(i * 1.5, 100 + i));
  const std::vector<Sample> popped = PopAll(ring);
  ASSERT_EQ(popped.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(popped[i].value, i * 1.5);
    EXPECT_EQ(popped[i].timestamp_us, 100 + i);
  }
  EXPECT_EQ(ring.pushed(), 5u);
  EXPECT_EQ(ring.popped(), 5u);
}

TEST(SampleRingTest, PopManyTakesAtMostMaxAndLeavesTheRestInOrder) {
  SampleRing ring(8);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(ring.TryPush(i, i));
  std::vector<double> first;
  EXPECT_EQ(ring.PopMany(4, [&](const Sample& s) { first.push_back(s.value); }), 4u);
  EXPECT_EQ(first, (std::vector<double>{0, 1, 2, 3}));
  const std::vector<Sample> rest = PopAll(ring);
  ASSERT_EQ(rest.size(), 2u);
  EXPECT_EQ(rest[0].value, 4);
  EXPECT_EQ(rest[1].value, 5);
}

TEST(SampleRingTest, KeepsFifoOrderAcrossManyLaps) {
  SampleRing ring(4);
  int64_t next_pushed = 0, next_popped = 0;
  for (int lap = 0; lap < 100; ++lap) {
    for (int i = 0; i < 3; ++i, ++next_pushed) ASSERT_TRUE(ring.TryPush(0, next_pushed));
    for (const Sample& s : PopAll(ring)) EXPECT_EQ(s.timestamp_us, next_popped++);
  }
  EXPECT_EQ(next_popped, 300);
}

TEST(SampleRingTest, CapacityIsRoundedUpToAPowerOfTwoOfAtLeastTwo) {
  EXPECT_EQ(SampleRing(0).capacity(), 2u);
  EXPECT_EQ(SampleRing(1).capacity(), 2u);
  EXPECT_EQ(SampleRing(2).capacity(), 2u);
  EXPECT_EQ(SampleRing(3).capacity(), 4u);
  EXPECT_EQ(SampleRing(5).capacity(), 8u);
  EXPECT_EQ(SampleRing(8).capacity(), 8u);
  EXPECT_EQ(SampleRing(1000).capacity(), 1024u);
  EXPECT_EQ(SampleRing(16384).capacity(), 16384u);
}

TEST(SampleRingTest, RoundedUpCapacityIsUsable) {
  SampleRing ring(5);
  for (int i = 0; i < 8; ++i) EXPECT_TRUE(ring.TryPush(i, i)) << i;
  EXPECT_FALSE(ring.TryPush(8, 8));
}

TEST(SampleRingTest, FullRingRefusesPushUntilASampleIsPopped) {
  SampleRing ring(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(ring.TryPush(i, i));
  EXPECT_FALSE(ring.TryPush(4, 4));
  EXPECT_FALSE(ring.TryPush(5, 5));
  EXPECT_EQ(ring.pushed(), 4u);

  double first = -1;
  ASSERT_EQ(ring.PopMany(1, [&](const Sample& s) { first = s.value; }), 1u);
  EXPECT_EQ(first, 0);
  EXPECT_TRUE(ring.TryPush(6, 6));
  EXPECT_FALSE(ring.TryPush(7, 7));
  std::vector<double> rest;
  for (const Sample& s : PopAll(ring)) rest.push_back(s.value);
  EXPECT_EQ(rest, (std::vector<double>{1, 2, 3, 6}));
}

TEST(SampleRingTest, EmptyRingPopsNothing) {
  SampleRing ring(4);
  EXPECT_EQ(ring.PopMany(10, [](const Sample&) { ADD_FAILURE() << "popped from empty ring"; }), 0u);
  EXPECT_EQ(ring.popped(), 0u);
}

// Four producers push (producer, index) pairs through a ring far smaller than
// the total while one consumer drains it: nothing is lost or duplicated, and
// each producer's samples come out in the order it pushed them.
TEST(SampleRingTest, ConcurrentProducersLoseNothingAndKeepTheirOwnOrder) {
  constexpr int kProducers = 4;
  constexpr int64_t kPerProducer = 250000;
  // Shared with the producers. A broken ring can leave a producer spinning
  // inside TryPush forever; then the test fails at the deadline and leaves
  // the producers (and this state) behind instead of hanging in join().
  struct Shared {
    SampleRing ring{4096};
    std::atomic<int> producers_done{0};
  };
  auto* shared = new Shared;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([shared, p] {
      for (int64_t i = 0; i < kPerProducer; ++i) {
        while (!shared->ring.TryPush(static_cast<double>(p), i)) std::this_thread::yield();
      }
      shared->producers_done.fetch_add(1);
    });
  }

  std::vector<int64_t> next(kProducers, 0);
  uint64_t total = 0;
  bool in_order = true;
  auto consume = [&](const Sample& s) {
    const int p = static_cast<int>(s.value);
    if (p < 0 || p >= kProducers || s.timestamp_us != next[p]) {
      in_order = false;
    } else {
      ++next[p];
    }
    ++total;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (shared->producers_done.load() < kProducers) {
    if (shared->ring.PopMany(SIZE_MAX, consume) == 0 &&
        std::chrono::steady_clock::now() > deadline) {
      for (auto& t : producers) t.detach();
      FAIL() << "producers stalled after " << total << " of " << kProducers * kPerProducer
             << " samples";
    }
  }
  for (auto& t : producers) t.join();
  shared->ring.PopMany(SIZE_MAX, consume);

  EXPECT_TRUE(in_order);
  EXPECT_EQ(total, kProducers * kPerProducer);
  for (int p = 0; p < kProducers; ++p) EXPECT_EQ(next[p], kPerProducer) << "producer " << p;
  EXPECT_EQ(shared->ring.pushed(), kProducers * kPerProducer);
  EXPECT_EQ(shared->ring.popped(), kProducers * kPerProducer);
  delete shared;
}

v1::StatDefinition Definition() {
  v1::StatDefinition def;
  def.set_id(1);
  def.set_name("ring.stat");
  def.mutable_spec()->add_aggregations(v1::SUM);
  def.mutable_spec()->set_window_size_ms(1000);
  return def;
}

TEST(StatStateTest, CountsEverySampleAFullRingRefusesAsDropped) {
  StatState state(Definition(), /*is_valid=*/true, /*buffer_samples=*/4);
  for (int i = 0; i < 10; ++i) state.Add(i, i);
  EXPECT_EQ(state.added(), 10u);
  EXPECT_EQ(state.rejected.load(), 6u);
  EXPECT_EQ(state.dropped(), 6u);
  EXPECT_EQ(state.unreported_drops(), 6u);
  EXPECT_EQ(state.ring.pushed(), 4u);
}

TEST(StatStateTest, InvalidStatDropsEverySampleWithoutBuffering) {
  StatState state(Definition(), /*is_valid=*/false, /*buffer_samples=*/1024);
  for (int i = 0; i < 3; ++i) state.Add(i, i);
  EXPECT_EQ(state.added(), 3u);
  EXPECT_EQ(state.dropped(), 3u);
  EXPECT_EQ(state.ring.pushed(), 0u);
  EXPECT_FALSE(state.HasPending());
}

TEST(StatStateTest, SamplesLeftBufferedOnceTheClientStoppedCountAsDropped) {
  StatState state(Definition(), /*is_valid=*/true, /*buffer_samples=*/8);
  state.Add(1, 1);
  state.Add(2, 2);
  EXPECT_EQ(state.dropped(), 0u);
  state.accepting.store(false);
  state.Add(3, 3);
  EXPECT_EQ(state.added(), 3u);
  EXPECT_EQ(state.dropped(), 3u);
}

}  // namespace
}  // namespace torchmon::detail

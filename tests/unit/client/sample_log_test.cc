// SampleLog and StatState: the lock-free logs between Stat::add and the
// sender thread, their use of the shared ChunkPool, the stats' counts and
// the accounting of what they refuse. Pure: no sockets, no sleeps.
#include "detail/sample_log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "detail/asymmetric_fence.h"
#include "detail/chunk_pool.h"
#include "detail/stat_state.h"
#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

using Result = SampleLog::PushResult;

struct Drained {
  double value;
  int64_t timestamp_us;
};

std::vector<Drained> DrainAll(SampleLog& buffer, ChunkPool& pool, uint64_t max = UINT64_MAX) {
  std::vector<Drained> out;
  buffer.Drain(pool, max, [&](double v, int64_t t) { out.push_back({v, t}); });
  return out;
}

// Cells in a stat's first n chunks when nothing is drained: classes 0, 2,
// 4, ... capped at the largest.
uint64_t CellsOfFirstChunks(uint32_t n) {
  uint64_t cells = 0;
  for (uint32_t i = 0; i < n; ++i) {
    cells += ChunkPool::ChunkCells(std::min(i * SampleLog::kGrowth, ChunkPool::kMaxClass));
  }
  return cells;
}

TEST(SampleLogTest, ALogNeverPushedToHoldsNoMemory) {
  ChunkPool pool(size_t{4} << 20);
  std::vector<std::unique_ptr<SampleLog>> stats;
  for (int i = 0; i < 1000; ++i) stats.push_back(std::make_unique<SampleLog>());
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_EQ(pool.bytes_carved(), 0u);
  for (auto& s : stats) {
    EXPECT_TRUE(DrainAll(*s, pool).empty());
    EXPECT_TRUE(s->Release(pool));
    EXPECT_EQ(s->pushed(), 0u);
  }
  // An idle stat holds no log of its own: its state and its counts are what
  // it costs (DESIGN: idle stat <= 1 KiB with its definition around it; a
  // Python Stat adds its local window and objects to that).
  EXPECT_LE(sizeof(SampleLog), 576u);  // one per thread, not per stat: 32 slots
  EXPECT_LE(sizeof(StatState), 144u);
  EXPECT_EQ(sizeof(StatCounts), 64u);
}

TEST(SampleLogTest, DrainsInTheOrderPushedAcrossGrowingChunks) {
  ChunkPool pool(size_t{16} << 20);
  SampleLog buffer;
  const int n = static_cast<int>(CellsOfFirstChunks(5)) + 3;  // into the sixth chunk
  // The push that installs each chunk says so; the others do not.
  std::vector<uint64_t> chunk_starts;
  for (uint32_t k = 0; k < 6; ++k) chunk_starts.push_back(CellsOfFirstChunks(k));
  for (int i = 0; i < n; ++i) {
    const bool starts_chunk = std::find(chunk_starts.begin(), chunk_starts.end(),
                                        static_cast<uint64_t>(i)) != chunk_starts.end();
    ASSERT_EQ(buffer.TryPush(pool, i * 0.5, 1000 + i),
              starts_chunk ? Result::kPushedAndBound : Result::kPushed)
        << i;
  }
  EXPECT_EQ(buffer.pushed(), static_cast<uint64_t>(n));
  const auto out = DrainAll(buffer, pool);
  ASSERT_EQ(out.size(), static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    ASSERT_EQ(out[i].value, i * 0.5);
    ASSERT_EQ(out[i].timestamp_us, 1000 + i);
  }
  EXPECT_EQ(buffer.popped(), static_cast<uint64_t>(n));
  // Read chunks went back as the claim left them; the sixth is still held.
  EXPECT_EQ(pool.bytes_in_use(), ChunkPool::ChunkBytes(10));
}

TEST(SampleLogTest, ChunksGrowFourfoldFromTheSmallest) {
  ChunkPool pool(size_t{16} << 20);
  SampleLog buffer;
  buffer.TryPush(pool, 1, 1);
  EXPECT_EQ(pool.bytes_in_use(), 256u);
  for (uint64_t i = 1; i < CellsOfFirstChunks(1); ++i) buffer.TryPush(pool, 1, 1);
  EXPECT_EQ(pool.bytes_in_use(), 256u);
  buffer.TryPush(pool, 1, 1);
  EXPECT_EQ(pool.bytes_in_use(), 256u + 1024u);
}

TEST(SampleLogTest, AStatTheConsumerKeepsUpWithKeepsItsChunkSize) {
  ChunkPool pool(size_t{16} << 20);
  SampleLog buffer;
  const uint32_t first = ChunkPool::ChunkCells(0);
  // Seven samples per look, for much longer than growth would take to
  // reach the largest chunks (512 KiB). A chunk of 8 fills with less than
  // half of it read now and then, so the stat grows once, to 40 cells,
  // where a look always finds more than half read: it holds at most two of
  // those (the one read to its end goes back once the claim has left it).
  for (int round = 0; round < 1000; ++round) {
    for (uint32_t i = 0; i < first - 1; ++i) {
      ASSERT_NE(buffer.TryPush(pool, round, i), Result::kDropped);
    }
    ASSERT_EQ(DrainAll(buffer, pool).size(), first - 1) << round;
    ASSERT_LE(pool.bytes_in_use(), 2 * ChunkPool::ChunkBytes(SampleLog::kGrowth)) << round;
  }
  EXPECT_EQ(buffer.pushed(), uint64_t{1000} * (first - 1));
}

TEST(SampleLogTest, ChunksGrowWhenLessThanHalfOfTheFullOneWasRead) {
  const uint32_t first = ChunkPool::ChunkCells(0);
  for (uint32_t read : {first / 2 - 1, first / 2}) {
    ChunkPool pool(size_t{16} << 20);
    SampleLog buffer;
    for (uint32_t i = 0; i < first; ++i) buffer.TryPush(pool, i, i);
    ASSERT_EQ(DrainAll(buffer, pool, read).size(), read);
    buffer.TryPush(pool, first, first);
    const size_t next = read < first / 2 ? ChunkPool::ChunkBytes(SampleLog::kGrowth)
                                         : ChunkPool::ChunkBytes(0);
    EXPECT_EQ(pool.bytes_in_use(), ChunkPool::ChunkBytes(0) + next) << "read " << read;
  }
}

TEST(SampleLogTest, DrainTakesAtMostMaxAndLeavesTheRestInOrder) {
  ChunkPool pool(size_t{4} << 20);
  SampleLog buffer;
  for (int i = 0; i < 20; ++i) buffer.TryPush(pool, i, i);
  const auto first = DrainAll(buffer, pool, 12);
  ASSERT_EQ(first.size(), 12u);
  const auto rest = DrainAll(buffer, pool);
  ASSERT_EQ(rest.size(), 8u);
  EXPECT_EQ(first.back().value, 11);
  EXPECT_EQ(rest.front().value, 12);
  EXPECT_EQ(rest.back().value, 19);
}

TEST(SampleLogTest, PeekShowsAtMostMaxAcrossChunksAndDrainThenTakesExactlyThose) {
  // The sender's two passes (ClientCore::TakeSamples): Peek counts, Drain
  // of that many puts; both must see the same samples, chunk changes
  // included (the first chunk holds 8 cells).
  ChunkPool pool(size_t{4} << 20);
  SampleLog buffer;
  for (int i = 0; i < 40; ++i) buffer.TryPush(pool, i, 1000 + i, static_cast<uint32_t>(i % 3));
  std::vector<double> peeked;
  const uint64_t n = buffer.Peek(pool, 30, [&](double v, int64_t, uint32_t) { peeked.push_back(v); });
  ASSERT_EQ(n, 30u);
  ASSERT_EQ(peeked.size(), 30u);
  EXPECT_EQ(buffer.popped(), 0u);  // Peek takes nothing
  const auto drained = DrainAll(buffer, pool, n);
  ASSERT_EQ(drained.size(), 30u);
  for (size_t i = 0; i < drained.size(); ++i) EXPECT_EQ(drained[i].value, peeked[i]) << i;
  // The rest, and no more than there is.
  EXPECT_EQ(buffer.Peek(pool, 100, [](double, int64_t, uint32_t) {}), 10u);
  EXPECT_EQ(DrainAll(buffer, pool).size(), 10u);
  EXPECT_EQ(buffer.Peek(pool, 100, [](double, int64_t, uint32_t) {}), 0u);
}

TEST(SampleLogTest, ReleaseGivesTheChunkBackOnlyOnceDrained) {
  ChunkPool pool(size_t{4} << 20);
  SampleLog buffer;
  buffer.TryPush(pool, 1, 1);
  buffer.TryPush(pool, 2, 2);
  EXPECT_FALSE(buffer.Release(pool));  // two samples still buffered
  EXPECT_EQ(DrainAll(buffer, pool, 1).size(), 1u);
  EXPECT_FALSE(buffer.Release(pool));
  EXPECT_EQ(DrainAll(buffer, pool).size(), 1u);
  EXPECT_TRUE(buffer.Release(pool));
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  // The next add binds a fresh smallest chunk, and positions go on.
  EXPECT_EQ(buffer.TryPush(pool, 3, 3), Result::kPushedAndBound);
  EXPECT_EQ(buffer.pushed(), 3u);
  const auto out = DrainAll(buffer, pool);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].value, 3);
}

TEST(SampleLogTest, ALogHoldsAtMostItsSlotsOfChunksAndDropsBeyond) {
  // A budget whose growth limit (an eighth of the room above the reserve)
  // still grants the largest chunk for every slot.
  ChunkPool pool(size_t{128} << 20);
  SampleLog buffer;
  const uint64_t room = CellsOfFirstChunks(SampleLog::kSlots);
  for (uint64_t i = 0; i < room; ++i) ASSERT_NE(buffer.TryPush(pool, 1, 1), Result::kDropped) << i;
  EXPECT_EQ(buffer.TryPush(pool, 1, 1), Result::kDropped);
  EXPECT_EQ(buffer.pushed(), room);
  // Reading the first chunk frees its slot: the directory wraps around.
  EXPECT_EQ(DrainAll(buffer, pool, 8).size(), 8u);
  EXPECT_NE(buffer.TryPush(pool, 2, 2), Result::kDropped);
  EXPECT_EQ(DrainAll(buffer, pool).size(), room - 8 + 1);
}

TEST(SampleLogTest, DropsExactlyWhatTheBudgetCannotHold) {
  ChunkPool pool(ChunkPool::MinBudgetBytes());
  std::vector<std::unique_ptr<SampleLog>> stats;
  uint64_t attempts = 0, drops = 0;
  // Many stats, each pushing until refused: together they take the whole
  // budget, a first chunk each.
  for (int s = 0; s < 9000; ++s) {
    stats.push_back(std::make_unique<SampleLog>());
    for (int i = 0; i < 4; ++i) {
      ++attempts;
      if (stats.back()->TryPush(pool, i, i) == Result::kDropped) ++drops;
    }
  }
  uint64_t pushed = 0, drained = 0;
  for (auto& s : stats) {
    pushed += s->pushed();
    drained += DrainAll(*s, pool).size();
  }
  EXPECT_EQ(pool.bytes_in_use(), pool.budget_bytes());
  EXPECT_EQ(pushed, uint64_t{8192} * 4);  // 2 MiB / 256 B stats got a chunk
  EXPECT_EQ(pushed + drops, attempts);
  EXPECT_EQ(drained, pushed);
  for (auto& s : stats) EXPECT_TRUE(s->Release(pool));
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(SampleLogTest, GenerationTagsWrapAroundWithoutConfusion) {
  ChunkPool pool(size_t{2} << 20);
  SampleLog buffer;
  // Bind, read, release: one generation each, past the claim's 12-bit tag.
  for (int i = 0; i < 10000; ++i) {
    ASSERT_EQ(buffer.TryPush(pool, i, i), Result::kPushedAndBound) << i;
    const auto out = DrainAll(buffer, pool);
    ASSERT_EQ(out.size(), 1u) << i;
    ASSERT_EQ(out[0].value, i);
    ASSERT_TRUE(buffer.Release(pool)) << i;
  }
  EXPECT_EQ(buffer.pushed(), 10000u);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(SampleLogTest, ConcurrentProducersLoseNothingAndKeepTheirOwnOrder) {
  constexpr int kProducers = 4;
  constexpr int64_t kPerProducer = 300000;
  // Small budget: producers run out and drop while the consumer drains and
  // releases, so every path is crossed. A broken buffer can leave a
  // producer spinning; the test then fails at the deadline and leaves the
  // producers (and this state) behind instead of hanging in join().
  struct Shared {
    ChunkPool pool{ChunkPool::MinBudgetBytes()};
    SampleLog buffer;
    std::atomic<uint64_t> drops{0};
    std::atomic<int> producers_done{0};
  };
  auto* shared = new Shared;
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([shared, p] {
      for (int64_t i = 0; i < kPerProducer; ++i) {
        if (shared->buffer.TryPush(shared->pool, p, i) == Result::kDropped) {
          shared->drops.fetch_add(1);
        }
      }
      shared->producers_done.fetch_add(1);
    });
  }
  std::vector<int64_t> last(kProducers, -1);
  uint64_t total = 0;
  bool in_order = true;
  auto consume = [&](double v, int64_t t) {
    const int p = static_cast<int>(v);
    if (p < 0 || p >= kProducers || t <= last[p]) {
      in_order = false;
    } else {
      last[p] = t;
    }
    ++total;
  };
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  int round = 0;
  while (shared->producers_done.load() < kProducers) {
    shared->buffer.Drain(shared->pool, 50000, consume);
    if (++round % 7 == 0) shared->buffer.Release(shared->pool);
    if (std::chrono::steady_clock::now() > deadline) {
      for (auto& t : producers) t.detach();
      FAIL() << "producers stalled after " << total << " samples";
    }
  }
  for (auto& t : producers) t.join();
  shared->buffer.Drain(shared->pool, UINT64_MAX, consume);

  EXPECT_TRUE(in_order);
  EXPECT_EQ(total, shared->buffer.pushed());
  EXPECT_EQ(shared->buffer.pushed() + shared->drops.load(), kProducers * kPerProducer);
  EXPECT_EQ(shared->buffer.popped(), total);
  EXPECT_TRUE(shared->buffer.Release(shared->pool));
  EXPECT_EQ(shared->pool.bytes_in_use(), 0u);
  delete shared;
}

TEST(SampleLogTest, OwnedLogsLoseNothingWhileTheConsumerReleasesTheirChunks) {
  if (!AsymmetricFence::Register()) GTEST_SKIP() << "membarrier is not available here";
  // Two logs, each pushed by its owner without the CAS, on a budget so small
  // that a chunk one log gives back is soon the other's: an owner that wrote
  // into a chunk after the consumer released it would show up as a sample
  // of the other owner, out of order or lost. Owners pause now and then, so
  // the consumer finds their logs drained and releases their chunks while
  // they come back. They push at least kPerOwner samples each, and on until
  // the consumer has released chunks kReleases times while they pushed (a
  // fixed count let a busy machine's scheduler finish the owners before the
  // consumer had released more than a few times: the race went untested).
  constexpr int kOwners = 2;
  constexpr int64_t kPerOwner = 400000;
  constexpr int kReleases = 20;
  struct Shared {
    ChunkPool pool{ChunkPool::MinBudgetBytes()};
    SampleLog logs[kOwners];
    std::atomic<uint64_t> drops[kOwners] = {};
    std::atomic<int64_t> attempted[kOwners] = {};
    std::atomic<bool> stop{false};
    std::atomic<int> owners_done{0};
  };
  auto* shared = new Shared;
  for (SampleLog& log : shared->logs) log.AllowOwner();
  std::vector<std::thread> owners;
  for (int o = 0; o < kOwners; ++o) {
    owners.emplace_back([shared, o] {
      for (int64_t i = 0; i < kPerOwner || !shared->stop.load(); ++i) {
        if (shared->logs[o].TryPushOwned(shared->pool, o, i, o + 1) == Result::kDropped) {
          shared->drops[o].fetch_add(1);
        }
        shared->attempted[o].store(i + 1);
        if (i % 4096 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      shared->owners_done.fetch_add(1);
    });
  }
  int64_t last[kOwners] = {-1, -1};
  uint64_t total[kOwners] = {0, 0};
  bool consistent = true;
  const auto consumer_of = [&](int o) {
    return [&, o](double v, int64_t t, uint32_t id) {
      if (v != o || id != static_cast<uint32_t>(o + 1) || t <= last[o]) consistent = false;
      last[o] = t;
      ++total[o];
    };
  };
  // Past `enough`, the owners stop whatever the releases; past `stalled`,
  // they are stuck.
  const auto enough = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const auto stalled = enough + std::chrono::seconds(30);
  int releases = 0;
  while (shared->owners_done.load() < kOwners) {
    for (int o = 0; o < kOwners; ++o) {
      shared->logs[o].Drain(shared->pool, 20000, consumer_of(o));
      const bool bound_before = shared->pool.bytes_in_use() != 0;
      if (shared->logs[o].popped() == shared->logs[o].pushed() && shared->logs[o].Release(shared->pool)) {
        releases += bound_before;
      }
    }
    const auto now = std::chrono::steady_clock::now();
    if (releases > kReleases || now > enough) shared->stop.store(true);
    if (now > stalled) {
      for (auto& t : owners) t.detach();
      FAIL() << "owners stalled after " << total[0] + total[1] << " samples";
    }
  }
  for (auto& t : owners) t.join();
  for (int o = 0; o < kOwners; ++o) {
    shared->logs[o].Drain(shared->pool, UINT64_MAX, consumer_of(o));
    EXPECT_EQ(total[o], shared->logs[o].pushed());
    EXPECT_GE(shared->attempted[o].load(), kPerOwner);
    EXPECT_EQ(shared->logs[o].pushed() + shared->drops[o].load(),
              static_cast<uint64_t>(shared->attempted[o].load()));
    EXPECT_TRUE(shared->logs[o].Release(shared->pool));
  }
  EXPECT_TRUE(consistent);
  EXPECT_GT(releases, kReleases)
      << "the consumer released chunks only " << releases << " times in 60 s of pushing";
  EXPECT_EQ(shared->pool.bytes_in_use(), 0u);
  delete shared;
}

TEST(SampleLogTest, AConsumerThatStopsLookingAtAReleasedStatIsToldOfEveryNewChunk) {
  // The protocol a consumer that looks at a log only while it is listed
  // needs (ClientCore used it while buffers were per stat; it now reads
  // every log each cycle): it clears the flag before Release, and a
  // producer lists the log again on kPushedAndBound or a drop. Producers fill the
  // first chunk (8 cells) exactly while the consumer releases, so a
  // producer that finds the chunk full installs the next one just as the
  // release unbinds the stat. Every sample must still reach the consumer.
  constexpr int kProducers = 2;
  constexpr int kRounds = 20000;
  struct Shared {
    ChunkPool pool{ChunkPool::MinBudgetBytes()};
    SampleLog buffer;
    std::atomic<bool> listed{false};
    // Looks the consumer has had.
    std::atomic<int> round{0};
    std::atomic<int> producers_done{0};
    // A producer waits for looks spinning for a moment, so that it is
    // pushing again while the consumer releases, then blocked: one that
    // yielded instead gave its CPU to the busy processes beside it for a
    // timeslice a round, and the 20,000 rounds took minutes.
    absl::Mutex mu;
    absl::CondVar looked;

    void AwaitLooks(int looks) {
      const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
      while (round.load() < looks) {
        if (std::chrono::steady_clock::now() < spin_until) continue;
        absl::MutexLock lock(&mu);
        while (round.load() < looks) looked.Wait(&mu);
      }
    }
    void Look() {
      round.fetch_add(1);
      // Once a waiter that read the old count under mu is in Wait.
      { absl::MutexLock lock(&mu); }
      looked.SignalAll();
    }
  };
  auto shared = std::make_unique<Shared>();
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&s = *shared, p] {
      for (int r = 0; r < kRounds; ++r) {
        const int seen = s.round.load();
        // Together the producers add one chunk's worth per round.
        for (uint32_t i = p; i < ChunkPool::ChunkCells(0); i += kProducers) {
          if (s.buffer.TryPush(s.pool, p, r) != Result::kPushed) s.listed.store(true);
        }
        // Next round once the consumer has had a whole look since (bounded:
        // it looks until every producer is done).
        s.AwaitLooks(seen + 2);
      }
      s.producers_done.fetch_add(1);
    });
  }
  uint64_t drained = 0;
  auto consume = [&](double, int64_t) { ++drained; };
  while (shared->producers_done.load() < kProducers) {
    if (shared->listed.load()) {
      shared->buffer.Drain(shared->pool, UINT64_MAX, consume);
      if (shared->buffer.popped() == shared->buffer.pushed()) {
        shared->listed.store(false);
        if (!shared->buffer.Release(shared->pool)) shared->listed.store(true);
      }
    }
    shared->Look();
  }
  for (auto& t : producers) t.join();
  if (shared->listed.load()) shared->buffer.Drain(shared->pool, UINT64_MAX, consume);

  EXPECT_EQ(shared->buffer.pushed(), uint64_t{kRounds} * ChunkPool::ChunkCells(0))
      << "nothing may be dropped: the budget holds far more";
  EXPECT_EQ(drained, shared->buffer.pushed())
      << "samples left in a chunk the consumer was never told of";
}

TEST(SampleLogTest, ManyProducersOnManyStatsShareOneBudgetExactly) {
  constexpr int kThreads = 4;
  constexpr int kStats = 2000;
  constexpr int kRounds = 50;
  ChunkPool pool(ChunkPool::MinBudgetBytes());
  std::vector<std::unique_ptr<SampleLog>> stats;
  for (int s = 0; s < kStats; ++s) stats.push_back(std::make_unique<SampleLog>());
  std::vector<std::vector<uint64_t>> drops(kThreads, std::vector<uint64_t>(kStats));
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (int s = 0; s < kStats; ++s) {
          if (stats[s]->TryPush(pool, t, r) == Result::kDropped) ++drops[t][s];
        }
      }
      done.fetch_add(1);
    });
  }
  std::vector<uint64_t> drained(kStats);
  while (done.load() < kThreads) {
    for (int s = 0; s < kStats; ++s) {
      drained[s] += stats[s]->Drain(pool, UINT64_MAX, [](double, int64_t) {});
      stats[s]->Release(pool);
    }
  }
  for (auto& t : threads) t.join();
  for (int s = 0; s < kStats; ++s) {
    drained[s] += stats[s]->Drain(pool, UINT64_MAX, [](double, int64_t) {});
    uint64_t dropped = 0;
    for (int t = 0; t < kThreads; ++t) dropped += drops[t][s];
    ASSERT_EQ(stats[s]->pushed() + dropped, uint64_t{kThreads} * kRounds) << "stat " << s;
    ASSERT_EQ(drained[s], stats[s]->pushed()) << "stat " << s;
    ASSERT_TRUE(stats[s]->Release(pool));
  }
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

v1::StatDefinition Definition(uint32_t id = 1) {
  v1::StatDefinition def;
  def.set_id(id);
  def.set_name("buffer.stat" + std::to_string(id));
  def.mutable_spec()->add_aggregations(v1::SUM);
  def.mutable_spec()->set_window_size_ms(1000);
  return def;
}

std::vector<StatState*> Ready(ClientBuffers& buffers) {
  std::vector<StatState*> out;
  for (StatState* s = buffers.TakeReady(); s != nullptr; s = s->ready_next) out.push_back(s);
  return out;
}

struct Tagged {
  uint32_t stat_id;
  double value;
  bool operator==(const Tagged& o) const { return stat_id == o.stat_id && value == o.value; }
};

std::vector<Tagged> DrainTagged(SampleLog& log, ChunkPool& pool) {
  std::vector<Tagged> out;
  log.Drain(pool, UINT64_MAX, [&](double v, int64_t, uint32_t id) { out.push_back({id, v}); });
  return out;
}

TEST(StatStateTest, CountsEverySampleTheBudgetRefusesAsDroppedAndListsItself) {
  auto buffers = std::make_shared<ClientBuffers>(ChunkPool::MinBudgetBytes());
  // Others hold all but one smallest chunk of the budget.
  std::vector<uint32_t> hog;
  while (buffers->pool.bytes_in_use() + 256 < buffers->pool.budget_bytes()) {
    hog.push_back(buffers->pool.Take(0, false));
  }
  StatState state(Definition(), /*is_valid=*/true, buffers);
  for (int i = 0; i < 10; ++i) state.Add(i, i);
  EXPECT_EQ(state.added(), 10u);
  EXPECT_EQ(buffers->BufferedOf(1), 8u);  // one chunk of 8
  EXPECT_EQ(state.counts.rejected.load(), 2u);
  EXPECT_EQ(state.dropped(), 2u);
  EXPECT_EQ(state.unreported_drops(), 2u);
  EXPECT_EQ(Ready(*buffers), std::vector<StatState*>{&state});  // listed once
  for (uint32_t c : hog) buffers->pool.Give(c);
}

TEST(StatStateTest, InvalidStatDropsEverySampleWithoutBufferingOrListing) {
  auto buffers = std::make_shared<ClientBuffers>(ChunkPool::MinBudgetBytes());
  StatState state(Definition(), /*is_valid=*/false, buffers);
  for (int i = 0; i < 3; ++i) state.Add(i, i);
  EXPECT_EQ(state.added(), 3u);
  EXPECT_EQ(state.dropped(), 3u);
  EXPECT_EQ(buffers->PushedTotal(), 0u);
  EXPECT_FALSE(state.HasPendingDefinitionOrDrops());
  EXPECT_TRUE(Ready(*buffers).empty());
  EXPECT_EQ(buffers->pool.bytes_in_use(), 0u);
}

TEST(StatStateTest, SamplesLeftBufferedOnceTheClientStoppedCountAsDropped) {
  auto buffers = std::make_shared<ClientBuffers>(ChunkPool::MinBudgetBytes());
  StatState state(Definition(), /*is_valid=*/true, buffers);
  state.Add(1, 1);
  state.Add(2, 2);
  EXPECT_EQ(state.dropped(), 0u);
  buffers->accepting.store(false);
  state.Add(3, 3);
  EXPECT_EQ(state.added(), 3u);
  EXPECT_EQ(state.dropped(), 3u);
}

TEST(StatStateTest, ManyStatsAddedToFromOneThreadShareItsLogInOrderWithTheirIds) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{4} << 20);
  std::vector<std::unique_ptr<StatState>> stats;
  for (uint32_t id = 1; id <= 50; ++id) {
    stats.push_back(std::make_unique<StatState>(Definition(id), true, buffers));
  }
  std::vector<Tagged> expected;
  for (int round = 0; round < 3; ++round) {
    for (auto& s : stats) {
      s->Add(round * 100 + s->id, round);
      expected.push_back({s->id, static_cast<double>(round * 100 + s->id)});
    }
  }
  // One log holds them all; a stat that is never added to costs no chunk.
  EXPECT_EQ(buffers->PushedTotal(), 150u);
  EXPECT_EQ(buffers->LogOfThisThread().pushed(), 150u);
  EXPECT_EQ(buffers->BufferedOf(7), 3u);
  EXPECT_EQ(stats[6]->added(), 3u);
  EXPECT_EQ(DrainTagged(buffers->LogOfThisThread(), buffers->pool), expected);
  EXPECT_EQ(buffers->BufferedOf(7), 0u);
  EXPECT_TRUE(buffers->LogOfThisThread().Release(buffers->pool));
  EXPECT_EQ(buffers->pool.bytes_in_use(), 0u);
}

TEST(StatStateTest, ThreadsAddingToOneStatWriteTheirOwnLogs) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatState state(Definition(), true, buffers);
  constexpr int kThreads = 4;
  constexpr int kAdds = 10000;
  std::vector<SampleLog*> used(kThreads);
  std::vector<std::thread> threads;
  // A thread that exits gives its log back to the next thread: all stay
  // alive until all have added.
  std::atomic<int> done{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      used[t] = &buffers->LogOfThisThread();
      for (int i = 0; i < kAdds; ++i) state.Add(t, i);
      done.fetch_add(1);
      while (done.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(state.added(), uint64_t{kThreads} * kAdds);
  EXPECT_EQ(state.dropped(), 0u);
  for (int t = 0; t < kThreads; ++t) {
    for (int u = t + 1; u < kThreads; ++u) EXPECT_NE(used[t], used[u]);
    // Each thread's samples, in its own order, in its own log.
    std::vector<double> values;
    int64_t last = -1;
    used[t]->Drain(buffers->pool, UINT64_MAX, [&](double v, int64_t ts, uint32_t id) {
      EXPECT_EQ(id, 1u);
      EXPECT_EQ(v, t);
      EXPECT_EQ(ts, last + 1);
      last = ts;
      values.push_back(v);
    });
    EXPECT_EQ(values.size(), static_cast<size_t>(kAdds));
  }
}

TEST(StatStateTest, AThreadOwnsItsLogUntilItExitsAndThreadsBeyondShareTheLast) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  if (!AsymmetricFence::Available()) GTEST_SKIP() << "membarrier is not available here";
  StatState state(Definition(), true, buffers);
  // This (the test's main) thread owns a log once it has added, as every
  // thread that added in an earlier test and is gone no longer does.
  state.Add(-1, 0);
  ASSERT_NE(tls_log_offset & kThreadLogOwned, 0u);
  const int free_logs = static_cast<int>(ProducerLog::kOwnable) - 1;
  // More live adding threads than free ownable logs: the first ones own one
  // each (distinct), the rest share the last log; all samples are there.
  constexpr int kThreads = ProducerLog::kOwnable + 3;
  constexpr int kAdds = 100;
  std::vector<uint32_t> offsets(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> done{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      state.Add(t, 0);
      offsets[t] = tls_log_offset;
      for (int i = 1; i < kAdds; ++i) state.Add(t, i);
      done.fetch_add(1);
      while (done.load() < kThreads) std::this_thread::yield();
    });
  }
  for (auto& th : threads) th.join();
  std::vector<uint32_t> owned;
  int shared_last = 0;
  for (uint32_t offset : offsets) {
    if ((offset & kThreadLogOwned) != 0) {
      owned.push_back(offset);
      EXPECT_TRUE(LogAt(buffers->logs, offset).log.may_have_owner()) << offset;
    } else {
      EXPECT_EQ(&LogAt(buffers->logs, offset), &buffers->logs[ProducerLog::kOwnable]);
      ++shared_last;
    }
  }
  std::sort(owned.begin(), owned.end());
  EXPECT_EQ(std::unique(owned.begin(), owned.end()) - owned.begin(), free_logs);
  EXPECT_EQ(std::count(owned.begin(), owned.end(), tls_log_offset), 0);
  EXPECT_EQ(shared_last, kThreads - free_logs);
  EXPECT_EQ(state.added(), uint64_t{kThreads} * kAdds + 1);
  EXPECT_EQ(buffers->BufferedTotal(), uint64_t{kThreads} * kAdds + 1);

  // Every log is free again: the next thread owns one.
  uint32_t next = 0;
  std::thread([&] {
    state.Add(1, 1);
    next = tls_log_offset;
  }).join();
  EXPECT_NE(next & kThreadLogOwned, 0u);
  EXPECT_EQ(buffers->BufferedTotal(), uint64_t{kThreads} * kAdds + 2);
}

TEST(StatStateTest, OnlyTheLogsAThreadMayOwnAreReleasedWithAFence) {
  // Release revokes an owner's fast path with a membarrier, for a log that
  // may have one: the first kOwnable, where threads own logs at all.
  auto buffers = std::make_shared<ClientBuffers>(size_t{4} << 20);
  const bool owning = AsymmetricFence::Available();
  for (uint32_t i = 0; i < ProducerLog::kOwnable; ++i) {
    EXPECT_EQ(buffers->logs[i].log.may_have_owner(), owning) << i;
  }
  EXPECT_FALSE(buffers->logs[ProducerLog::kOwnable].log.may_have_owner());
  EXPECT_FALSE(SampleLog().may_have_owner());
}

TEST(StatStateTest, SamplesWaitingInTheLogsAreCountedPerStatAndInTotal) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{4} << 20);
  StatState a(Definition(1), /*is_valid=*/true, buffers);
  StatState b(Definition(2), /*is_valid=*/true, buffers);
  for (int i = 0; i < 100; ++i) (i % 4 == 0 ? b : a).Add(i, i);
  EXPECT_GT(buffers->pool.bytes_in_use(), 0u);
  EXPECT_EQ(buffers->BufferedOf(1), 75u);
  EXPECT_EQ(buffers->BufferedOf(2), 25u);
  EXPECT_EQ(buffers->BufferedTotal(), 100u);
  // Taken and counted by the sender: no longer waiting, still added.
  SampleLog& log = buffers->LogOfThisThread();
  log.Drain(buffers->pool, 40, [&](double, int64_t, uint32_t id) { Bump(buffers->sent.At(id).taken, 1); });
  EXPECT_EQ(buffers->BufferedOf(1) + buffers->BufferedOf(2), 60u);
  EXPECT_EQ(a.added(), 75u);
  EXPECT_EQ(b.added(), 25u);
}

TEST(StatTableTest, EntriesAreStableAcrossPagesAndStartAtZero) {
  StatTable table;
  StatCounts& first = table.Create(1);
  Bump(first.delivered, 5);
  for (uint32_t id = 2; id < 3 * StatTable::kPageEntries; ++id) table.Create(id);
  EXPECT_EQ(&table.At(1), &first);
  EXPECT_EQ(table.At(1).delivered.load(), 5u);
  EXPECT_EQ(table.At(2 * StatTable::kPageEntries + 1).delivered.load(), 0u);
  uint64_t seen = 0;
  table.ForEach(3 * StatTable::kPageEntries - 1, [&](uint32_t, const StatCounts& c) {
    seen += 1 + c.delivered.load();
  });
  EXPECT_EQ(seen, 3 * StatTable::kPageEntries - 1 + 5);
}

}  // namespace
}  // namespace torchmon::detail

// ChunkPool: the client's byte budget for buffered samples, handed out in
// chunks. Pure: no sockets, no sleeps.
#include "detail/chunk_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

TEST(ChunkPoolTest, ChunkSizesRunFromEightCellsToTwoMebibytes) {
  EXPECT_EQ(ChunkPool::ChunkBytes(0), 256u);
  EXPECT_EQ(ChunkPool::ChunkCells(0), 8u);
  EXPECT_EQ(ChunkPool::ChunkBytes(ChunkPool::kMaxClass), size_t{2} << 20);
  EXPECT_EQ(ChunkPool::ChunkCells(ChunkPool::kMaxClass), 87378u);
  // The smallest budget holds a whole batch (at most 65536 samples).
  EXPECT_GE(ChunkPool::MinBudgetBytes(), 65536 * sizeof(SampleCell));
  EXPECT_EQ(ChunkPool::MinBudgetBytes(), size_t{2} << 20);
}

TEST(ChunkPoolTest, NothingIsCarvedUntilAChunkIsTaken) {
  ChunkPool pool(size_t{64} << 20);
  EXPECT_EQ(pool.bytes_carved(), 0u);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  const uint32_t chunk = pool.Take(0, false);
  ASSERT_NE(chunk, 0u);
  EXPECT_EQ(pool.bytes_carved(), 256u);
  EXPECT_EQ(pool.bytes_in_use(), 256u);
  EXPECT_EQ(pool.header(chunk).cells.load(), 8u);
  pool.Give(chunk);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
}

TEST(ChunkPoolTest, PopulateAheadStaysALeadAheadOfWhatIsCarvedAndKeepsContents) {
  ChunkPool pool(size_t{16} << 20);
  // An idle pool is not made resident.
  pool.PopulateAhead();
  EXPECT_EQ(pool.bytes_populated(), 0u);
  const uint32_t chunk = pool.Take(ChunkPool::kMaxClass, false);
  ASSERT_NE(chunk, 0u);
  SampleCell* cells = pool.cells(chunk);
  cells[0].value = 42.5;
  pool.PopulateAhead();
  if (pool.bytes_populated() == 0) GTEST_SKIP() << "kernel without MADV_POPULATE_WRITE";
  EXPECT_EQ(pool.bytes_populated(), pool.bytes_carved() + ChunkPool::kMaxPopulateLeadBytes);
  EXPECT_EQ(cells[0].value, 42.5);
  // The kernel says so too: every page up to the mark is resident, and
  // the pages well past it are not (with transparent huge pages set to
  // "always" the kernel may fill the rest of the mark's 2 MiB page).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  char* base = reinterpret_cast<char*>(&pool.header(chunk));  // the arena's first chunk
  const uintptr_t huge = uintptr_t{2} << 20;
  const uintptr_t populated_end = reinterpret_cast<uintptr_t>(base) + pool.bytes_populated();
  const uintptr_t untouched_from = (populated_end + huge - 1) / huge * huge;
  std::vector<unsigned char> resident(pool.budget_bytes() / page);
  ASSERT_EQ(mincore(base, pool.budget_bytes(), resident.data()), 0);
  size_t checked_untouched = 0;
  for (size_t p = 0; p < resident.size(); ++p) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(base) + p * page;
    if (at < populated_end) {
      ASSERT_EQ(resident[p] & 1, 1) << "page " << p;
    } else if (at >= untouched_from) {
      ASSERT_EQ(resident[p] & 1, 0) << "page " << p;
      ++checked_untouched;
    }
  }
  EXPECT_GT(checked_untouched, 0u);
  // With a whole lead ahead of what is carved nothing is done; once a
  // chunk is carved into it, topped up.
  const size_t mark = pool.bytes_populated();
  pool.PopulateAhead();
  EXPECT_EQ(pool.bytes_populated(), mark);
  std::vector<uint32_t> more;
  more.push_back(pool.Take(0, false));
  ASSERT_NE(more.back(), 0u);
  pool.PopulateAhead();
  EXPECT_EQ(pool.bytes_populated(),
            (pool.bytes_carved() + ChunkPool::kMaxPopulateLeadBytes + page - 1) / page * page);
  // Never past the budget.
  while (pool.Take(ChunkPool::kMaxClass, false) != 0) {
  }
  pool.PopulateAhead();
  EXPECT_EQ(pool.bytes_populated(), pool.budget_bytes());
}

TEST(ChunkPoolTest, PopulateAheadLeadsByOneChunkAsLargeAsTheLargestCarved) {
  // Many stats with a sample each now and then keep the logs' chunks
  // small: then the lead is small too (issue 31: a 4 MiB lead was a third
  // of what 10,000 Python stats cost beyond torch.monitor's; issue 54: four
  // times the largest chunk, 1 MiB, was still most of their first samples').
  ChunkPool pool(size_t{16} << 20);
  EXPECT_EQ(pool.PopulateLead(), 0u);
  ASSERT_NE(pool.Take(8, false), 0u);
  EXPECT_EQ(pool.PopulateLead(), ChunkPool::ChunkBytes(8));
  ASSERT_NE(pool.Take(2, false), 0u);  // smaller: no change
  EXPECT_EQ(pool.PopulateLead(), ChunkPool::ChunkBytes(8));
  pool.PopulateAhead();
  if (pool.bytes_populated() == 0) GTEST_SKIP() << "kernel without MADV_POPULATE_WRITE";
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(pool.bytes_populated(),
            (pool.bytes_carved() + ChunkPool::ChunkBytes(8) + page - 1) / page * page);
  // The next chunk of that size is then resident as it is carved: no
  // top-up is due until one is.
  const size_t mark = pool.bytes_populated();
  pool.PopulateAhead();
  EXPECT_EQ(pool.bytes_populated(), mark);
  ASSERT_NE(pool.Take(8, true), 0u);
  EXPECT_LE(pool.bytes_carved(), mark);
  // A log growing to the largest chunks gets the whole lead, one of them.
  ASSERT_NE(pool.Take(ChunkPool::kMaxClass, false), 0u);
  EXPECT_EQ(pool.PopulateLead(), ChunkPool::kMaxPopulateLeadBytes);
  EXPECT_EQ(ChunkPool::kMaxPopulateLeadBytes, ChunkPool::ChunkBytes(ChunkPool::kMaxClass));
}

TEST(ChunkPoolTest, AGivenChunkIsReusedWithAFreshEpoch) {
  ChunkPool pool(size_t{4} << 20);
  const uint32_t first = pool.Take(2, false);
  const uint64_t epoch = pool.header(first).epoch.load();
  pool.Give(first);
  const uint32_t again = pool.Take(2, false);
  EXPECT_EQ(again, first);
  EXPECT_NE(pool.header(again).epoch.load(), epoch);
  EXPECT_EQ(pool.bytes_carved(), ChunkPool::ChunkBytes(2));
}

TEST(ChunkPoolTest, RefusesOnceTheBudgetIsTakenAndServesAgainAfterAGive) {
  ChunkPool pool(4096);
  std::vector<uint32_t> chunks;
  for (int i = 0; i < 16; ++i) {
    chunks.push_back(pool.Take(0, false));
    ASSERT_NE(chunks.back(), 0u) << i;
  }
  EXPECT_EQ(pool.Take(0, false), 0u);
  EXPECT_EQ(pool.bytes_in_use(), 4096u);
  pool.Give(chunks[7]);
  EXPECT_EQ(pool.Take(0, false), chunks[7]);
}

TEST(ChunkPoolTest, GrowingRequestsLeaveTheLastEighthToFirstChunks) {
  ChunkPool pool(size_t{2} << 20);
  const size_t reserve = pool.budget_bytes() / 8;
  std::vector<uint32_t> grown;
  size_t taken = 0;
  for (;;) {
    const uint32_t chunk = pool.Take(10, true);
    if (chunk == 0) break;
    taken += ChunkPool::ChunkBytes(pool.header(chunk).size_class.load());
    grown.push_back(chunk);
  }
  EXPECT_LE(taken, pool.budget_bytes() - reserve);
  // Down to the smallest chunk before refusing: less than one left under the limit.
  EXPECT_GT(taken + ChunkPool::ChunkBytes(0), pool.budget_bytes() - reserve);
  // A stat's first chunk still comes, from the reserve.
  size_t first = 0;
  while (pool.Take(0, false) != 0) ++first;
  EXPECT_EQ(first, (pool.budget_bytes() - taken) / ChunkPool::ChunkBytes(0));
}

TEST(ChunkPoolTest, ALargeFreeChunkIsSplitForSmallRequests) {
  ChunkPool pool(2048);
  const uint32_t large = pool.Take(3, false);
  ASSERT_NE(large, 0u);
  EXPECT_EQ(pool.Take(0, false), 0u);
  pool.Give(large);
  // 2048 = 256 + 256 + 512 + 1024.
  std::multiset<uint32_t> classes;
  std::set<uint32_t> chunks;
  for (uint32_t c : {0u, 0u, 1u, 2u}) {
    const uint32_t chunk = pool.Take(c, false);
    ASSERT_NE(chunk, 0u) << "class " << c;
    classes.insert(pool.header(chunk).size_class.load());
    chunks.insert(chunk);
  }
  EXPECT_EQ(classes, (std::multiset<uint32_t>{0, 0, 1, 2}));
  EXPECT_EQ(chunks.size(), 4u);
  EXPECT_EQ(pool.Take(0, false), 0u);
  EXPECT_EQ(pool.bytes_carved(), 2048u);
  EXPECT_EQ(pool.bytes_in_use(), 2048u);
}

TEST(ChunkPoolTest, ASplitPieceNeverShowsACellAsWrittenInItsNewUse) {
  // A piece's header and stamps fall on the larger chunk's samples, which
  // can hold any 64-bit word. Fill them with a word whose low half is one
  // less than its high half: a piece's epoch (its header's first 32 bits,
  // plus one) then equals the epoch half of every stale word under its
  // stamps, so without clearing every cell of it would read as written.
  ChunkPool pool(2048);
  const uint32_t large = pool.Take(3, false);
  ASSERT_NE(large, 0u);
  constexpr uint64_t kWord = (uint64_t{1000} << 32) | 999;
  SampleCell* written = pool.cells(large);
  for (uint32_t i = 0; i < ChunkPool::ChunkCells(3); ++i) {
    std::memcpy(&written[i].value, &kWord, sizeof kWord);
    written[i].timestamp_us = static_cast<int64_t>(kWord);
    written[i].stamp.store(kWord);
  }
  pool.Give(large);
  for (uint32_t c : {0u, 0u, 1u, 2u}) {
    const uint32_t chunk = pool.Take(c, false);
    ASSERT_NE(chunk, 0u) << "class " << c;
    const ChunkHeader& h = pool.header(chunk);
    ASSERT_NE(h.epoch.load(), 0u);
    const SampleCell* cells = pool.cells(chunk);
    for (uint32_t i = 0; i < h.cells.load(); ++i) {
      EXPECT_NE(StampEpoch(cells[i].stamp.load()), h.epoch.load())
          << "chunk " << chunk << " cell " << i;
    }
  }
}

TEST(ChunkPoolTest, EpochsCountAChunksUsesAndSkipZero) {
  ChunkPool pool(size_t{1} << 20);
  const uint32_t chunk = pool.Take(0, false);
  ASSERT_NE(chunk, 0u);
  const uint32_t first = pool.header(chunk).epoch.load();
  EXPECT_NE(first, 0u);
  pool.Give(chunk);
  ASSERT_EQ(pool.Take(0, false), chunk);
  EXPECT_EQ(pool.header(chunk).epoch.load(), first + 1);
  pool.Give(chunk);
  // After 2^32 - 1 it comes round to 1, never 0 (a cleared stamp's epoch).
  pool.header(chunk).epoch.store(UINT32_MAX);
  ASSERT_EQ(pool.Take(0, false), chunk);
  EXPECT_EQ(pool.header(chunk).epoch.load(), 1u);
}

TEST(ChunkPoolTest, FallsBackToASmallerChunkWhenTheSizeAskedForIsNotThere) {
  ChunkPool pool(1024);
  const uint32_t chunk = pool.Take(5, false);
  ASSERT_NE(chunk, 0u);
  EXPECT_EQ(pool.header(chunk).size_class.load(), 2u);
  EXPECT_EQ(pool.header(chunk).cells.load(), ChunkPool::ChunkCells(2));
}

TEST(ChunkPoolTest, ConcurrentTakersNeverShareAChunk) {
  ChunkPool pool(size_t{2} << 20);
  constexpr int kThreads = 4;
  constexpr int kRounds = 20000;
  std::atomic<int> overlaps{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint32_t> held;
      for (int i = 0; i < kRounds; ++i) {
        const uint32_t chunk = pool.Take(static_cast<uint32_t>((i * 7 + t) % 6), false);
        if (chunk != 0) {
          const uint32_t cells = pool.header(chunk).cells.load();
          SampleCell* c = pool.cells(chunk);
          for (uint32_t k = 0; k < cells; ++k) c[k].value = t;
          held.push_back(chunk);
        }
        if (held.size() > 8 || (chunk == 0 && !held.empty())) {
          const uint32_t back = held.front();
          held.erase(held.begin());
          const uint32_t cells = pool.header(back).cells.load();
          const SampleCell* c = pool.cells(back);
          for (uint32_t k = 0; k < cells; ++k) {
            if (c[k].value != t) overlaps.fetch_add(1);
          }
          pool.Give(back);
        }
      }
      for (uint32_t chunk : held) pool.Give(chunk);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(pool.bytes_in_use(), 0u);
  EXPECT_LE(pool.bytes_carved(), pool.budget_bytes());
}

}  // namespace
}  // namespace torchmon::detail

// WindowHistory: what a series keeps of its closed windows, and how much
// memory that takes.
#include "server/core/window_history.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;

WindowRecord Record(int64_t start_ms) {
  WindowRecord r;
  r.start_ms = start_ms;
  return r;
}

std::vector<int64_t> Starts(const WindowHistory& h) {
  std::vector<int64_t> out;
  for (size_t i = 0; i < h.size(); ++i) out.push_back(h[i].record.start_ms);
  return out;
}

TEST(WindowHistoryTest, NewHistoryIsEmptyAndAllocatesNothing) {
  WindowHistory h;
  EXPECT_TRUE(h.empty());
  EXPECT_EQ(h.size(), 0u);
  EXPECT_EQ(h.heap_records(), 0u);
}

TEST(WindowHistoryTest, BelowTheLimitKeepsEveryWindowOldestFirst) {
  WindowHistory h;
  for (int64_t t : {10, 20, 30}) h.Push(Record(t), {}, 5);
  EXPECT_THAT(Starts(h), ElementsAre(10, 20, 30));
  EXPECT_EQ(h.back().record.start_ms, 30);
}

TEST(WindowHistoryTest, PastTheLimitKeepsTheNewestOldestFirst) {
  WindowHistory h;
  for (int64_t t = 0; t < 7; ++t) h.Push(Record(t), {}, 3);
  EXPECT_THAT(Starts(h), ElementsAre(4, 5, 6));
  EXPECT_EQ(h.back().record.start_ms, 6);
}

TEST(WindowHistoryTest, RingStaysInOrderOverManyLaps) {
  WindowHistory h;
  for (int64_t t = 0; t < 1000; ++t) h.Push(Record(t), {}, 7);
  EXPECT_THAT(Starts(h), ElementsAre(993, 994, 995, 996, 997, 998, 999));
}

TEST(WindowHistoryTest, LimitOfOneKeepsOnlyTheLastWindowAndNeverAllocates) {
  WindowHistory h;
  for (int64_t t = 0; t < 4; ++t) h.Push(Record(t), {}, 1);
  EXPECT_THAT(Starts(h), ElementsAre(3));
  EXPECT_EQ(h.heap_records(), 0u);
}

TEST(WindowHistoryTest, OneClosedWindowAllocatesNothing) {
  WindowHistory h;
  h.Push(Record(0), {}, 120);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.heap_records(), 0u);
}

TEST(WindowHistoryTest, LimitOfTwoKeepsTheNewestTwo) {
  WindowHistory h;
  for (int64_t t = 0; t < 5; ++t) h.Push(Record(t), {}, 2);
  EXPECT_THAT(Starts(h), ElementsAre(3, 4));
  EXPECT_EQ(h.heap_records(), 1u);
}

TEST(WindowHistoryTest, StorageGrowsWithWindowsButNeverPastTheLimit) {
  WindowHistory h;
  for (int64_t t = 0; t < 500; ++t) {
    h.Push(Record(t), {}, 120);
    EXPECT_LE(h.heap_records(), 119u);
    EXPECT_LE(h.heap_records(), 2 * (h.size() - 1));
  }
  EXPECT_EQ(h.size(), 120u);
}

// A window's quantiles: the values pushed with record t are {t, -t}.
std::vector<std::vector<double>> Rows(const WindowHistory& h) {
  std::vector<std::vector<double>> out;
  for (size_t i = 0; i < h.size(); ++i) {
    const WindowHistory::Entry e = h[i];
    out.emplace_back(e.quantiles.begin(), e.quantiles.end());
    EXPECT_EQ(e.quantiles.size(), 2u);
    if (e.quantiles.size() == 2) {
      EXPECT_EQ(e.quantiles[0], static_cast<double>(e.record.start_ms));
    }
  }
  return out;
}

TEST(WindowHistoryTest, EachWindowKeepsItsOwnQuantilesThroughGrowthAndLaps) {
  for (size_t limit : {1, 2, 3, 7, 120}) {
    WindowHistory h(2);
    for (int64_t t = 0; t < 300; ++t) {
      const double row[] = {static_cast<double>(t), static_cast<double>(-t)};
      h.Push(Record(t), row, limit);
      Rows(h);  // every kept record with its own row, checked inside
      EXPECT_EQ(h.back().quantiles[1], static_cast<double>(-t));
    }
    ASSERT_EQ(h.size(), limit);
    const std::vector<std::vector<double>> rows = Rows(h);
    EXPECT_EQ(rows.front(), (std::vector<double>{300.0 - limit, -(300.0 - limit)})) << limit;
  }
}

TEST(WindowHistoryTest, AHistoryWithoutQuantilesHasEmptyRows) {
  WindowHistory h;
  h.Push(Record(1), {}, 3);
  h.Push(Record(2), {}, 3);
  EXPECT_TRUE(h[0].quantiles.empty());
  EXPECT_TRUE(h.back().quantiles.empty());
}

}  // namespace
}  // namespace torchmon::server

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
  for (size_t i = 0; i < h.size(); ++i) out.push_back(h[i].start_ms);
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
  for (int64_t t : {10, 20, 30}) h.Push(Record(t), 5);
  EXPECT_THAT(Starts(h), ElementsAre(10, 20, 30));
  EXPECT_EQ(h.back().start_ms, 30);
}

TEST(WindowHistoryTest, PastTheLimitKeepsTheNewestOldestFirst) {
  WindowHistory h;
  for (int64_t t = 0; t < 7; ++t) h.Push(Record(t), 3);
  EXPECT_THAT(Starts(h), ElementsAre(4, 5, 6));
  EXPECT_EQ(h.back().start_ms, 6);
}

TEST(WindowHistoryTest, RingStaysInOrderOverManyLaps) {
  WindowHistory h;
  for (int64_t t = 0; t < 1000; ++t) h.Push(Record(t), 7);
  EXPECT_THAT(Starts(h), ElementsAre(993, 994, 995, 996, 997, 998, 999));
}

TEST(WindowHistoryTest, LimitOfOneKeepsOnlyTheLastWindowAndNeverAllocates) {
  WindowHistory h;
  for (int64_t t = 0; t < 4; ++t) h.Push(Record(t), 1);
  EXPECT_THAT(Starts(h), ElementsAre(3));
  EXPECT_EQ(h.heap_records(), 0u);
}

TEST(WindowHistoryTest, OneClosedWindowAllocatesNothing) {
  WindowHistory h;
  h.Push(Record(0), 120);
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.heap_records(), 0u);
}

TEST(WindowHistoryTest, LimitOfTwoKeepsTheNewestTwo) {
  WindowHistory h;
  for (int64_t t = 0; t < 5; ++t) h.Push(Record(t), 2);
  EXPECT_THAT(Starts(h), ElementsAre(3, 4));
  EXPECT_EQ(h.heap_records(), 1u);
}

TEST(WindowHistoryTest, StorageGrowsWithWindowsButNeverPastTheLimit) {
  WindowHistory h;
  for (int64_t t = 0; t < 500; ++t) {
    h.Push(Record(t), 120);
    EXPECT_LE(h.heap_records(), 119u);
    EXPECT_LE(h.heap_records(), 2 * (h.size() - 1));
  }
  EXPECT_EQ(h.size(), 120u);
}

}  // namespace
}  // namespace torchmon::server

// The window rules of the aggregation core, driven by a ManualClock. Every
// expected number is worked out by hand in the test from the rule it checks.
#include "server/core/aggregator.h"
#include "torchmon/protocol/protocol.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/clock.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A realistic "now": 2023-11-14T22:13:20Z, a multiple of every window used.
constexpr int64_t kT0 = 1'700'000'000'000;  // ms
constexpr int64_t kW = 1000;                // window ms
constexpr int64_t kGrace = 2000;

int64_t Us(int64_t ms) { return ms * 1000; }

constexpr AggregationSet kAll =
    AggregationBit(Aggregation::kValue) | AggregationBit(Aggregation::kMean) |
    AggregationBit(Aggregation::kCount) | AggregationBit(Aggregation::kSum) |
    AggregationBit(Aggregation::kMax) | AggregationBit(Aggregation::kMin);

AggregatorOptions TestOptions() {
  AggregatorOptions o;
  o.grace_ms = kGrace;
  o.series_ttl_ms = 10'000;
  o.history_windows = 100;
  o.max_future_skew_ms = 60'000;
  return o;
}

std::vector<int64_t> Starts(const std::vector<ClosedWindow>& windows) {
  std::vector<int64_t> out;
  for (const ClosedWindow& w : windows) out.push_back(w.start_ms);
  return out;
}

class AggregatorTest : public ::testing::Test {
 protected:
  AggregatorTest() { Reset(TestOptions()); }

  void Reset(AggregatorOptions options) {
    aggregator_ = std::make_unique<Aggregator>(options, clock_);
  }

  SeriesId Define(const std::string& name, Labels labels = {{"rank", "0"}},
                  int64_t window_ms = kW, int64_t max_samples = 0,
                  AggregationSet aggregations = kAll) {
    auto id = aggregator_->Define(SeriesKey{name, std::move(labels)},
                                  StatSpec{aggregations, window_ms, max_samples, {}});
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  AddResult Add(SeriesId id, std::vector<double> values, std::vector<int64_t> timestamps_us) {
    auto r = aggregator_->AddSamples(id, values, timestamps_us);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.value_or(AddResult{});
  }

  // Adds one sample stamped `ms` (Unix milliseconds).
  AddResult AddAt(SeriesId id, double value, int64_t ms) { return Add(id, {value}, {Us(ms)}); }

  std::vector<ClosedWindow> AllWindows() const {
    return aggregator_->GetWindows(Selector{}, 0, 0, 0);
  }

  SeriesCounters Counters(const std::string& name) const {
    Selector s;
    s.name = name;
    auto list = aggregator_->ListSeries(s);
    EXPECT_THAT(list, SizeIs(1));
    return list.empty() ? SeriesCounters{} : list[0].counters;
  }

  ManualClock clock_{kT0};
  std::unique_ptr<Aggregator> aggregator_;
};

// --- Epoch alignment -------------------------------------------------------

TEST_F(AggregatorTest, WindowsAreAlignedToTheEpochNotToTheFirstSample) {
  const SeriesId id = Define("s", {}, /*window_ms=*/300);
  // 1'700'000'000'123 / 300 = 5'666'666'667.07 -> window 5'666'666'667,
  // which starts at 5'666'666'667 * 300 = 1'700'000'000'100.
  AddAt(id, 1, kT0 + 123);
  clock_.Set(kT0 + 400 + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].start_ms, 1'700'000'000'100);
  EXPECT_EQ(closed[0].end_ms, 1'700'000'000'400);
}

// The longest window the protocol allows (31 days) opens, keeps its series
// through the idle TTL and closes at its end plus the grace like any other.
TEST_F(AggregatorTest, AThirtyOneDayWindowClosesAtItsEnd) {
  constexpr int64_t kMonth = protocol::kMaxWindowMs;
  const SeriesId id = Define("monthly", {}, kMonth);
  const int64_t start = kT0 / kMonth * kMonth;
  AddAt(id, 2, kT0);
  clock_.Set(kT0 + 24 * 3600 * 1000);  // a day on: past the series TTL, window still open
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 0u);
  AddAt(id, 4, clock_.NowMs());
  clock_.Set(start + kMonth + kGrace - 1);
  EXPECT_THAT(aggregator_->CloseDueWindows(), SizeIs(0));
  clock_.Set(start + kMonth + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].start_ms, start);
  EXPECT_EQ(closed[0].end_ms, start + kMonth);
  EXPECT_EQ(closed[0].stats.accepted, 2u);
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kMean), 3);
}

TEST_F(AggregatorTest, WindowCoversItsStartUpToButExcludingItsEnd) {
  const SeriesId id = Define("s");
  Add(id, {1, 2}, {Us(kT0), Us(kT0 + kW) - 1});
  clock_.Set(kT0 + 2 * kW + kGrace);
  aggregator_->CloseDueWindows();
  const auto windows = AllWindows();
  ASSERT_THAT(windows, SizeIs(1));
  EXPECT_EQ(windows[0].start_ms, kT0);
  EXPECT_EQ(windows[0].end_ms, kT0 + kW);
  EXPECT_EQ(windows[0].stats.accepted, 2u);
}

TEST_F(AggregatorTest, OneMicrosecondBeforeABoundaryIsInThePreviousWindow) {
  const SeriesId id = Define("s");
  Add(id, {1, 2}, {Us(kT0) - 1, Us(kT0)});
  clock_.Set(kT0 + kW + kGrace);
  aggregator_->CloseDueWindows();
  const auto windows = AllWindows();
  ASSERT_THAT(windows, SizeIs(2));
  EXPECT_EQ(windows[0].start_ms, kT0 - kW);
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kValue), 1);
  EXPECT_EQ(windows[1].start_ms, kT0);
  EXPECT_EQ(windows[1].stats.Get(Aggregation::kValue), 2);
}

TEST_F(AggregatorTest, NegativeTimestampsFloorToTheEarlierWindow) {
  clock_.Set(-10'000);
  const SeriesId id = Define("s", {});
  // -1 µs is -0.001 ms: window [-1000, 0), not [0, 1000) as truncation would give.
  // -1'000'000 µs is exactly -1000 ms: the start of [-1000, 0).
  // -1'000'001 µs is -1000.001 ms: window [-2000, -1000).
  // 0 µs: window [0, 1000).
  Add(id, {1, 2, 3, 4}, {-1, -1'000'000, -1'000'001, 0});
  clock_.Set(1000 + kGrace);
  EXPECT_THAT(aggregator_->CloseDueWindows(), SizeIs(3));
  const auto windows = AllWindows();
  EXPECT_THAT(Starts(windows), ElementsAre(-2000, -1000, 0));
  ASSERT_THAT(windows, SizeIs(3));
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kValue), 3);
  EXPECT_EQ(windows[0].end_ms, -1000);
  EXPECT_EQ(windows[1].stats.accepted, 2u);
  EXPECT_EQ(windows[1].stats.Get(Aggregation::kSum), 3);
  EXPECT_EQ(windows[2].stats.Get(Aggregation::kValue), 4);
}

// --- Closing ---------------------------------------------------------------

TEST_F(AggregatorTest, WindowStaysOpenOneMillisecondBeforeEndPlusGrace) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 500);
  clock_.Set(kT0 + kW + kGrace - 1);
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
  EXPECT_THAT(AllWindows(), IsEmpty());
}

TEST_F(AggregatorTest, WindowClosesWhenClockReachesEndPlusGrace) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 500);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].start_ms, kT0);
  EXPECT_EQ(closed[0].end_ms, kT0 + kW);
  EXPECT_EQ(closed[0].series->stat, "s");
  EXPECT_FALSE(closed[0].partial);
}

TEST_F(AggregatorTest, CloseDueWindowsReturnsAWindowOnlyOnce) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 500);
  clock_.Set(kT0 + kW + kGrace);
  EXPECT_THAT(aggregator_->CloseDueWindows(), SizeIs(1));
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
  clock_.Advance(60'000);
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
  EXPECT_THAT(AllWindows(), SizeIs(1));
}

TEST_F(AggregatorTest, LastWindowOfAStatThatStopsReceivingSamplesClosesOnTheTimer) {
  const SeriesId quiet = Define("quiet");
  AddAt(quiet, 7, kT0 + 10);
  // No further sample of "quiet": only time passes.
  clock_.Advance(3'600'000);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].series->stat, "quiet");
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kValue), 7);
}

TEST_F(AggregatorTest, SampleWithinTheGraceStillCountsInItsOwnWindow) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 100);
  clock_.Set(kT0 + kW + 500);  // window k has ended, its grace has not
  AddAt(id, 2, kT0 + kW + 400);
  const AddResult r = AddAt(id, 3, kT0 + 900);
  EXPECT_EQ(r.accepted, 1u);
  EXPECT_EQ(r.late, 0u);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));  // window k+1 is not due until kT0 + 2W + grace
  EXPECT_EQ(closed[0].start_ms, kT0);
  EXPECT_EQ(closed[0].stats.accepted, 2u);
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kSum), 4);  // 1 + 3
}

TEST_F(AggregatorTest, DueWindowsOfEverySeriesCloseTogether) {
  const SeriesId a = Define("a");
  const SeriesId b = Define("b", {}, /*window_ms=*/500);
  AddAt(a, 1, kT0 + 100);  // [kT0, kT0+1000), due kT0+3000
  AddAt(b, 2, kT0 + 100);  // [kT0, kT0+500), due kT0+2500
  clock_.Set(kT0 + 3000);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(2));
  // Oldest deadline first.
  EXPECT_EQ(closed[0].series->stat, "b");
  EXPECT_EQ(closed[0].end_ms, kT0 + 500);
  EXPECT_EQ(closed[1].series->stat, "a");
}

TEST_F(AggregatorTest, SeveralDueWindowsOfOneSeriesInterleaveWithOthersByEnd) {
  const SeriesId a = Define("a");                          // W = 1000
  const SeriesId b = Define("b", {}, /*window_ms=*/2000);  // W = 2000; kT0 is a multiple
  AddAt(a, 1, kT0 + 100);           // a: [kT0, kT0+1000)
  AddAt(a, 2, kT0 + 2100);          // a: [kT0+2000, kT0+3000)
  AddAt(b, 3, kT0 + 100);           // b: [kT0, kT0+2000)
  clock_.Set(kT0 + 3000 + kGrace);  // all three are due (the timer stalled)
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(3));
  EXPECT_EQ(closed[0].series->stat, "a");
  EXPECT_EQ(closed[0].end_ms, kT0 + 1000);
  EXPECT_EQ(closed[1].series->stat, "b");
  EXPECT_EQ(closed[1].end_ms, kT0 + 2000);
  EXPECT_EQ(closed[2].series->stat, "a");
  EXPECT_EQ(closed[2].end_ms, kT0 + 3000);
}

TEST_F(AggregatorTest, CloseAllWindowsClosesOpenWindowsMarkedPartial) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 100);
  AddAt(id, 2, kT0 + kW + 100);
  const auto closed = aggregator_->CloseAllWindows();
  ASSERT_THAT(closed, SizeIs(2));
  EXPECT_TRUE(closed[0].partial);
  EXPECT_TRUE(closed[1].partial);
  const auto windows = AllWindows();
  ASSERT_THAT(windows, SizeIs(2));
  EXPECT_TRUE(windows[0].partial);
  EXPECT_EQ(windows[0].start_ms, kT0);
  EXPECT_EQ(windows[1].start_ms, kT0 + kW);
  // Nothing is left to close on the timer.
  clock_.Advance(60'000);
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
}

TEST_F(AggregatorTest, WindowsClosedOnTheTimerAreNotPartial) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 100);
  clock_.Set(kT0 + kW + kGrace);
  aggregator_->CloseDueWindows();
  ASSERT_THAT(AllWindows(), SizeIs(1));
  EXPECT_FALSE(AllWindows()[0].partial);
}

// --- Aggregations ----------------------------------------------------------

TEST_F(AggregatorTest, ClosedWindowHoldsTheSixAggregationsOfItsSamples) {
  const SeriesId id = Define("s");
  Add(id, {2, 8, -4, 10}, {Us(kT0 + 1), Us(kT0 + 2), Us(kT0 + 3), Us(kT0 + 4)});
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  const WindowStats& s = closed[0].stats;
  // sum = 2 + 8 - 4 + 10 = 16; mean = 16 / 4 = 4.
  EXPECT_EQ(s.Get(Aggregation::kSum), 16);
  EXPECT_EQ(s.Get(Aggregation::kCount), 4);
  EXPECT_EQ(s.Get(Aggregation::kMean), 4);
  EXPECT_EQ(s.Get(Aggregation::kMin), -4);
  EXPECT_EQ(s.Get(Aggregation::kMax), 10);
  EXPECT_EQ(s.Get(Aggregation::kValue), 10);
}

TEST_F(AggregatorTest, ValueIsTheLastSampleInArrivalOrderNotTheLatestTimestamp) {
  const SeriesId id = Define("s");
  Add(id, {1, 2}, {Us(kT0 + 900), Us(kT0 + 100)});
  AddAt(id, 3, kT0 + 500);
  AddAt(id, 4, kT0 + 50);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kValue), 4);
}

TEST_F(AggregatorTest, ClosedWindowCarriesOnlyTheRequestedAggregations) {
  const AggregationSet mean_max = AggregationBit(Aggregation::kMean) |
                                  AggregationBit(Aggregation::kMax);
  const SeriesId id = Define("s", {}, kW, 0, mean_max);
  AddAt(id, 1, kT0 + 1);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].aggregations, mean_max);
}

TEST_F(AggregatorTest, NaNSampleIsAcceptedAndMakesSumMeanMinMaxNaN) {
  const SeriesId id = Define("s");
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const AddResult r = Add(id, {1, nan, 2}, {Us(kT0 + 1), Us(kT0 + 2), Us(kT0 + 3)});
  EXPECT_EQ(r.accepted, 3u);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_TRUE(std::isnan(closed[0].stats.Get(Aggregation::kSum)));
  EXPECT_TRUE(std::isnan(closed[0].stats.Get(Aggregation::kMean)));
  EXPECT_TRUE(std::isnan(closed[0].stats.Get(Aggregation::kMin)));
  EXPECT_TRUE(std::isnan(closed[0].stats.Get(Aggregation::kMax)));
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kCount), 3);
}

// --- max_samples -----------------------------------------------------------

TEST_F(AggregatorTest, AcceptsTheFirstMaxSamplesOfAWindowAndCapsTheRest) {
  const SeriesId id = Define("s", {}, kW, /*max_samples=*/3);
  const AddResult r = Add(id, {1, 2, 3, 4, 5},
                          {Us(kT0 + 1), Us(kT0 + 2), Us(kT0 + 3), Us(kT0 + 4), Us(kT0 + 5)});
  EXPECT_EQ(r.accepted, 3u);
  EXPECT_EQ(r.capped, 2u);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].stats.accepted, 3u);
  EXPECT_EQ(closed[0].stats.capped, 2u);
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kSum), 6);  // 1 + 2 + 3
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kMean), 2);  // 6 / 3 accepted
  EXPECT_EQ(closed[0].stats.Get(Aggregation::kValue), 3);
}

TEST_F(AggregatorTest, ReachingMaxSamplesDoesNotCloseTheWindowEarly) {
  const SeriesId id = Define("s", {}, kW, /*max_samples=*/1);
  AddAt(id, 1, kT0 + 1);
  clock_.Set(kT0 + kW + kGrace - 1);
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
  // Still the same window: later samples are capped in it, not late, not moved.
  const AddResult r = AddAt(id, 2, kT0 + 999);
  EXPECT_EQ(r.capped, 1u);
  EXPECT_EQ(r.late, 0u);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_EQ(closed[0].start_ms, kT0);
  EXPECT_EQ(closed[0].stats.accepted, 1u);
  EXPECT_EQ(closed[0].stats.capped, 1u);
}

TEST_F(AggregatorTest, NextWindowAcceptsAgainAfterACappedWindow) {
  const SeriesId id = Define("s", {}, kW, /*max_samples=*/2);
  Add(id, {1, 2, 3}, {Us(kT0 + 1), Us(kT0 + 2), Us(kT0 + 3)});
  const AddResult r = Add(id, {4, 5}, {Us(kT0 + kW + 1), Us(kT0 + kW + 2)});
  EXPECT_EQ(r.accepted, 2u);
  EXPECT_EQ(r.capped, 0u);
}

TEST_F(AggregatorTest, CappedCounterTotalsEveryWindow) {
  const SeriesId id = Define("s", {}, kW, /*max_samples=*/2);
  Add(id, {1, 2, 3}, {Us(kT0 + 1), Us(kT0 + 2), Us(kT0 + 3)});                 // 1 capped
  Add(id, {1, 2, 3, 4}, {Us(kT0 + kW), Us(kT0 + kW), Us(kT0 + kW), Us(kT0 + kW)});  // 2 capped
  const SeriesCounters c = Counters("s");
  EXPECT_EQ(c.capped, 3u);
  EXPECT_EQ(c.accepted, 4u);
}

// --- Empty windows ---------------------------------------------------------

TEST_F(AggregatorTest, WindowWithoutSamplesProducesNoSummary) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 10);
  AddAt(id, 2, kT0 + 2 * kW + 10);  // nothing in [kT0+W, kT0+2W)
  clock_.Set(kT0 + 3 * kW + kGrace);
  EXPECT_THAT(aggregator_->CloseDueWindows(), SizeIs(2));
  EXPECT_THAT(Starts(AllWindows()), ElementsAre(kT0, kT0 + 2 * kW));
}

TEST_F(AggregatorTest, SeriesWithoutSamplesHasNoWindowAndNoLastWindow) {
  Define("s");
  clock_.Advance(60'000);
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
  const auto list = aggregator_->ListSeries(Selector{});
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_FALSE(list[0].has_last_window);
}

// --- Late and skewed -------------------------------------------------------

TEST_F(AggregatorTest, SampleForAWindowPastItsEndPlusGraceIsLate) {
  const SeriesId id = Define("s");
  clock_.Set(kT0 + kW + kGrace);  // window [kT0, kT0+W) is due, never opened
  const AddResult r = AddAt(id, 1, kT0 + 500);
  EXPECT_EQ(r.late, 1u);
  EXPECT_EQ(r.accepted, 0u);
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
  EXPECT_THAT(aggregator_->CloseAllWindows(), IsEmpty());  // not moved anywhere
  EXPECT_EQ(Counters("s").late, 1u);
}

TEST_F(AggregatorTest, SampleForAClosedWindowIsLateAndNotMovedToAnotherWindow) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 500);
  clock_.Set(kT0 + kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(1));
  EXPECT_EQ(AddAt(id, 100, kT0 + 600).late, 1u);
  EXPECT_EQ(AddAt(id, 5, kT0 + 3 * kW).accepted, 1u);
  clock_.Set(kT0 + 4 * kW + kGrace);
  aggregator_->CloseDueWindows();
  const auto windows = AllWindows();
  ASSERT_THAT(windows, SizeIs(2));
  EXPECT_EQ(windows[0].stats.accepted, 1u);
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kSum), 1);
  EXPECT_EQ(windows[1].stats.accepted, 1u);
  EXPECT_EQ(windows[1].stats.Get(Aggregation::kSum), 5);
}

TEST_F(AggregatorTest, SampleForAWindowClosedAtShutdownIsLateEvenBeforeItsDeadline) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0 + 100);
  ASSERT_THAT(aggregator_->CloseAllWindows(), SizeIs(1));
  const AddResult r = AddAt(id, 2, kT0 + 200);  // deadline kT0+3000 not reached
  EXPECT_EQ(r.late, 1u);
  EXPECT_EQ(r.accepted, 0u);
}

TEST_F(AggregatorTest, SampleExactlyMaxSkewAheadIsAccepted) {
  const SeriesId id = Define("s");
  const AddResult r = AddAt(id, 1, kT0 + 60'000);
  EXPECT_EQ(r.accepted, 1u);
  EXPECT_EQ(r.skewed, 0u);
}

TEST_F(AggregatorTest, SampleMoreThanMaxSkewAheadIsSkewedAndOpensNoWindow) {
  const SeriesId id = Define("s");
  const AddResult r = AddAt(id, 1, kT0 + 60'001);
  EXPECT_EQ(r.skewed, 1u);
  EXPECT_EQ(r.accepted, 0u);
  EXPECT_THAT(aggregator_->CloseAllWindows(), IsEmpty());
  EXPECT_EQ(Counters("s").skewed, 1u);
}

TEST_F(AggregatorTest, EverySampleSentIsAccountedForExactlyOnce) {
  const SeriesId id = Define("s", {}, kW, /*max_samples=*/2);
  uint64_t sent = 0;
  // Window k: 3 samples, 2 accepted + 1 capped.
  Add(id, {1, 2, 3}, {Us(kT0 + 1), Us(kT0 + 2), Us(kT0 + 3)});
  sent += 3;
  // Window k+1: 1 accepted. Two skewed samples in the same call.
  Add(id, {4, 5, 6}, {Us(kT0 + kW), Us(kT0 + 120'000), Us(kT0 + 61'000)});
  sent += 3;
  // The client dropped 4 before sending.
  ASSERT_TRUE(aggregator_->AddClientDrops(id, 4).ok());
  sent += 4;
  // Both windows close; 2 late samples for them, 1 accepted in window k+5.
  clock_.Set(kT0 + 4000);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(2));
  Add(id, {7, 8, 9}, {Us(kT0 + 999), Us(kT0 + 5000), Us(kT0 + 1500)});
  sent += 3;

  const SeriesCounters c = Counters("s");
  EXPECT_EQ(c.accepted, 4u);
  EXPECT_EQ(c.capped, 1u);
  EXPECT_EQ(c.late, 2u);
  EXPECT_EQ(c.skewed, 2u);
  EXPECT_EQ(c.client_dropped, 4u);
  EXPECT_EQ(c.accepted + c.capped + c.late + c.skewed + c.client_dropped, sent);
}

// Found by ingest_fuzzer: two drop reports adding up past 2^64 wrapped the
// counter around, so a _total counter went back (a reset, to Prometheus).
TEST_F(AggregatorTest, ClientDropsSaturateRatherThanWrapAround) {
  const SeriesId id = Define("s");
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  ASSERT_TRUE(aggregator_->AddClientDrops(id, max - 1).ok());
  ASSERT_TRUE(aggregator_->AddClientDrops(id, 5).ok());
  EXPECT_EQ(Counters("s").client_dropped, max);
  ASSERT_TRUE(aggregator_->AddClientDrops(id, max).ok());
  EXPECT_EQ(Counters("s").client_dropped, max);
}

TEST_F(AggregatorTest, MismatchedValueAndTimestampCountsAreInvalidArgument) {
  const SeriesId id = Define("s");
  const std::vector<double> values = {1, 2};
  const std::vector<int64_t> timestamps = {Us(kT0)};
  auto r = aggregator_->AddSamples(id, values, timestamps);
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
}

// --- Definitions -----------------------------------------------------------

TEST_F(AggregatorTest, IdenticalRedefinitionReturnsTheSameSeries) {
  const SeriesId first = Define("train.loss");
  AddAt(first, 1, kT0);
  const SeriesId again = Define("train.loss");
  EXPECT_EQ(again, first);
  EXPECT_EQ(aggregator_->series_count(), 1u);
  EXPECT_EQ(Counters("train.loss").accepted, 1u);  // nothing was reset
}

TEST_F(AggregatorTest, SameNameWithOtherLabelsIsAnotherSeries) {
  const SeriesId rank0 = Define("train.loss", {{"rank", "0"}});
  const SeriesId rank1 = Define("train.loss", {{"rank", "1"}});
  EXPECT_NE(rank0, rank1);
  EXPECT_EQ(aggregator_->series_count(), 2u);
}

TEST_F(AggregatorTest, ConflictingDefinitionIsAlreadyExistsNamingSeriesAndBothSpecs) {
  const SeriesKey key{"train.loss", {{"rank", "0"}}};
  ASSERT_TRUE(aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kMean), 1000, 0, {}}).ok());
  auto conflict = aggregator_->Define(
      key, StatSpec{AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax), 2000,
                    10, {}});
  ASSERT_TRUE(absl::IsAlreadyExists(conflict.status())) << conflict.status();
  const std::string message(conflict.status().message());
  EXPECT_THAT(message, HasSubstr("train.loss{rank=\"0\"}"));
  EXPECT_THAT(message, HasSubstr("aggregations=[mean] window=1s max_samples=unlimited"));
  EXPECT_THAT(message, HasSubstr("aggregations=[mean,max] window=2s max_samples=10"));
}

TEST_F(AggregatorTest, ConflictingDefinitionLeavesTheFirstSpecInPlace) {
  const SeriesKey key{"s", {}};
  const StatSpec first{AggregationBit(Aggregation::kSum), 1000, 0, {}};
  ASSERT_TRUE(aggregator_->Define(key, first).ok());
  EXPECT_FALSE(aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kSum), 1000, 5, {}}).ok());
  const auto list = aggregator_->ListSeries(Selector{});
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_EQ(list[0].spec, first);
}

// --- Redefinition ----------------------------------------------------------

TEST_F(AggregatorTest, ADefinitionNothingHoldsIsReplacedItsOpenWindowClosedFirst) {
  const SeriesKey key{"asdf", {}};
  const StatSpec first{AggregationBit(Aggregation::kSum), 1000, 3, {}};
  const StatSpec second{AggregationBit(Aggregation::kCount), 250, 0, {}};
  auto id = aggregator_->Define(key, first);
  ASSERT_TRUE(id.ok());
  AddAt(*id, 9, kT0 - 500);  // [kT0 - 1000, kT0): ended, within the grace
  AddAt(*id, 2, kT0 + 100);
  AddAt(*id, 5, kT0 + 200);
  aggregator_->Release(*id);
  clock_.Set(kT0 + 300);
  Aggregator::DefineDetail detail;
  auto again = aggregator_->Define(key, second, &detail);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *id);  // the same series
  EXPECT_TRUE(detail.redefined);
  EXPECT_EQ(detail.previous, first);
  EXPECT_EQ(aggregator_->redefinitions(), 1u);
  // The old windows closed at once under the old spec, and come out of the
  // next close, though they are not due: [kT0, kT0 + 1000) partial, the
  // one that had ended whole.
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(2));
  EXPECT_EQ(closed[0].start_ms, kT0 - 1000);
  EXPECT_FALSE(closed[0].partial);
  EXPECT_EQ(closed[1].start_ms, kT0);
  EXPECT_EQ(closed[1].end_ms, kT0 + 1000);
  EXPECT_TRUE(closed[1].partial);
  EXPECT_EQ(closed[1].definition, 0u);
  EXPECT_EQ(closed[1].Value(AggregateRef{Aggregation::kSum, 0}), 7.0);
  EXPECT_EQ(closed[1].Value(AggregateRef{Aggregation::kCount, 0}), std::nullopt);
  // The new spec from now on: 250 ms windows, no cap, COUNT. A sample in
  // the new window [kT0 + 250, kT0 + 500), which the old window spanned,
  // is not late.
  EXPECT_EQ(AddAt(*id, 1, kT0 + 300).accepted, 1u);
  EXPECT_EQ(AddAt(*id, 1, kT0 + 310).accepted, 1u);
  EXPECT_EQ(AddAt(*id, 1, kT0 + 320).accepted, 1u);
  EXPECT_EQ(AddAt(*id, 1, kT0 + 330).accepted, 1u);  // over the old cap of 3
  clock_.Set(kT0 + 500 + kGrace);
  const auto next = aggregator_->CloseDueWindows();
  ASSERT_THAT(next, SizeIs(1));
  EXPECT_EQ(next[0].start_ms, kT0 + 250);
  EXPECT_EQ(next[0].end_ms, kT0 + 500);
  EXPECT_FALSE(next[0].partial);
  EXPECT_EQ(next[0].definition, 1u);
  EXPECT_EQ(next[0].Value(AggregateRef{Aggregation::kCount, 0}), 4.0);
  EXPECT_EQ(next[0].Value(AggregateRef{Aggregation::kSum, 0}), std::nullopt);
  // History: both, in order of definition, each with its own spec; the
  // series says which definition holds and since when; counters go on.
  const auto history = AllWindows();
  ASSERT_THAT(history, SizeIs(3));
  EXPECT_EQ(history[1].definition, 0u);
  EXPECT_EQ(history[1].end_ms - history[1].start_ms, 1000);
  EXPECT_EQ(history[2].definition, 1u);
  EXPECT_EQ(history[2].end_ms - history[2].start_ms, 250);
  const auto list = aggregator_->ListSeries(Selector{});
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_EQ(list[0].spec, second);
  EXPECT_EQ(list[0].definition, 1u);
  EXPECT_EQ(list[0].defined_ms, kT0 + 300);
  EXPECT_EQ(list[0].counters.accepted, 7u);
}

TEST_F(AggregatorTest, ADefinitionStillHeldConflictsAndSaysWhoHoldsIt) {
  const SeriesKey key{"s", {}};
  auto a = aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kSum), 1000, 0, {}});
  auto b = aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kSum), 1000, 0, {}});
  ASSERT_TRUE(a.ok() && b.ok());
  const StatSpec other{AggregationBit(Aggregation::kSum), 2000, 0, {}};
  Aggregator::DefineDetail detail;
  auto refused = aggregator_->Define(key, other, &detail);
  ASSERT_TRUE(absl::IsAlreadyExists(refused.status()));
  EXPECT_EQ(detail.conflict_id, *a);
  EXPECT_EQ(detail.holders, 2u);
  EXPECT_THAT(refused.status().message(), HasSubstr("while 2 Stats of the first definition"));
  aggregator_->Release(*a);
  detail = {};
  EXPECT_TRUE(absl::IsAlreadyExists(aggregator_->Define(key, other, &detail).status()));
  EXPECT_EQ(detail.holders, 1u);
  aggregator_->Release(*b);
  EXPECT_TRUE(aggregator_->Define(key, other).ok());
  EXPECT_EQ(aggregator_->redefinitions(), 1u);
  // Releasing more than was held leaves nothing held, not less.
  aggregator_->Release(*a);
  aggregator_->Release(*a);
  ASSERT_TRUE(aggregator_->Define(key, other).ok());
  detail = {};
  EXPECT_TRUE(
      absl::IsAlreadyExists(aggregator_->Define(key, StatSpec{kAll, 1000, 0, {}}, &detail).status()));
  EXPECT_EQ(detail.holders, 1u);
}

TEST_F(AggregatorTest, ADefinitionDifferingOnlyInTheWindowAskedForIsTheSame) {
  const SeriesKey key{"s", {}};
  StatSpec one_ms{AggregationBit(Aggregation::kSum), 10, 0, {}};
  one_ms.requested_window_ms = 1;
  StatSpec five_ms = one_ms;
  five_ms.requested_window_ms = 5;
  auto a = aggregator_->Define(key, one_ms);
  auto b = aggregator_->Define(key, five_ms);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(aggregator_->redefinitions(), 0u);
  const auto list = aggregator_->ListSeries(Selector{});
  ASSERT_THAT(list, SizeIs(1));
  EXPECT_EQ(list[0].spec.requested_window_ms, 1);  // the first's
  EXPECT_EQ(list[0].spec.ToString(), "aggregations=[sum] window=10ms (asked 1ms) max_samples=unlimited");
}

TEST_F(AggregatorTest, RedefinitionKeepsEachWindowsQuantilesAndPagesInOrder) {
  const SeriesKey key{"q", {}};
  // Three definitions: p50 in 1 s windows; p10, p50, p90 in 100 ms; none.
  auto id = aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kMax), 1000, 0, {0.5}});
  ASSERT_TRUE(id.ok());
  for (int i = 1; i <= 5; ++i) AddAt(*id, i, kT0 + 500 + i);
  aggregator_->Release(*id);
  clock_.Set(kT0 + 600);
  ASSERT_TRUE(aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kMin), 100, 0,
                                                {0.1, 0.5, 0.9}})
                  .ok());
  for (int i = 1; i <= 9; ++i) AddAt(*id, i * 10, kT0 + 600 + i);  // window [600, 700)
  for (int i = 1; i <= 9; ++i) AddAt(*id, i, kT0 + 700 + i);       // window [700, 800)
  clock_.Set(kT0 + 800 + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(3));
  aggregator_->Release(*id);
  ASSERT_TRUE(aggregator_->Define(key, StatSpec{AggregationBit(Aggregation::kCount), 50, 0, {}}).ok());
  AddAt(*id, 1, kT0 + 2800);
  clock_.Set(kT0 + 2850 + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(1));

  const auto all = AllWindows();
  ASSERT_THAT(all, SizeIs(4));
  EXPECT_EQ(all[0].definition, 0u);
  ASSERT_THAT(all[0].quantiles, SizeIs(1));
  EXPECT_EQ(all[0].quantiles[0].quantile, 0.5);
  EXPECT_NEAR(all[0].quantiles[0].value, 3, 0.03);
  EXPECT_EQ(all[1].definition, 1u);
  ASSERT_THAT(all[1].quantiles, SizeIs(3));
  EXPECT_NEAR(all[1].quantiles[2].value, 80, 0.8);  // p90 of 10..90: rank 7
  EXPECT_EQ(all[2].definition, 1u);
  EXPECT_EQ(all[3].definition, 2u);
  EXPECT_THAT(all[3].quantiles, IsEmpty());
  EXPECT_EQ(all[3].Value(AggregateRef{Aggregation::kCount, 0}), 1.0);
  // The first definition's window starts after the second's first and
  // before the third's: pages of one window each still list each once, in
  // the same order.
  std::vector<std::pair<uint32_t, int64_t>> paged;
  std::optional<Aggregator::WindowCursor> from;
  do {
    auto chunk = aggregator_->GetWindowsChunk(Selector{}, Aggregator::WindowFilter{},
                                              from ? &*from : nullptr, 1);
    for (const ClosedWindow& w : chunk.windows) paged.emplace_back(w.definition, w.start_ms);
    from = chunk.resume;
  } while (from.has_value());
  std::vector<std::pair<uint32_t, int64_t>> expected;
  for (const ClosedWindow& w : all) expected.emplace_back(w.definition, w.start_ms);
  EXPECT_EQ(paged, expected);
  // A time filter looks past a definition whose windows start earlier.
  const auto since = aggregator_->GetWindows(Selector{}, kT0 + 650, 0, 0);
  ASSERT_THAT(since, SizeIs(2));
  EXPECT_EQ(since[0].start_ms, kT0 + 700);
  EXPECT_EQ(since[1].start_ms, kT0 + 2800);
}

TEST_F(AggregatorTest, RedefiningInALoopKeepsOnlyThePastDefinitionsTheHistoryUses) {
  AggregatorOptions options = TestOptions();
  options.history_windows = 3;
  Reset(options);
  const SeriesKey key{"loop", {}};
  SeriesId id = 0;
  for (int i = 0; i < 1000; ++i) {
    const int64_t t = kT0 + int64_t{i} * 10;
    clock_.Set(t);
    auto defined = aggregator_->Define(
        key, StatSpec{AggregationBit(Aggregation::kSum), i % 2 == 0 ? 1000 : 2000, i % 7, {}});
    ASSERT_TRUE(defined.ok()) << i << ": " << defined.status();
    id = *defined;
    AddAt(id, 1, t);
    aggregator_->Release(id);
  }
  EXPECT_EQ(aggregator_->redefinitions(), 999u);
  aggregator_->CloseDueWindows();
  // Each redefinition closed the window before it; the last is open.
  const auto all = AllWindows();
  ASSERT_THAT(all, SizeIs(3));  // the history's bound
  for (size_t i = 0; i < all.size(); ++i) {
    const uint32_t definition = 996 + static_cast<uint32_t>(i);
    EXPECT_EQ(all[i].definition, definition);
    EXPECT_EQ(all[i].end_ms - all[i].start_ms, definition % 2 == 0 ? 1000 : 2000);
    EXPECT_TRUE(all[i].partial);
  }
  EXPECT_EQ(Counters("loop").accepted, 1000u);
}

// --- TTL -------------------------------------------------------------------

TEST_F(AggregatorTest, SeriesIdleLessThanTheTtlIsKept) {
  Define("s");
  clock_.Set(kT0 + 10'000 - 1);
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 0u);
  EXPECT_EQ(aggregator_->series_count(), 1u);
}

TEST_F(AggregatorTest, SeriesIdleForTheTtlIsRemoved) {
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0);
  clock_.Set(kT0 + 10'000);
  aggregator_->CloseDueWindows();
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  EXPECT_EQ(aggregator_->series_count(), 0u);
  EXPECT_THAT(aggregator_->ListSeries(Selector{}), IsEmpty());
  EXPECT_THAT(AllWindows(), IsEmpty());
}

// The daemon's totals (the live page's accounting) sum every series' counters
// and keep those of a series after it expired.
TEST_F(AggregatorTest, TotalsSumEverySeriesAndOutliveExpiredOnes) {
  const SeriesId capped = Define("capped", {}, kW, /*max_samples=*/1);
  const SeriesId other = Define("other");
  AddAt(capped, 1, kT0);
  AddAt(capped, 2, kT0);                       // capped
  AddAt(other, 3, kT0);
  AddAt(other, 4, kT0 + 120'000);              // skewed (past the 60 s default)
  ASSERT_TRUE(aggregator_->AddClientDrops(other, 5).ok());
  clock_.Set(kT0 + kW + kGrace);
  aggregator_->CloseDueWindows();
  AddAt(other, 6, kT0);                        // late: its window closed
  SeriesCounters t = aggregator_->totals();
  EXPECT_EQ(t.accepted, 2u);
  EXPECT_EQ(t.capped, 1u);
  EXPECT_EQ(t.skewed, 1u);
  EXPECT_EQ(t.late, 1u);
  EXPECT_EQ(t.client_dropped, 5u);
  clock_.Set(kT0 + 60'000);
  aggregator_->CloseDueWindows();
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 2u);
  t = aggregator_->totals();
  EXPECT_EQ(t.accepted + t.capped + t.late + t.skewed + t.client_dropped, 10u);
}

TEST_F(AggregatorTest, SeriesWithAnOpenWindowIsNotExpired) {
  AggregatorOptions options = TestOptions();
  options.series_ttl_ms = 1000;
  Reset(options);
  const SeriesId id = Define("s");
  AddAt(id, 1, kT0);  // window due at kT0 + W + grace = kT0 + 3000
  clock_.Set(kT0 + 2000);  // idle 2000 ms ≥ ttl, but the window is still open
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 0u);
  clock_.Set(kT0 + 3000);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(1));
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 1u);
}

TEST_F(AggregatorTest, ClientDropReportKeepsASeriesAlive) {
  const SeriesId id = Define("s");
  clock_.Set(kT0 + 5000);
  ASSERT_TRUE(aggregator_->AddClientDrops(id, 1).ok());
  clock_.Set(kT0 + 14'999);
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 0u);
  clock_.Set(kT0 + 15'000);
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 1u);
}

TEST_F(AggregatorTest, AddSamplesToAnExpiredSeriesIsNotFound) {
  const SeriesId id = Define("s");
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  const std::vector<double> values = {1};
  const std::vector<int64_t> timestamps = {Us(kT0 + 10'000)};
  EXPECT_TRUE(absl::IsNotFound(aggregator_->AddSamples(id, values, timestamps).status()));
  EXPECT_TRUE(absl::IsNotFound(aggregator_->AddClientDrops(id, 1)));
}

TEST_F(AggregatorTest, AddSampleRunsAnswersEachRunAsAddSamplesWould) {
  // The same runs into two aggregators on one clock: together through
  // AddSampleRuns, one by one through AddSamples. More runs than one lock
  // hold takes, a series met several times (across a chunk boundary too),
  // late, skewed and capped samples, an expired series, a malformed run.
  Aggregator batched(TestOptions(), clock_);
  Aggregator single(TestOptions(), clock_);
  constexpr int kSeries = 300;
  std::vector<SeriesId> ids;
  for (int i = 0; i < kSeries; ++i) {
    const SeriesKey key{"s", {{"i", std::to_string(i)}}};
    const StatSpec spec{kAll, kW, /*max_samples=*/i % 7 == 0 ? 2 : 0, {}};
    auto a = batched.Define(key, spec);
    auto b = single.Define(key, spec);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(*a, *b);
    ids.push_back(*a);
  }
  // One that expires: defined at kT0, the rest touched later.
  const SeriesKey gone_key{"gone", {}};
  const StatSpec gone_spec{kAll, kW, 0, {}};
  const SeriesId gone = *batched.Define(gone_key, gone_spec);
  ASSERT_EQ(*single.Define(gone_key, gone_spec), gone);
  clock_.Set(kT0 + 5'000);
  for (SeriesId id : ids) {
    const std::vector<double> v = {0.5};
    const std::vector<int64_t> t = {Us(kT0 + 5'000)};
    ASSERT_TRUE(batched.AddSamples(id, v, t).ok());
    ASSERT_TRUE(single.AddSamples(id, v, t).ok());
  }
  clock_.Set(kT0 + 12'000);
  batched.CloseDueWindows([](const ClosedWindow&) {});
  single.CloseDueWindows([](const ClosedWindow&) {});
  ASSERT_EQ(batched.ExpireIdleSeries(), 1u);
  ASSERT_EQ(single.ExpireIdleSeries(), 1u);

  const int64_t now = kT0 + 12'000;
  std::vector<std::vector<double>> values;
  std::vector<std::vector<int64_t>> times;
  std::vector<SeriesId> run_ids;
  for (int r = 0; r < 700; ++r) {
    std::vector<double> v;
    std::vector<int64_t> t;
    for (int k = 0; k <= r % 4; ++k) {
      v.push_back(r * 0.25 + k);
      // Mostly now; some late (a closed window), some far in the future.
      const int64_t ms = r % 11 == 0 ? kT0 + 4'000 : r % 13 == 0 ? now + 120'000 : now - k;
      t.push_back(Us(ms));
    }
    if (r == 333) t.pop_back();  // values and timestamps disagree
    run_ids.push_back(r == 500 ? gone : ids[(r * 37) % kSeries]);
    values.push_back(std::move(v));
    times.push_back(std::move(t));
  }
  std::vector<Aggregator::SampleRun> runs;
  for (size_t r = 0; r < run_ids.size(); ++r) runs.push_back({run_ids[r], values[r], times[r]});
  std::vector<absl::StatusOr<AddResult>> results(runs.size());
  batched.AddSampleRuns(runs, absl::MakeSpan(results));

  for (size_t r = 0; r < runs.size(); ++r) {
    const auto expected = single.AddSamples(run_ids[r], values[r], times[r]);
    ASSERT_EQ(results[r].status().code(), expected.status().code()) << "run " << r;
    if (!expected.ok()) continue;
    EXPECT_EQ(results[r]->accepted, expected->accepted) << "run " << r;
    EXPECT_EQ(results[r]->capped, expected->capped) << "run " << r;
    EXPECT_EQ(results[r]->late, expected->late) << "run " << r;
    EXPECT_EQ(results[r]->skewed, expected->skewed) << "run " << r;
  }
  EXPECT_TRUE(absl::IsNotFound(results[500].status()));
  EXPECT_TRUE(absl::IsInvalidArgument(results[333].status()));
  // And they left the same state: counters and windows.
  const auto listed_batched = batched.ListSeries(Selector{});
  const auto listed_single = single.ListSeries(Selector{});
  ASSERT_EQ(listed_batched.size(), listed_single.size());
  uint64_t accepted = 0, capped = 0, late = 0, skewed = 0;
  for (size_t i = 0; i < listed_batched.size(); ++i) {
    const SeriesCounters& a = listed_batched[i].counters;
    const SeriesCounters& b = listed_single[i].counters;
    EXPECT_EQ(*listed_batched[i].key, *listed_single[i].key);
    EXPECT_EQ(a.accepted, b.accepted);
    EXPECT_EQ(a.capped, b.capped);
    EXPECT_EQ(a.late, b.late);
    EXPECT_EQ(a.skewed, b.skewed);
    accepted += a.accepted;
    capped += a.capped;
    late += a.late;
    skewed += a.skewed;
  }
  // Every kind of outcome was exercised.
  EXPECT_GT(capped, 0u);
  EXPECT_GT(late, 0u);
  EXPECT_GT(skewed, 0u);
  EXPECT_GT(accepted, 1000u);
  const auto windows_batched = batched.CloseAllWindows();
  const auto windows_single = single.CloseAllWindows();
  ASSERT_EQ(windows_batched.size(), windows_single.size());
  for (size_t i = 0; i < windows_batched.size(); ++i) {
    EXPECT_EQ(*windows_batched[i].series, *windows_single[i].series);
    EXPECT_EQ(windows_batched[i].start_ms, windows_single[i].start_ms);
    EXPECT_EQ(windows_batched[i].stats.Get(Aggregation::kCount),
              windows_single[i].stats.Get(Aggregation::kCount));
    EXPECT_EQ(windows_batched[i].stats.Get(Aggregation::kSum),
              windows_single[i].stats.Get(Aggregation::kSum));
    EXPECT_EQ(windows_batched[i].stats.Get(Aggregation::kValue),
              windows_single[i].stats.Get(Aggregation::kValue));
  }
}

TEST_F(AggregatorTest, RedefiningAnExpiredSeriesStartsItAfresh) {
  const SeriesId old_id = Define("s");
  AddAt(old_id, 1, kT0);
  clock_.Set(kT0 + 10'000);
  aggregator_->CloseDueWindows();
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  const SeriesId new_id = Define("s");
  EXPECT_NE(new_id, old_id);
  EXPECT_EQ(Counters("s").accepted, 0u);
}

// --- Listing in chunks -----------------------------------------------------

std::string Name(int i) { return absl::StrFormat("s%05d", i); }

// Every series in key order, chunk after chunk of at most `max` each.
std::vector<std::string> ListInChunks(const Aggregator& aggregator, const Selector& selector,
                                      size_t max, size_t* chunks = nullptr) {
  std::vector<std::string> names;
  std::shared_ptr<const SeriesKey> after;
  size_t n = 0;
  do {
    Aggregator::SeriesChunk chunk = aggregator.ListSeriesChunk(selector, after.get(), max);
    EXPECT_LE(chunk.series.size(), max);
    for (const SeriesSnapshot& s : chunk.series) names.push_back(s.key->stat);
    after = chunk.resume_after;
    ++n;
  } while (after != nullptr);
  if (chunks != nullptr) *chunks = n;
  return names;
}

TEST_F(AggregatorTest, ChunksListEverySeriesOnceInKeyOrder) {
  // Defined out of order, in more than one chunk's worth.
  constexpr int kSeries = 2500;
  for (int i = 0; i < kSeries; ++i) Define(Name((i * 7919) % kSeries));
  size_t chunks = 0;
  const std::vector<std::string> names = ListInChunks(*aggregator_, Selector{}, 1000, &chunks);
  ASSERT_THAT(names, SizeIs(kSeries));
  for (int i = 0; i < kSeries; ++i) ASSERT_EQ(names[i], Name(i));
  EXPECT_EQ(chunks, 3u);
  // The whole listing is the same walk.
  EXPECT_THAT(aggregator_->ListSeries(Selector{}), SizeIs(kSeries));
}

// A chunk resumes after a key, not at a position: series created or removed
// between two chunks shift nothing, so every series that exists throughout
// is listed exactly once.
TEST_F(AggregatorTest, ChunksResumeAfterAKeyThroughSeriesChurn) {
  AggregatorOptions options = TestOptions();
  options.series_ttl_ms = 1000;
  Reset(options);
  std::vector<SeriesId> even;  // kept alive below
  for (int i = 0; i < 400; ++i) {
    even.push_back(Define(Name(2 * i)));
    Define(Name(2 * i + 1));  // left to expire
  }
  std::vector<std::string> listed;
  std::shared_ptr<const SeriesKey> after;
  int round = 0;
  do {
    Aggregator::SeriesChunk chunk = aggregator_->ListSeriesChunk(Selector{}, after.get(), 50);
    for (const SeriesSnapshot& s : chunk.series) listed.push_back(s.key->stat);
    after = chunk.resume_after;
    // Between chunks: the odd series expire (the even ones are kept alive
    // by a sample), and new series appear before and after the cursor.
    clock_.Advance(600);
    for (SeriesId id : even) aggregator_->AddClientDrops(id, 0).IgnoreError();
    aggregator_->ExpireIdleSeries();
    even.push_back(Define(absl::StrCat("a-new-", round)));  // sorts before every "s…"
    even.push_back(Define(absl::StrCat("z-new-", round)));  // after every "s…"
    ++round;
  } while (after != nullptr);
  std::set<std::string> seen;
  for (const std::string& name : listed) EXPECT_TRUE(seen.insert(name).second) << name;
  for (int i = 0; i < 400; ++i) EXPECT_TRUE(seen.count(Name(2 * i))) << Name(2 * i);
  EXPECT_TRUE(std::is_sorted(listed.begin(), listed.end()));
  // Those created after the cursor passed are listed; none before it.
  EXPECT_EQ(seen.count("a-new-0"), 0u);
  EXPECT_EQ(seen.count("z-new-0"), 1u);
}

TEST_F(AggregatorTest, AChunkVisitsABoundedNumberOfSeriesWhateverTheSelectorMatches) {
  // A selector matching nothing still makes progress chunk by chunk,
  // without holding the lock for the whole table at once.
  for (int i = 0; i < 10'000; ++i) Define(Name(i));
  Selector none;
  none.name = "nothing*";
  size_t chunks = 0;
  EXPECT_THAT(ListInChunks(*aggregator_, none, 100, &chunks), IsEmpty());
  EXPECT_EQ(chunks, (10'000 + Aggregator::kVisitPerChunk - 1) / Aggregator::kVisitPerChunk);
  // An exact stat name goes straight to its series.
  Selector one;
  one.name = Name(5000);
  EXPECT_THAT(ListInChunks(*aggregator_, one, 100, &chunks), ElementsAre(Name(5000)));
  EXPECT_EQ(chunks, 1u);
}

// --- History and GetWindows ------------------------------------------------

class AggregatorHistoryTest : public AggregatorTest {
 protected:
  // One sample (value i) in each of the windows [kT0 + i·W, kT0 + (i+1)·W),
  // i = 0..n-1, all closed.
  void FillWindows(SeriesId id, int n) {
    for (int i = 0; i < n; ++i) AddAt(id, i, kT0 + i * kW + 1);
    clock_.Set(kT0 + n * kW + kGrace);
    ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(n));
  }
};

TEST_F(AggregatorHistoryTest, HistoryKeepsOnlyTheNewestWindows) {
  AggregatorOptions options = TestOptions();
  options.history_windows = 3;
  Reset(options);
  FillWindows(Define("s"), 5);
  EXPECT_THAT(Starts(AllWindows()), ElementsAre(kT0 + 2 * kW, kT0 + 3 * kW, kT0 + 4 * kW));
}

TEST_F(AggregatorHistoryTest, LastWindowIsTheNewestClosed) {
  FillWindows(Define("s"), 3);
  const auto list = aggregator_->ListSeries(Selector{});
  ASSERT_THAT(list, SizeIs(1));
  ASSERT_TRUE(list[0].has_last_window);
  EXPECT_EQ(list[0].last_window.start_ms, kT0 + 2 * kW);
  EXPECT_EQ(list[0].last_window.stats.Get(Aggregation::kValue), 2);
}

TEST_F(AggregatorHistoryTest, LimitPerSeriesKeepsTheMostRecentOldestFirst) {
  FillWindows(Define("s"), 4);
  EXPECT_THAT(Starts(aggregator_->GetWindows(Selector{}, 0, 0, 2)),
              ElementsAre(kT0 + 2 * kW, kT0 + 3 * kW));
}

TEST_F(AggregatorHistoryTest, WindowChunksSplitASeriesAndResumeAfterTheLastWindowListed) {
  const SeriesId a = Define("a");
  Define("b");  // no window closed: nothing listed
  const SeriesId c = Define("c");
  for (int i = 0; i < 5; ++i) {
    AddAt(a, i, kT0 + i * kW + 1);
    AddAt(c, i, kT0 + i * kW + 1);
  }
  clock_.Set(kT0 + 5 * kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(10));
  const Aggregator::WindowFilter last4{0, 0, 4};
  std::vector<std::pair<std::string, int64_t>> listed;
  std::optional<Aggregator::WindowCursor> from;
  do {
    Aggregator::WindowsChunk chunk =
        aggregator_->GetWindowsChunk(Selector{}, last4, from ? &*from : nullptr, 3);
    EXPECT_LE(chunk.windows.size(), 3u);
    for (const ClosedWindow& w : chunk.windows) listed.emplace_back(w.series->stat, w.start_ms);
    from = chunk.resume;
  } while (from.has_value());
  // The 4 most recent of each series with windows, grouped, oldest first.
  std::vector<std::pair<std::string, int64_t>> expected;
  for (const char* name : {"a", "c"}) {
    for (int i = 1; i < 5; ++i) expected.emplace_back(name, kT0 + i * kW);
  }
  EXPECT_EQ(listed, expected);
}

TEST_F(AggregatorHistoryTest, StartFilterKeepsWindowsStartingAtOrAfterIt) {
  FillWindows(Define("s"), 4);
  EXPECT_THAT(Starts(aggregator_->GetWindows(Selector{}, kT0 + kW, 0, 0)),
              ElementsAre(kT0 + kW, kT0 + 2 * kW, kT0 + 3 * kW));
}

TEST_F(AggregatorHistoryTest, EndFilterKeepsWindowsEndingAtOrBeforeIt) {
  FillWindows(Define("s"), 4);
  EXPECT_THAT(Starts(aggregator_->GetWindows(Selector{}, 0, kT0 + 2 * kW, 0)),
              ElementsAre(kT0, kT0 + kW));
}

TEST_F(AggregatorHistoryTest, LimitKeepsTheMostRecentWithinTheTimeRange) {
  FillWindows(Define("s"), 4);
  EXPECT_THAT(Starts(aggregator_->GetWindows(Selector{}, kT0 + kW, kT0 + 3 * kW, 1)),
              ElementsAre(kT0 + 2 * kW));
}

TEST_F(AggregatorHistoryTest, WindowsAreGroupedBySeriesInSortedOrderOldestFirst) {
  const SeriesId b = Define("b", {{"rank", "0"}});
  const SeriesId a1 = Define("a", {{"rank", "1"}});
  const SeriesId a0 = Define("a", {{"rank", "0"}});
  for (int i = 0; i < 2; ++i) {
    AddAt(b, 10 + i, kT0 + i * kW);
    AddAt(a1, 20 + i, kT0 + i * kW);
    AddAt(a0, 30 + i, kT0 + i * kW);
  }
  clock_.Set(kT0 + 2 * kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(6));
  std::vector<double> values;
  for (const ClosedWindow& w : AllWindows()) values.push_back(w.stats.Get(Aggregation::kValue));
  EXPECT_THAT(values, ElementsAre(30, 31, 20, 21, 10, 11));
}

TEST_F(AggregatorHistoryTest, SelectorRestrictsTheWindowsReturned) {
  FillWindows(Define("train.loss"), 1);
  const SeriesId other = Define("eval.loss");
  AddAt(other, 1, clock_.NowMs());
  clock_.Advance(kW + kGrace);
  aggregator_->CloseDueWindows();
  Selector s;
  s.name = "train.*";
  const auto windows = aggregator_->GetWindows(s, 0, 0, 0);
  ASSERT_THAT(windows, SizeIs(1));
  EXPECT_EQ(windows[0].series->stat, "train.loss");
}

TEST_F(AggregatorTest, ListSeriesIsSortedByNameThenLabels) {
  Define("b");
  Define("a", {{"rank", "1"}});
  Define("a", {{"rank", "0"}});
  std::vector<std::string> keys;
  for (const SeriesSnapshot& s : aggregator_->ListSeries(Selector{})) {
    keys.push_back(s.key->ToString());
  }
  EXPECT_THAT(keys, ElementsAre("a{rank=\"0\"}", "a{rank=\"1\"}", "b{rank=\"0\"}"));
}

// --- The series table ------------------------------------------------------

TEST_F(AggregatorTest, SeriesWithEqualLabelsShareOneStoredLabelSet) {
  for (int i = 0; i < 50; ++i) Define("s" + std::to_string(i), {{"job", "j"}, {"rank", "0"}});
  EXPECT_EQ(aggregator_->label_set_count(), 1u);
  Define("s0", {{"job", "j"}, {"rank", "1"}});
  EXPECT_EQ(aggregator_->label_set_count(), 2u);
}

TEST_F(AggregatorTest, SeriesWithoutLabelsStoreNoLabelSet) {
  Define("s", {});
  EXPECT_EQ(aggregator_->label_set_count(), 0u);
}

TEST_F(AggregatorTest, LabelSetOfExpiredSeriesIsForgotten) {
  Define("a", {{"rank", "0"}});
  Define("b", {{"rank", "0"}});
  Define("a", {{"rank", "1"}});
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 3u);
  EXPECT_EQ(aggregator_->label_set_count(), 0u);
}

TEST_F(AggregatorTest, LabelSetStaysWhileAnySeriesUsesIt) {
  Define("old", {{"rank", "0"}});
  clock_.Set(kT0 + 5000);
  const SeriesId young = Define("young", {{"rank", "0"}});
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  EXPECT_EQ(aggregator_->label_set_count(), 1u);
  EXPECT_EQ(AddAt(young, 1, kT0 + 10'000).accepted, 1u);
}

TEST_F(AggregatorTest, IdOfAnExpiredSeriesDoesNotReachTheSeriesReusingItsSlot) {
  const SeriesId old_id = Define("old");
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  const SeriesId new_id = Define("new");
  ASSERT_NE(new_id, old_id);
  const std::vector<double> values = {1};
  const std::vector<int64_t> timestamps = {Us(kT0 + 10'000)};
  EXPECT_TRUE(absl::IsNotFound(aggregator_->AddSamples(old_id, values, timestamps).status()));
  EXPECT_TRUE(absl::IsNotFound(aggregator_->AddClientDrops(old_id, 1)));
  EXPECT_EQ(Counters("new").accepted, 0u);
  EXPECT_EQ(Counters("new").client_dropped, 0u);
}

TEST_F(AggregatorTest, SeriesIdIsNeverZero) {
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(Define("s"), 0u);
    clock_.Advance(10'000);
    ASSERT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  }
}

TEST_F(AggregatorTest, ForEachSeriesVisitsEverySeriesOnceAcrossChunks) {
  const int n = static_cast<int>(2 * Aggregator::kWalkChunk + 3);
  for (int i = 0; i < n; ++i) Define("s" + std::to_string(i));
  std::set<std::string> seen;
  int calls = 0;
  aggregator_->ForEachSeries([&](const Aggregator::SeriesView& s) {
    seen.insert(s.key->stat);
    ++calls;
  });
  EXPECT_EQ(calls, n);
  EXPECT_EQ(seen.size(), static_cast<size_t>(n));
}

TEST_F(AggregatorTest, ForEachSeriesShowsTheLastClosedWindow) {
  const SeriesId id = Define("s");
  aggregator_->ForEachSeries(
      [](const Aggregator::SeriesView& s) { EXPECT_EQ(s.last_window, nullptr); });
  AddAt(id, 1, kT0);
  AddAt(id, 2, kT0 + kW);
  clock_.Set(kT0 + 2 * kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(2));
  aggregator_->ForEachSeries([](const Aggregator::SeriesView& s) {
    ASSERT_NE(s.last_window, nullptr);
    EXPECT_EQ(s.last_window->start_ms, kT0 + kW);
    EXPECT_EQ(s.last_window->stats.sum, 2);
  });
}

// A walk steps aside between chunks while samples wait; under unbroken
// ingestion it must still finish, and must still see every series.
TEST_F(AggregatorTest, WalkFinishesWhileAnotherThreadIngestsWithoutPause) {
  const int n = static_cast<int>(4 * Aggregator::kWalkChunk);
  for (int i = 0; i < n; ++i) Define("s" + std::to_string(i));
  const SeriesId busy = Define("busy");
  std::atomic<bool> walking{true};
  std::atomic<uint64_t> added{0};
  std::thread ingest([&] {
    const std::vector<double> values = {1};
    const std::vector<int64_t> timestamps = {Us(kT0)};
    while (walking.load()) {
      ASSERT_TRUE(aggregator_->AddSamples(busy, values, timestamps).ok());
      added.fetch_add(1);
    }
  });
  int visited = 0;
  for (int walk = 0; walk < 5; ++walk) {
    aggregator_->ForEachSeries([&](const Aggregator::SeriesView&) { ++visited; });
  }
  walking = false;
  ingest.join();
  EXPECT_EQ(visited, 5 * (n + 1));
  EXPECT_EQ(Counters("busy").accepted, added.load());
}

TEST_F(AggregatorTest, CloseDueWindowsClosesEveryDueWindowAcrossChunksOldestFirst) {
  const int n = static_cast<int>(2 * Aggregator::kWalkChunk + 5);
  for (int i = 0; i < n; ++i) {
    // Interleaved so that both deadlines run through every chunk.
    AddAt(Define("long" + std::to_string(i), {{"rank", "0"}}, 2 * kW), 1, kT0);
    AddAt(Define("short" + std::to_string(i), {{"rank", "0"}}, kW), 1, kT0);
  }
  clock_.Set(kT0 + 2 * kW + kGrace);
  const std::vector<ClosedWindow> closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(2 * n));
  for (int i = 0; i < 2 * n; ++i) {
    EXPECT_EQ(closed[i].end_ms, i < n ? kT0 + kW : kT0 + 2 * kW) << i;
  }
  EXPECT_THAT(aggregator_->CloseDueWindows(), IsEmpty());
}

TEST_F(AggregatorTest, ExpiryRemovesIdleSeriesAcrossChunks) {
  const int n = static_cast<int>(2 * Aggregator::kWalkChunk + 3);
  for (int i = 0; i < n; ++i) Define("s" + std::to_string(i));
  clock_.Set(kT0 + 10'000);
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), static_cast<size_t>(n));
  EXPECT_EQ(aggregator_->series_count(), 0u);
}

TEST_F(AggregatorTest, ClosedWindowKeepsItsSeriesKeyAfterTheSeriesExpired) {
  const SeriesId id = Define("s", {{"rank", "7"}});
  AddAt(id, 1, kT0);
  clock_.Set(kT0 + 10'000);
  std::vector<ClosedWindow> closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 1u);
  EXPECT_EQ(closed[0].series->ToString(), "s{rank=\"7\"}");
}

// --- Quantiles ---------------------------------------------------------------

// A series with p50 and p99 beside the six.
SeriesId DefineWithQuantiles(Aggregator& aggregator, const std::string& name) {
  auto id = aggregator.Define(SeriesKey{name, {{"rank", "0"}}},
                              StatSpec{kAll, kW, 0, {0.5, 0.99}});
  EXPECT_TRUE(id.ok()) << id.status();
  return id.value_or(0);
}

// A series with quantiles keeps its last window's sketch for the next one
// (its buckets are allocated); one that went quiet gives them back.
TEST_F(AggregatorTest, AnIdleQuantileSeriesReleasesItsSketchAfterAFewIdleWindows) {
  const SeriesId id = DefineWithQuantiles(*aggregator_, "q");
  std::vector<double> values;
  std::vector<int64_t> stamps;
  for (int v = 1; v <= 1000; ++v) {
    values.push_back(v);
    stamps.push_back(Us(kT0 + 10));
  }
  Add(id, values, stamps);
  const size_t open_buckets = aggregator_->sketch_buckets();
  ASSERT_GT(open_buckets, 100u);
  clock_.Set(kT0 + kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(1));
  // Closed: the sketch is kept, cleared, with its buckets.
  aggregator_->ExpireIdleSeries();
  EXPECT_EQ(aggregator_->sketch_buckets(), open_buckets);
  // Idle for fewer windows than the release takes: still kept.
  // The sample came at kT0: idle for the grace, then for fewer windows than
  // the release takes: still kept.
  const int64_t release = kT0 + kGrace + Aggregator::kIdleWindowsBeforeSketchRelease * kW;
  clock_.Set(release - 1);
  aggregator_->ExpireIdleSeries();
  EXPECT_EQ(aggregator_->sketch_buckets(), open_buckets);
  clock_.Set(release);
  EXPECT_EQ(aggregator_->ExpireIdleSeries(), 0u);  // the series itself stays
  EXPECT_EQ(aggregator_->sketch_buckets(), 0u);
  // The next window gets a fresh sketch and estimates as before.
  const int64_t next = kT0 + 10 * kW;
  clock_.Set(next);
  AddAt(id, 7, next + 1);
  clock_.Set(next + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  ASSERT_THAT(closed[0].quantiles, SizeIs(2));
  EXPECT_NEAR(closed[0].quantiles[0].value, 7, 0.07);
}

// --- Quantiles of several series merged (CompareRanks' all_ranks) ---------

// Ranks 0, 1 and 2 of "m", with p50 and p99. Ranks 0 and 2 send 1..100 and
// rank 1 sends 1001..1100, each stamped `ms`: the three hold 300 samples.
class MergedQuantileTest : public AggregatorTest {
 protected:
  MergedQuantileTest() {
    for (int r = 0; r < 3; ++r) {
      keys_.push_back(
          std::make_shared<const SeriesKey>(SeriesKey{"m", {{"rank", absl::StrCat(r)}}}));
      auto id = aggregator_->Define(*keys_.back(), StatSpec{kAll, kW, 0, {0.5, 0.99}});
      EXPECT_TRUE(id.ok()) << id.status();
      ids_.push_back(id.value_or(0));
    }
  }

  void AddRank(int rank, int64_t ms) {
    std::vector<double> values;
    std::vector<int64_t> stamps;
    for (int v = 1; v <= 100; ++v) {
      values.push_back(rank == 1 ? 1000 + v : v);
      stamps.push_back(Us(ms));
    }
    Add(ids_[rank], values, stamps);
  }

  std::optional<double> Merged(int64_t start_ms, double q, std::vector<int> ranks = {0, 1, 2}) {
    std::vector<std::shared_ptr<const SeriesKey>> keys;
    for (int r : ranks) keys.push_back(keys_[r]);
    return aggregator_->MergedQuantile(keys, start_ms, q);
  }

  std::vector<std::shared_ptr<const SeriesKey>> keys_;
  std::vector<SeriesId> ids_;
};

TEST_F(MergedQuantileTest, IsTheQuantileOfTheSamplesOfEverySeriesPooled) {
  for (int r = 0; r < 3; ++r) AddRank(r, kT0 + 10);
  clock_.Set(kT0 + kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(3));
  // Sorted, the pool is 1, 1, 2, 2, ..., 100, 100, 1001, ..., 1100. p50 is
  // the sample of rank floor(0.5·299) = 149: 75, where the ranks' own p50s
  // are 50, 1050 and 50. p99 is rank floor(0.99·299) = 296: 1097.
  const std::optional<double> p50 = Merged(kT0, 0.5);
  ASSERT_TRUE(p50.has_value());
  EXPECT_NEAR(*p50, 75, 0.75);
  const std::optional<double> p99 = Merged(kT0, 0.99);
  ASSERT_TRUE(p99.has_value());
  EXPECT_NEAR(*p99, 1097, 10.97);
  // Any quantile of the pool, not only those of the spec.
  const std::optional<double> p25 = Merged(kT0, 0.25);
  ASSERT_TRUE(p25.has_value());
  EXPECT_NEAR(*p25, 38, 0.38);  // rank floor(0.25·299) = 74
  // Two of the ranks: 1..100 and 1001..1100; rank floor(0.5·199) = 99 is 100.
  const std::optional<double> two = Merged(kT0, 0.5, {0, 1});
  ASSERT_TRUE(two.has_value());
  EXPECT_NEAR(*two, 100, 1);
}

TEST_F(MergedQuantileTest, IsAbsentUntilTheWindowClosedAndOnceASeriesClosedANewerOne) {
  for (int r = 0; r < 3; ++r) AddRank(r, kT0 + 10);
  EXPECT_FALSE(Merged(kT0, 0.5).has_value());  // still open
  clock_.Set(kT0 + kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(3));
  ASSERT_TRUE(Merged(kT0, 0.5).has_value());
  EXPECT_FALSE(Merged(kT0 + kW, 0.5).has_value());  // no series has that window
  // Ranks 0 and 1 close the next window, rank 2 has no sample in it.
  AddRank(0, kT0 + kW + 10);
  AddRank(1, kT0 + kW + 10);
  clock_.Set(kT0 + 2 * kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(2));
  // Ranks 0 and 1 keep only their newest window's sketch: the older
  // window is gone for the group, and rank 2 lacks the newer one.
  EXPECT_FALSE(Merged(kT0, 0.5).has_value());
  EXPECT_TRUE(Merged(kT0, 0.5, {2}).has_value());
  EXPECT_FALSE(Merged(kT0 + kW, 0.5).has_value());
  const std::optional<double> newer = Merged(kT0 + kW, 0.5, {0, 1});
  ASSERT_TRUE(newer.has_value());
  EXPECT_NEAR(*newer, 100, 1);
}

TEST_F(MergedQuantileTest, IsAbsentOnceAnIdleSeriesReleasedItsSketch) {
  for (int r = 0; r < 3; ++r) AddRank(r, kT0 + 10);
  clock_.Set(kT0 + kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(3));
  // The samples came at kT0: the sketches go after the grace and
  // kIdleWindowsBeforeSketchRelease windows of idling.
  const int64_t release = kT0 + kGrace + Aggregator::kIdleWindowsBeforeSketchRelease * kW;
  clock_.Set(release - 1);
  aggregator_->ExpireIdleSeries();
  ASSERT_TRUE(Merged(kT0, 0.5).has_value());
  clock_.Set(release);
  ASSERT_EQ(aggregator_->ExpireIdleSeries(), 0u);  // the series stay, their sketches go
  EXPECT_FALSE(Merged(kT0, 0.5).has_value());
  EXPECT_FALSE(Merged(kT0, 0.5, {1}).has_value());
  // The window's quantiles are still in history: only the merge is gone.
  EXPECT_THAT(AllWindows(), SizeIs(3));
}

TEST_F(MergedQuantileTest, IsAbsentWithASeriesWithoutQuantilesOrUnknown) {
  const auto plain = std::make_shared<const SeriesKey>(SeriesKey{"m", {{"rank", "3"}}});
  auto plain_id = aggregator_->Define(*plain, StatSpec{kAll, kW, 0, {}});
  ASSERT_TRUE(plain_id.ok());
  StatSpec histogram_only{kAll, kW, 0, {}};
  histogram_only.histogram = true;
  const auto histogram = std::make_shared<const SeriesKey>(SeriesKey{"m", {{"rank", "4"}}});
  auto histogram_id = aggregator_->Define(*histogram, histogram_only);
  ASSERT_TRUE(histogram_id.ok());
  for (int r = 0; r < 3; ++r) AddRank(r, kT0 + 10);
  AddAt(*plain_id, 5, kT0 + 10);
  AddAt(*histogram_id, 5, kT0 + 10);
  clock_.Set(kT0 + kW + kGrace);
  ASSERT_THAT(aggregator_->CloseDueWindows(), SizeIs(5));
  ASSERT_TRUE(Merged(kT0, 0.5).has_value());
  for (const auto& without : {plain, histogram}) {
    std::vector<std::shared_ptr<const SeriesKey>> keys = keys_;
    keys.push_back(without);
    EXPECT_FALSE(aggregator_->MergedQuantile(keys, kT0, 0.5).has_value()) << without->ToString();
  }
  const auto unknown = std::make_shared<const SeriesKey>(SeriesKey{"m", {{"rank", "9"}}});
  EXPECT_FALSE(aggregator_->MergedQuantile({unknown}, kT0, 0.5).has_value());
  EXPECT_FALSE(aggregator_->MergedQuantile({}, kT0, 0.5).has_value());
}

TEST_F(AggregatorTest, EachWindowEstimatesItsOwnQuantilesAndKeepsThemInHistory) {
  AggregatorOptions options = TestOptions();
  options.history_windows = 3;  // the ring wraps
  Reset(options);
  const SeriesId id = DefineWithQuantiles(*aggregator_, "q");
  // Window k holds 1..100 scaled by 10^k: its own samples only, although
  // the windows reuse one sketch.
  for (int k = 0; k < 5; ++k) {
    std::vector<double> values;
    std::vector<int64_t> stamps;
    for (int v = 1; v <= 100; ++v) {
      values.push_back(v * std::pow(10.0, k));
      stamps.push_back(Us(kT0 + k * kW + 10));
    }
    Add(id, values, stamps);
    clock_.Set(kT0 + (k + 1) * kW + kGrace);
    const auto closed = aggregator_->CloseDueWindows();
    ASSERT_THAT(closed, SizeIs(1));
    ASSERT_THAT(closed[0].quantiles, SizeIs(2));
    // Ranks floor(0.5·99) = 49 and floor(0.99·99) = 98: 50 and 99, scaled.
    EXPECT_NEAR(closed[0].quantiles[0].value, 50 * std::pow(10.0, k), 0.5 * std::pow(10.0, k));
    EXPECT_NEAR(closed[0].quantiles[1].value, 99 * std::pow(10.0, k), 0.99 * std::pow(10.0, k));
    EXPECT_EQ(closed[0].quantiles[1].quantile, 0.99);
  }
  // History keeps the last three windows, each with its own quantiles.
  const auto history = AllWindows();
  ASSERT_THAT(history, SizeIs(3));
  for (int i = 0; i < 3; ++i) {
    const double scale = std::pow(10.0, i + 2);
    ASSERT_THAT(history[i].quantiles, SizeIs(2));
    EXPECT_NEAR(history[i].quantiles[0].value, 50 * scale, 0.5 * scale) << i;
    EXPECT_NEAR(*history[i].Value(AggregateRef{Aggregation::kQuantile, 0.99}), 99 * scale,
                0.99 * scale)
        << i;
    EXPECT_FALSE(history[i].Value(AggregateRef{Aggregation::kQuantile, 0.9}).has_value());
  }
  // The exposition's view of the last window has the newest quantiles.
  aggregator_->ForEachSeries([](const Aggregator::SeriesView& s) {
    ASSERT_THAT(s.last_quantiles, SizeIs(2));
    EXPECT_NEAR(s.last_quantiles[1], 99 * 1e4, 0.99 * 1e4);
  });
}

TEST_F(AggregatorTest, OpenWindowsSideBySideKeepSeparateSketches) {
  const SeriesId id = DefineWithQuantiles(*aggregator_, "q");
  // Two windows open at once (within the grace): samples alternate.
  Add(id, {1, 1000, 2, 2000, 3, 3000},
      {Us(kT0 + 10), Us(kT0 + kW + 10), Us(kT0 + 20), Us(kT0 + kW + 20), Us(kT0 + 30),
       Us(kT0 + kW + 30)});
  clock_.Set(kT0 + 2 * kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(2));
  // p99 of 1, 2, 3 is rank floor(0.99·2) = 1: the 2, not a sample of the other window.
  EXPECT_NEAR(closed[0].quantiles[1].value, 2, 0.02);
  EXPECT_NEAR(closed[1].quantiles[0].value, 2000, 20);
}

TEST_F(AggregatorTest, SeriesWithoutQuantilesReportNone) {
  const SeriesId id = Define("plain");
  AddAt(id, 1, kT0 + 10);
  clock_.Set(kT0 + kW + kGrace);
  const auto closed = aggregator_->CloseDueWindows();
  ASSERT_THAT(closed, SizeIs(1));
  EXPECT_THAT(closed[0].quantiles, IsEmpty());
}

TEST_F(AggregatorTest, QuantilesArePartOfTheDefinition) {
  const SeriesKey key{"q", {{"rank", "0"}}};
  ASSERT_TRUE(aggregator_->Define(key, StatSpec{kAll, kW, 0, {0.5, 0.99}}).ok());
  EXPECT_TRUE(aggregator_->Define(key, StatSpec{kAll, kW, 0, {0.5, 0.99}}).ok());
  auto conflict = aggregator_->Define(key, StatSpec{kAll, kW, 0, {0.5}});
  ASSERT_TRUE(absl::IsAlreadyExists(conflict.status()));
  EXPECT_THAT(std::string(conflict.status().message()), HasSubstr("p50,p99]"));
  EXPECT_THAT(std::string(conflict.status().message()), HasSubstr("min,p50]"));
}

}  // namespace
}  // namespace torchmon::server

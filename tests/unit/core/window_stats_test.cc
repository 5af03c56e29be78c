// WindowStats and the value types of the core: the six aggregations, the cap,
// NaN and ±Inf, and the text forms used in error messages.
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "server/core/types.h"

namespace torchmon::server {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

WindowStats StatsOf(std::initializer_list<double> values, int64_t max_samples = 0) {
  WindowStats s;
  for (double v : values) s.Add(v, max_samples);
  return s;
}

TEST(WindowStatsTest, ComputesAllSixAggregationsOverAcceptedSamples) {
  // 3 + -1 + 4 + 1.5 = 7.5; 7.5 / 4 = 1.875.
  const WindowStats s = StatsOf({3, -1, 4, 1.5});
  EXPECT_EQ(s.Get(Aggregation::kCount), 4);
  EXPECT_EQ(s.Get(Aggregation::kSum), 7.5);
  EXPECT_EQ(s.Get(Aggregation::kMean), 1.875);
  EXPECT_EQ(s.Get(Aggregation::kMin), -1);
  EXPECT_EQ(s.Get(Aggregation::kMax), 4);
  EXPECT_EQ(s.Get(Aggregation::kValue), 1.5);
}

TEST(WindowStatsTest, ValueIsTheLastSampleAddedNotTheLargest) {
  const WindowStats s = StatsOf({9, 2, 7});
  EXPECT_EQ(s.Get(Aggregation::kValue), 7);
}

TEST(WindowStatsTest, SingleNegativeSampleIsBothMinAndMax) {
  const WindowStats s = StatsOf({-5});
  EXPECT_EQ(s.Get(Aggregation::kMin), -5);
  EXPECT_EQ(s.Get(Aggregation::kMax), -5);
}

TEST(WindowStatsTest, AcceptsFirstMaxSamplesAndCapsTheRest) {
  WindowStats s;
  EXPECT_TRUE(s.Add(10, 2));
  EXPECT_TRUE(s.Add(20, 2));
  EXPECT_FALSE(s.Add(1000, 2));
  EXPECT_FALSE(s.Add(-1000, 2));
  EXPECT_EQ(s.accepted, 2u);
  EXPECT_EQ(s.capped, 2u);
  // Capped samples leave no trace in the aggregates.
  EXPECT_EQ(s.Get(Aggregation::kSum), 30);
  EXPECT_EQ(s.Get(Aggregation::kMean), 15);  // 30 / 2 accepted, not / 4 sent
  EXPECT_EQ(s.Get(Aggregation::kMax), 20);
  EXPECT_EQ(s.Get(Aggregation::kMin), 10);
  EXPECT_EQ(s.Get(Aggregation::kValue), 20);
}

TEST(WindowStatsTest, ZeroMaxSamplesMeansUnlimited) {
  WindowStats s;
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(s.Add(i, 0));
  EXPECT_EQ(s.accepted, 1000u);
  EXPECT_EQ(s.capped, 0u);
  EXPECT_EQ(s.Get(Aggregation::kSum), 999.0 * 1000.0 / 2.0);
}

TEST(WindowStatsTest, NaNPropagatesToSumMeanMinAndMax) {
  const WindowStats s = StatsOf({1, kNaN, 3});
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kSum)));
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMean)));
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMin)));
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMax)));
  EXPECT_EQ(s.Get(Aggregation::kCount), 3);
  // VALUE is the last sample, and the last one was finite.
  EXPECT_EQ(s.Get(Aggregation::kValue), 3);
}

TEST(WindowStatsTest, NaNAsLastSampleIsTheValue) {
  const WindowStats s = StatsOf({1, 2, kNaN});
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kValue)));
}

TEST(WindowStatsTest, NaNFirstStillMakesMinAndMaxNaN) {
  // A NaN never compares, so a naive min/max would skip it and report 5.
  const WindowStats s = StatsOf({kNaN, 5});
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMin)));
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMax)));
}

TEST(WindowStatsTest, CappedNaNDoesNotPoisonTheWindow) {
  WindowStats s;
  s.Add(1, 1);
  s.Add(kNaN, 1);  // capped
  EXPECT_EQ(s.Get(Aggregation::kMax), 1);
  EXPECT_EQ(s.Get(Aggregation::kSum), 1);
}

TEST(WindowStatsTest, PositiveInfinityPropagatesToMaxSumAndMean) {
  const WindowStats s = StatsOf({1, kInf, 2});
  EXPECT_EQ(s.Get(Aggregation::kMax), kInf);
  EXPECT_EQ(s.Get(Aggregation::kSum), kInf);
  EXPECT_EQ(s.Get(Aggregation::kMean), kInf);
  EXPECT_EQ(s.Get(Aggregation::kMin), 1);
}

TEST(WindowStatsTest, NegativeInfinityPropagatesToMinSumAndMean) {
  const WindowStats s = StatsOf({1, -kInf});
  EXPECT_EQ(s.Get(Aggregation::kMin), -kInf);
  EXPECT_EQ(s.Get(Aggregation::kSum), -kInf);
  EXPECT_EQ(s.Get(Aggregation::kMean), -kInf);
  EXPECT_EQ(s.Get(Aggregation::kMax), 1);
  EXPECT_EQ(s.Get(Aggregation::kValue), -kInf);
}

TEST(WindowStatsTest, OppositeInfinitiesSumToNaNButKeepMinAndMax) {
  const WindowStats s = StatsOf({kInf, -kInf});
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kSum)));
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMean)));
  EXPECT_EQ(s.Get(Aggregation::kMax), kInf);
  EXPECT_EQ(s.Get(Aggregation::kMin), -kInf);
}

TEST(WindowStatsTest, MeanOfAnEmptyWindowIsNaNNotZero) {
  const WindowStats s;
  EXPECT_TRUE(std::isnan(s.Get(Aggregation::kMean)));
  EXPECT_EQ(s.Get(Aggregation::kCount), 0);
}

TEST(AggregationTest, NamesAreLowerCase) {
  EXPECT_STREQ(AggregationName(Aggregation::kValue), "value");
  EXPECT_STREQ(AggregationName(Aggregation::kMean), "mean");
  EXPECT_STREQ(AggregationName(Aggregation::kCount), "count");
  EXPECT_STREQ(AggregationName(Aggregation::kSum), "sum");
  EXPECT_STREQ(AggregationName(Aggregation::kMax), "max");
  EXPECT_STREQ(AggregationName(Aggregation::kMin), "min");
}

TEST(AggregationTest, SetContainsOnlyTheAddedAggregations) {
  const AggregationSet set = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMin);
  EXPECT_TRUE(Contains(set, Aggregation::kMean));
  EXPECT_TRUE(Contains(set, Aggregation::kMin));
  EXPECT_FALSE(Contains(set, Aggregation::kValue));
  EXPECT_FALSE(Contains(set, Aggregation::kCount));
  EXPECT_FALSE(Contains(set, Aggregation::kSum));
  EXPECT_FALSE(Contains(set, Aggregation::kMax));
}

TEST(StatSpecTest, ToStringListsAggregationsWindowAndCap) {
  StatSpec spec;
  spec.aggregations = AggregationBit(Aggregation::kMax) | AggregationBit(Aggregation::kMean);
  spec.window_ms = 1000;
  EXPECT_EQ(spec.ToString(), "aggregations=[mean,max] window=1s max_samples=unlimited");
  spec.window_ms = 1500;
  spec.max_samples = 7;
  EXPECT_EQ(spec.ToString(), "aggregations=[mean,max] window=1500ms max_samples=7");
}

TEST(StatSpecTest, SpecsDifferingInAnyFieldAreNotEqual) {
  StatSpec a{AggregationBit(Aggregation::kSum), 1000, 0, {}};
  StatSpec b = a;
  EXPECT_EQ(a, b);
  b.max_samples = 1;
  EXPECT_NE(a, b);
  b = a;
  b.window_ms = 2000;
  EXPECT_NE(a, b);
  b = a;
  b.aggregations |= AggregationBit(Aggregation::kMin);
  EXPECT_NE(a, b);
}

TEST(SeriesKeyTest, ToStringShowsNameAndLabels) {
  const SeriesKey key{"train.loss", {{"job", "j1"}, {"rank", "0"}}};
  EXPECT_EQ(key.ToString(), "train.loss{job=\"j1\",rank=\"0\"}");
}

TEST(SeriesKeyTest, OrdersByNameThenLabels) {
  const SeriesKey a{"a", {{"rank", "1"}}};
  const SeriesKey b{"b", {{"rank", "0"}}};
  const SeriesKey a0{"a", {{"rank", "0"}}};
  EXPECT_LT(a, b);
  EXPECT_LT(a0, a);
  EXPECT_FALSE(a == a0);
}

}  // namespace
}  // namespace torchmon::server

// CompareRanks: grouping, window choice, ordering, spread, missing ranks.
#include "server/core/rank_comparison.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

constexpr double kRankNaN = std::numeric_limits<double>::quiet_NaN();

class RankComparisonTest : public ::testing::Test {
 protected:
  // A series of `stat` for `rank` (labels job, host, local_rank too).
  std::shared_ptr<const SeriesKey> AddSeries(const std::string& stat, const std::string& rank,
                                             const std::string& job = "a",
                                             AggregationSet aggs = AggregationBit(
                                                 Aggregation::kMean) |
                                                 AggregationBit(Aggregation::kMax)) {
    SeriesSnapshot s;
    s.key = std::make_shared<SeriesKey>(SeriesKey{
        stat, Labels{{"host", "h" + rank}, {"job", job}, {"local_rank", rank}, {"rank", rank}}});
    s.spec.aggregations = aggs;
    s.spec.window_ms = 1000;
    series_.push_back(s);
    return s.key;
  }
  void AddWindow(const std::shared_ptr<const SeriesKey>& key, int64_t start_ms,
                 std::initializer_list<double> values) {
    ClosedWindow w;
    w.series = key;
    w.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax);
    w.start_ms = start_ms;
    w.end_ms = start_ms + 1000;
    for (double v : values) w.stats.Add(v, 0);
    windows_.push_back(w);
  }
  std::vector<RankComparison> Compare(RankComparisonOptions options = {}) {
    return CompareRanks(series_, windows_, options);
  }

  std::vector<SeriesSnapshot> series_;
  std::vector<ClosedWindow> windows_;
};

std::vector<std::string> Ranks(const RankComparison& c) {
  std::vector<std::string> out;
  for (const RankEntry& r : c.ranks) out.push_back(r.rank);
  return out;
}

TEST_F(RankComparisonTest, NewestWindowSlowestFirstAndTheSpread) {
  const auto r0 = AddSeries("step_ms", "0");
  const auto r1 = AddSeries("step_ms", "1");
  const auto r2 = AddSeries("step_ms", "2");
  const auto r3 = AddSeries("step_ms", "3");
  AddWindow(r0, 1000, {100});
  AddWindow(r0, 2000, {100, 102});  // mean 101
  AddWindow(r1, 2000, {150});
  AddWindow(r2, 2000, {99});
  AddWindow(r3, 1000, {500});  // behind: no window at 2000
  auto comparisons = Compare();
  ASSERT_EQ(comparisons.size(), 1u);
  const RankComparison& c = comparisons[0];
  EXPECT_EQ(c.stat, "step_ms");
  EXPECT_EQ(c.labels, (Labels{{"job", "a"}}));
  EXPECT_EQ(c.start_ms, 2000);
  EXPECT_EQ(c.end_ms, 3000);
  EXPECT_THAT(Ranks(c), ElementsAre("1", "0", "2"));
  EXPECT_EQ(c.ranks[1].value, 101);
  EXPECT_EQ(c.ranks[1].accepted, 2u);
  EXPECT_THAT(c.missing, ElementsAre("3"));
  EXPECT_EQ(c.min, 99);
  EXPECT_EQ(c.max, 150);
  EXPECT_EQ(c.median, 101);
  EXPECT_EQ(c.slowest_rank, "1");
  EXPECT_DOUBLE_EQ(c.max_over_median, 150.0 / 101.0);
}

TEST_F(RankComparisonTest, AnAskedWindowAnotherAggregationAndAnEvenMedian) {
  const auto r0 = AddSeries("step_ms", "0");
  const auto r1 = AddSeries("step_ms", "1");
  AddWindow(r0, 1000, {1, 9});
  AddWindow(r1, 1000, {4});
  AddWindow(r0, 2000, {1000});
  RankComparisonOptions options;
  options.window_start_ms = 1000;
  options.aggregate.aggregation = Aggregation::kMax;
  auto c = Compare(options);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].start_ms, 1000);
  EXPECT_THAT(Ranks(c[0]), ElementsAre("0", "1"));
  EXPECT_EQ(c[0].max, 9);
  EXPECT_EQ(c[0].median, 6.5);
  EXPECT_THAT(c[0].missing, IsEmpty());
}

TEST_F(RankComparisonTest, GroupsByStatAndSharedLabelsAndSkipsWhatCannotCompare) {
  const auto a0 = AddSeries("loss", "0", "a");
  const auto b0 = AddSeries("loss", "0", "b");
  const auto no_mean = AddSeries("loss", "1", "a", AggregationBit(Aggregation::kMax));
  AddWindow(a0, 1000, {1});
  AddWindow(b0, 1000, {2});
  AddWindow(no_mean, 1000, {3});
  SeriesSnapshot unranked;
  unranked.key = std::make_shared<SeriesKey>(SeriesKey{"loss", Labels{{"job", "a"}}});
  unranked.spec.aggregations = AggregationBit(Aggregation::kMean);
  series_.push_back(unranked);
  AddWindow(unranked.key, 1000, {4});
  auto c = Compare();
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].labels, (Labels{{"job", "a"}}));
  EXPECT_THAT(Ranks(c[0]), ElementsAre("0"));  // rank 1 lacks MEAN, the unranked series no rank
  EXPECT_EQ(c[1].labels, (Labels{{"job", "b"}}));
  RankComparisonOptions by_host;
  by_host.rank_label = "host";
  auto hosts = Compare(by_host);
  ASSERT_EQ(hosts.size(), 2u);
  EXPECT_EQ(hosts[0].ranks[0].rank, "h0");
}

TEST_F(RankComparisonTest, NaNValuesGoLastAndStayOutOfTheSpread) {
  const auto r0 = AddSeries("loss", "0");
  const auto r1 = AddSeries("loss", "1");
  const auto r2 = AddSeries("loss", "2");
  AddWindow(r0, 1000, {2});
  AddWindow(r1, 1000, {kRankNaN});
  AddWindow(r2, 1000, {4});
  auto c = Compare();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_THAT(Ranks(c[0]), ElementsAre("2", "0", "1"));
  EXPECT_TRUE(std::isnan(c[0].ranks[2].value));
  EXPECT_TRUE(std::isnan(c[0].ranks[2].score));
  EXPECT_FALSE(c[0].ranks[2].straggler);
  EXPECT_EQ(c[0].max, 4);
  EXPECT_EQ(c[0].median, 3);
  EXPECT_EQ(c[0].slowest_rank, "2");
}

TEST_F(RankComparisonTest, NothingToCompareWithoutAClosedWindow) {
  AddSeries("loss", "0");
  EXPECT_THAT(Compare(), IsEmpty());
  const auto r0 = AddSeries("x", "0");
  AddWindow(r0, 1000, {kRankNaN});
  auto c = Compare();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_TRUE(std::isnan(c[0].max));
  EXPECT_TRUE(std::isnan(c[0].max_over_median));
  EXPECT_EQ(c[0].slowest_rank, "");
  RankComparisonOptions absent;
  absent.window_start_ms = 5000;
  EXPECT_THAT(Compare(absent), IsEmpty());
}


// Each rank's ratio to the median and its straggler score: (value - median)
// / max(1.4826 MAD, 5 % of the median).
TEST_F(RankComparisonTest, TheScoreIsTheDistanceAboveTheMedianInRobustDeviations) {
  const double values[] = {100, 104, 130, 96, 102, 98};
  for (int i = 0; i < 6; ++i) AddWindow(AddSeries("compute_s", std::to_string(i)), 1000, {values[i]});
  auto comparisons = Compare();
  ASSERT_EQ(comparisons.size(), 1u);
  const RankComparison& c = comparisons[0];
  EXPECT_DOUBLE_EQ(c.median, 101);
  // |v - 101|: 1 3 29 5 1 3 -> sorted 1 1 3 3 5 29 -> MAD 3.
  EXPECT_DOUBLE_EQ(c.mad, 3);
  const double spread = std::max(1.4826 * 3, 0.05 * 101);  // the floor: 5.05
  ASSERT_EQ(c.ranks[0].rank, "2");
  EXPECT_DOUBLE_EQ(c.ranks[0].ratio, 130.0 / 101);
  EXPECT_DOUBLE_EQ(c.ranks[0].score, 29 / spread);
  EXPECT_TRUE(c.ranks[0].straggler);
  EXPECT_THAT(c.stragglers, ElementsAre("2"));
  // 104: 0.59 deviations above, 1.03x: no straggler; below the median, negative.
  EXPECT_DOUBLE_EQ(c.ranks[1].score, 3 / spread);
  EXPECT_FALSE(c.ranks[1].straggler);
  EXPECT_LT(c.ranks.back().score, 0);
}

// A spread wider than the floor: a rank 1.25x the median of ranks that
// vary by +-15 % is no straggler (score under 3), though over 1.2x.
TEST_F(RankComparisonTest, NoStragglerAmongRanksThatVaryAsMuchAsItStandsOut) {
  const double values[] = {85, 100, 115, 90, 110, 125, 100};
  for (int i = 0; i < 7; ++i) AddWindow(AddSeries("compute_s", std::to_string(i)), 1000, {values[i]});
  const RankComparison c = Compare()[0];
  EXPECT_DOUBLE_EQ(c.median, 100);
  EXPECT_DOUBLE_EQ(c.mad, 10);  // 15 0 15 10 10 25 0 -> 0 0 10 10 15 15 25
  EXPECT_EQ(c.ranks[0].rank, "5");
  EXPECT_DOUBLE_EQ(c.ranks[0].ratio, 1.25);
  EXPECT_NEAR(c.ranks[0].score, 25 / 14.826, 1e-12);
  EXPECT_FALSE(c.ranks[0].straggler);
  EXPECT_THAT(c.stragglers, IsEmpty());
}

// Both thresholds bind: 3.6 deviations above ranks alike to 0.1 % (the
// floor, 5 % of the median, is the spread) but only 1.18x the median is no
// straggler; two stragglers are both named, highest score first.
TEST_F(RankComparisonTest, AStragglerNeedsBothTheScoreAndTheRatio) {
  const double values[] = {100, 100.1, 99.9, 118, 100};
  for (int i = 0; i < 5; ++i) AddWindow(AddSeries("a", std::to_string(i)), 1000, {values[i]});
  const double two[] = {100, 160, 100, 140, 101, 99, 100};
  for (int i = 0; i < 7; ++i) AddWindow(AddSeries("b", std::to_string(i)), 1000, {two[i]});
  auto comparisons = Compare();
  ASSERT_EQ(comparisons.size(), 2u);
  EXPECT_GT(comparisons[0].ranks[0].score, 3);
  EXPECT_THAT(comparisons[0].stragglers, IsEmpty());
  EXPECT_THAT(comparisons[1].stragglers, ElementsAre("1", "3"));
}

// Equal ranks of value 0: no spread, so no score (NaN) and no straggler.
TEST_F(RankComparisonTest, RanksAllZeroHaveNoScore) {
  for (int i = 0; i < 3; ++i) AddWindow(AddSeries("z", std::to_string(i)), 1000, {0});
  const RankComparison c = Compare()[0];
  EXPECT_TRUE(std::isnan(c.ranks[0].score));
  EXPECT_TRUE(std::isnan(c.ranks[0].ratio));
  EXPECT_THAT(c.stragglers, IsEmpty());
}

}  // namespace
}  // namespace torchmon::server

// CompareRanks: grouping, window choice, ordering, spread, missing ranks.
#include "server/core/rank_comparison.h"

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

}  // namespace
}  // namespace torchmon::server

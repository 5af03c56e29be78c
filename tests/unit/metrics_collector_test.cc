// The Prometheus exposition, rendered with prometheus-cpp's TextSerializer
// exactly as a scrape would see it.
#include "server/service/metrics_collector.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "prometheus/text_serializer.h"
#include "server/core/clock.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::Optional;

constexpr int64_t kT0 = 1'700'000'000'000;  // ms
constexpr int64_t kGrace = 2000;

constexpr AggregationSet Aggs(std::initializer_list<Aggregation> list) {
  AggregationSet set = 0;
  for (Aggregation a : list) set |= AggregationBit(a);
  return set;
}

// The value of the sample line `series` (metric name plus labels, exactly as
// rendered), or nullopt if there is no such line.
std::optional<double> ValueOf(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.compare(0, series.size() + 1, series + " ") == 0) {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return std::nullopt;
}

class MetricsCollectorTest : public ::testing::Test {
 protected:
  static AggregatorOptions Options() {
    AggregatorOptions o;
    o.grace_ms = kGrace;
    o.series_ttl_ms = 10'000;
    o.max_future_skew_ms = 60'000;
    return o;
  }

  std::string Scrape() const {
    return prometheus::TextSerializer().Serialize(collector_.Collect());
  }

  SeriesId Define(const std::string& name, AggregationSet aggregations, int64_t max_samples = 0,
                  Labels labels = {{"rank", "0"}}) {
    auto id = aggregator_.Define(SeriesKey{name, std::move(labels)},
                                 StatSpec{aggregations, 1000, max_samples});
    EXPECT_TRUE(id.ok()) << id.status();
    return id.value_or(0);
  }

  void Add(SeriesId id, std::vector<double> values, int64_t ms) {
    const std::vector<int64_t> timestamps(values.size(), ms * 1000);
    ASSERT_TRUE(aggregator_.AddSamples(id, values, timestamps).ok());
  }

  void CloseWindowsEndingBy(int64_t end_ms) {
    clock_.Set(end_ms + kGrace);
    aggregator_.CloseDueWindows();
  }

  ManualClock clock_{kT0};
  Aggregator aggregator_{Options(), clock_};
  EventLog events_{100, 10'000, clock_};
  DaemonStats stats_;
  MetricsCollector collector_{aggregator_, events_, stats_, "1.2.3"};
};

TEST_F(MetricsCollectorTest, NoStatLineBeforeAWindowHasClosed) {
  Add(Define("train.loss", Aggs({Aggregation::kMean})), {1}, kT0);
  const std::string text = Scrape();
  EXPECT_THAT(text, Not(HasSubstr("torchmon_stat{")));
  EXPECT_THAT(text, Not(HasSubstr("torchmon_window_accepted_samples{")));
  // The series itself is visible, with its running counter.
  EXPECT_THAT(ValueOf(text, "torchmon_samples_accepted_total{stat=\"train.loss\",rank=\"0\"}"),
              Optional(1.0));
}

TEST_F(MetricsCollectorTest, StatLineShowsEachRequestedAggregationOfTheLastClosedWindow) {
  const SeriesId id = Define("train.loss", Aggs({Aggregation::kMean, Aggregation::kMax}));
  Add(id, {1, 4}, kT0 + 10);  // mean (1 + 4) / 2 = 2.5, max 4
  CloseWindowsEndingBy(kT0 + 1000);
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("# TYPE torchmon_stat gauge"));
  EXPECT_THAT(text, HasSubstr("torchmon_stat{stat=\"train.loss\",agg=\"mean\",rank=\"0\"} 2.5\n"));
  EXPECT_THAT(ValueOf(text, "torchmon_stat{stat=\"train.loss\",agg=\"max\",rank=\"0\"}"),
              Optional(4.0));
  EXPECT_THAT(text, Not(HasSubstr("agg=\"sum\"")));
  EXPECT_THAT(text, Not(HasSubstr("agg=\"value\"")));
}

TEST_F(MetricsCollectorTest, StatLineFollowsTheNewestClosedWindow) {
  const SeriesId id = Define("s", Aggs({Aggregation::kSum}));
  Add(id, {1}, kT0);
  Add(id, {2, 3}, kT0 + 1000);
  CloseWindowsEndingBy(kT0 + 2000);
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_stat{stat=\"s\",agg=\"sum\",rank=\"0\"}"),
              Optional(5.0));
}

TEST_F(MetricsCollectorTest, NaNInAWindowIsVisibleInTheScrape) {
  const SeriesId id = Define("train.loss", Aggs({Aggregation::kMean}));
  Add(id, {1, std::numeric_limits<double>::quiet_NaN()}, kT0);
  CloseWindowsEndingBy(kT0 + 1000);
  auto v = ValueOf(Scrape(), "torchmon_stat{stat=\"train.loss\",agg=\"mean\",rank=\"0\"}");
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(std::isnan(*v));
}

TEST_F(MetricsCollectorTest, WindowGaugesShowAcceptedCappedAndEnd) {
  const SeriesId id = Define("s", Aggs({Aggregation::kCount}), /*max_samples=*/2);
  Add(id, {1, 2, 3}, kT0 + 1);
  CloseWindowsEndingBy(kT0 + 1000);
  const std::string text = Scrape();
  EXPECT_THAT(ValueOf(text, "torchmon_window_accepted_samples{stat=\"s\",rank=\"0\"}"),
              Optional(2.0));
  EXPECT_THAT(ValueOf(text, "torchmon_window_capped_samples{stat=\"s\",rank=\"0\"}"),
              Optional(1.0));
  // End of [kT0, kT0 + 1 s) in Unix seconds.
  EXPECT_THAT(ValueOf(text, "torchmon_window_end_timestamp_seconds{stat=\"s\",rank=\"0\"}"),
              Optional(1'700'000'001.0));
  EXPECT_THAT(ValueOf(text, "torchmon_window_size_seconds{stat=\"s\",rank=\"0\"}"),
              Optional(1.0));
}

TEST_F(MetricsCollectorTest, DroppedSamplesAreCountedByReason) {
  const SeriesId id = Define("s", Aggs({Aggregation::kCount}), /*max_samples=*/1);
  Add(id, {1, 2}, kT0);                // 1 accepted, 1 capped
  Add(id, {3, 4}, kT0 - 10'000);       // 2 late
  Add(id, {5, 6, 7}, kT0 + 120'000);   // 3 skewed
  ASSERT_TRUE(aggregator_.AddClientDrops(id, 4).ok());
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("# TYPE torchmon_samples_dropped_total counter"));
  const std::string prefix = "torchmon_samples_dropped_total{stat=\"s\",rank=\"0\",reason=";
  EXPECT_THAT(ValueOf(text, prefix + "\"capped\"}"), Optional(1.0));
  EXPECT_THAT(ValueOf(text, prefix + "\"late\"}"), Optional(2.0));
  EXPECT_THAT(ValueOf(text, prefix + "\"skewed\"}"), Optional(3.0));
  EXPECT_THAT(ValueOf(text, prefix + "\"client\"}"), Optional(4.0));
  EXPECT_THAT(ValueOf(text, "torchmon_samples_accepted_total{stat=\"s\",rank=\"0\"}"),
              Optional(1.0));
}

TEST_F(MetricsCollectorTest, StatNameWithDotsAndSpacesIsKeptVerbatimAsALabelValue) {
  const SeriesId id = Define("my loss.v2 (ema)/gpu:0", Aggs({Aggregation::kValue}));
  Add(id, {3}, kT0);
  CloseWindowsEndingBy(kT0 + 1000);
  EXPECT_THAT(
      ValueOf(Scrape(), "torchmon_stat{stat=\"my loss.v2 (ema)/gpu:0\",agg=\"value\",rank=\"0\"}"),
      Optional(3.0));
}

TEST_F(MetricsCollectorTest, QuoteInAStatNameIsEscaped) {
  Define("say \"hi\"", Aggs({Aggregation::kValue}));
  EXPECT_THAT(Scrape(), HasSubstr("stat=\"say \\\"hi\\\"\""));
}

TEST_F(MetricsCollectorTest, EventsAreCountedAndTheirNumericFieldsShown) {
  for (double loss : {0.75, 0.5}) {
    EventRecord e;
    e.name = "epoch_end";
    e.labels = {{"rank", "0"}};
    e.data = {{"loss", loss}, {"phase", std::string("train")}};
    events_.Append(e);
  }
  const std::string text = Scrape();
  EXPECT_THAT(ValueOf(text, "torchmon_events_total{event=\"epoch_end\",rank=\"0\"}"),
              Optional(2.0));
  EXPECT_THAT(ValueOf(text, "torchmon_event_value{event=\"epoch_end\",field=\"loss\",rank=\"0\"}"),
              Optional(0.5));
  EXPECT_THAT(text, Not(HasSubstr("field=\"phase\"")));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_events_retained"), Optional(2.0));
}

TEST_F(MetricsCollectorTest, DaemonSeriesGaugeCountsSeriesInMemory) {
  Define("a", Aggs({Aggregation::kSum}));
  Define("b", Aggs({Aggregation::kSum}));
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_daemon_series"), Optional(2.0));
}

TEST_F(MetricsCollectorTest, ExpiredSeriesLeavesTheScrape) {
  Define("gone", Aggs({Aggregation::kSum}));
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_.ExpireIdleSeries(), 1u);
  const std::string text = Scrape();
  EXPECT_THAT(text, Not(HasSubstr("stat=\"gone\"")));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_series"), Optional(0.0));
}

TEST_F(MetricsCollectorTest, DaemonCountersReflectDaemonStats) {
  stats_.samples_refused = 17;
  stats_.batches_received = 3;
  const std::string text = Scrape();
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_samples_refused_total"), Optional(17.0));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_batches_total"), Optional(3.0));
}

TEST_F(MetricsCollectorTest, BuildInfoNamesTheVersion) {
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_daemon_build_info{version=\"1.2.3\"}"), Optional(1.0));
}

}  // namespace
}  // namespace torchmon::server

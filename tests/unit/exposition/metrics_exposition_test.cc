// The Prometheus exposition, rendered exactly as a scrape sees it.
#include "server/exposition/metrics_exposition.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <optional>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "absl/strings/str_cat.h"
#include "server/core/clock.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/delimited_message_util.h"
#include "io/prometheus/client/metrics.pb.h"
#include "server/core/native_histogram.h"
#include "server/exposition/self_metrics.h"

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

class MetricsExpositionTest : public ::testing::Test {
 protected:
  static AggregatorOptions Options() {
    AggregatorOptions o;
    o.grace_ms = kGrace;
    o.series_ttl_ms = 10'000;
    o.max_future_skew_ms = 60'000;
    return o;
  }

  std::string Scrape() const { return exposition_.RenderToString(); }

  SeriesId Define(const std::string& name, AggregationSet aggregations, int64_t max_samples = 0,
                  Labels labels = {{"rank", "0"}}) {
    auto id = aggregator_.Define(SeriesKey{name, std::move(labels)},
                                 StatSpec{aggregations, 1000, max_samples, {}});
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
  MetricsExposition exposition_{aggregator_, events_, stats_, "1.2.3"};
};

TEST_F(MetricsExpositionTest, NoStatLineBeforeAWindowHasClosed) {
  Add(Define("train.loss", Aggs({Aggregation::kMean})), {1}, kT0);
  const std::string text = Scrape();
  EXPECT_THAT(text, Not(HasSubstr("torchmon_stat{")));
  EXPECT_THAT(text, Not(HasSubstr("torchmon_window_accepted_samples{")));
  // The series itself is visible, with its running counter.
  EXPECT_THAT(ValueOf(text, "torchmon_samples_accepted_total{stat=\"train.loss\",rank=\"0\"}"),
              Optional(1.0));
}

TEST_F(MetricsExpositionTest, StatLineShowsEachRequestedAggregationOfTheLastClosedWindow) {
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

TEST_F(MetricsExpositionTest, QuantilesAreStatLinesNamedByTheirPercentage) {
  auto id = aggregator_.Define(SeriesKey{"step", {{"rank", "0"}}},
                               StatSpec{Aggs({Aggregation::kMean}), 1000, 0, {0.5, 0.999}});
  ASSERT_TRUE(id.ok());
  std::vector<double> values;
  for (int v = 1; v <= 1000; ++v) values.push_back(v);
  Add(*id, values, kT0 + 10);
  CloseWindowsEndingBy(kT0 + 1000);
  const std::string text = Scrape();
  // Ranks floor(0.5·999) = 499 and floor(0.999·999) = 998: 500 and 999.
  const auto p50 = ValueOf(text, "torchmon_stat{stat=\"step\",agg=\"p50\",rank=\"0\"}");
  const auto p999 = ValueOf(text, "torchmon_stat{stat=\"step\",agg=\"p99.9\",rank=\"0\"}");
  ASSERT_TRUE(p50.has_value()) << text;
  ASSERT_TRUE(p999.has_value()) << text;
  EXPECT_NEAR(*p50, 500, 5);
  EXPECT_NEAR(*p999, 999, 9.99);
  EXPECT_THAT(ValueOf(text, "torchmon_stat{stat=\"step\",agg=\"mean\",rank=\"0\"}"),
              Optional(500.5));
  EXPECT_THAT(text, Not(HasSubstr("agg=\"p99\"")));
}

TEST_F(MetricsExpositionTest, StatLineFollowsTheNewestClosedWindow) {
  const SeriesId id = Define("s", Aggs({Aggregation::kSum}));
  Add(id, {1}, kT0);
  Add(id, {2, 3}, kT0 + 1000);
  CloseWindowsEndingBy(kT0 + 2000);
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_stat{stat=\"s\",agg=\"sum\",rank=\"0\"}"),
              Optional(5.0));
}

TEST_F(MetricsExpositionTest, NaNInAWindowIsVisibleInTheScrape) {
  const SeriesId id = Define("train.loss", Aggs({Aggregation::kMean}));
  Add(id, {1, std::numeric_limits<double>::quiet_NaN()}, kT0);
  CloseWindowsEndingBy(kT0 + 1000);
  auto v = ValueOf(Scrape(), "torchmon_stat{stat=\"train.loss\",agg=\"mean\",rank=\"0\"}");
  ASSERT_TRUE(v.has_value());
  EXPECT_TRUE(std::isnan(*v));
}

TEST_F(MetricsExpositionTest, WindowGaugesShowAcceptedCappedAndEnd) {
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

TEST_F(MetricsExpositionTest, DroppedSamplesAreCountedByReason) {
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

TEST_F(MetricsExpositionTest, StatNameWithDotsAndSpacesIsKeptVerbatimAsALabelValue) {
  const SeriesId id = Define("my loss.v2 (ema)/gpu:0", Aggs({Aggregation::kValue}));
  Add(id, {3}, kT0);
  CloseWindowsEndingBy(kT0 + 1000);
  EXPECT_THAT(
      ValueOf(Scrape(), "torchmon_stat{stat=\"my loss.v2 (ema)/gpu:0\",agg=\"value\",rank=\"0\"}"),
      Optional(3.0));
}

TEST_F(MetricsExpositionTest, QuoteInAStatNameIsEscaped) {
  Define("say \"hi\"", Aggs({Aggregation::kValue}));
  EXPECT_THAT(Scrape(), HasSubstr("stat=\"say \\\"hi\\\"\""));
}

TEST_F(MetricsExpositionTest, EventsAreCountedAndTheirNumericFieldsShown) {
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

TEST_F(MetricsExpositionTest, DaemonSeriesGaugeCountsSeriesInMemory) {
  Define("a", Aggs({Aggregation::kSum}));
  Define("b", Aggs({Aggregation::kSum}));
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_daemon_series"), Optional(2.0));
}

TEST_F(MetricsExpositionTest, ExpiredSeriesLeavesTheScrape) {
  Define("gone", Aggs({Aggregation::kSum}));
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_.ExpireIdleSeries(), 1u);
  const std::string text = Scrape();
  EXPECT_THAT(text, Not(HasSubstr("stat=\"gone\"")));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_series"), Optional(0.0));
}

TEST_F(MetricsExpositionTest, DaemonCountersReflectDaemonStats) {
  stats_.samples_refused = 17;
  stats_.batches_received = 3;
  const std::string text = Scrape();
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_samples_refused_total"), Optional(17.0));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_batches_total"), Optional(3.0));
}

TEST_F(MetricsExpositionTest, BuildInfoNamesTheVersion) {
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_daemon_build_info{version=\"1.2.3\"}"), Optional(1.0));
}

TEST_F(MetricsExpositionTest, NaNAndInfinitiesAreSpelledAsTheFormatDefinesThem) {
  const SeriesId nan = Define("nan", Aggs({Aggregation::kValue}));
  const SeriesId inf = Define("inf", Aggs({Aggregation::kMax, Aggregation::kMin}));
  Add(nan, {std::numeric_limits<double>::quiet_NaN()}, kT0);
  Add(inf, {std::numeric_limits<double>::infinity(), -std::numeric_limits<double>::infinity()},
      kT0);
  CloseWindowsEndingBy(kT0 + 1000);
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("torchmon_stat{stat=\"nan\",agg=\"value\",rank=\"0\"} NaN\n"));
  EXPECT_THAT(text, HasSubstr("torchmon_stat{stat=\"inf\",agg=\"max\",rank=\"0\"} +Inf\n"));
  EXPECT_THAT(text, HasSubstr("torchmon_stat{stat=\"inf\",agg=\"min\",rank=\"0\"} -Inf\n"));
}

TEST_F(MetricsExpositionTest, LargeCountsArePrintedAsPlainIntegers) {
  const SeriesId id = Define("s", Aggs({Aggregation::kCount}));
  const std::vector<double> values(1'000'000, 1.0);
  Add(id, values, kT0);
  EXPECT_THAT(Scrape(),
              HasSubstr("torchmon_samples_accepted_total{stat=\"s\",rank=\"0\"} 1000000\n"));
}

TEST_F(MetricsExpositionTest, ValuesParseBackToTheSameDouble) {
  const SeriesId id = Define("s", Aggs({Aggregation::kMean}));
  Add(id, {1.0, 0.0, 0.0}, kT0);  // mean 1/3
  CloseWindowsEndingBy(kT0 + 1000);
  EXPECT_THAT(ValueOf(Scrape(), "torchmon_stat{stat=\"s\",agg=\"mean\",rank=\"0\"}"),
              Optional(1.0 / 3.0));
}

TEST_F(MetricsExpositionTest, BackslashAndNewlineInALabelValueAreEscaped) {
  Define("s", Aggs({Aggregation::kSum}), 0, {{"path", "C:\\tmp\nx"}});
  EXPECT_THAT(Scrape(), HasSubstr("path=\"C:\\\\tmp\\nx\""));
}

TEST_F(MetricsExpositionTest, EachSeriesKeepsItsOwnLabelsWhenRanksInterleave) {
  for (int i = 0; i < 6; ++i) {
    const SeriesId id = Define("s" + std::to_string(i / 2), Aggs({Aggregation::kSum}), 0,
                               {{"rank", std::to_string(i % 2)}});
    Add(id, {static_cast<double>(i)}, kT0);
  }
  const std::string text = Scrape();
  for (int i = 0; i < 6; ++i) {
    EXPECT_THAT(ValueOf(text, "torchmon_samples_accepted_total{stat=\"s" + std::to_string(i / 2) +
                                  "\",rank=\"" + std::to_string(i % 2) + "\"}"),
                Optional(1.0))
        << i;
  }
}

// The text format wants every sample of a family after its one TYPE line.
TEST_F(MetricsExpositionTest, EveryFamilyIsOneContiguousBlockAcrossWalkChunks) {
  const int n = static_cast<int>(Aggregator::kWalkChunk) + 10;
  for (int i = 0; i < n; ++i) {
    Add(Define("s" + std::to_string(i), Aggs({Aggregation::kSum, Aggregation::kMax})), {1}, kT0);
  }
  CloseWindowsEndingBy(kT0 + 1000);
  std::istringstream lines(Scrape());
  std::string line;
  std::string current;
  std::set<std::string> finished;
  std::map<std::string, int> samples;
  while (std::getline(lines, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string family = line.substr(7, line.find(' ', 7) - 7);
      EXPECT_TRUE(finished.insert(family).second) << "second TYPE line for " << family;
      current = family;
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const std::string name = line.substr(0, line.find_first_of("{ "));
    EXPECT_EQ(name, current) << "sample of " << name << " inside the block of " << current;
    ++samples[name];
  }
  EXPECT_EQ(samples["torchmon_stat"], 2 * n);
  EXPECT_EQ(samples["torchmon_samples_dropped_total"], 4 * n);
}

TEST_F(MetricsExpositionTest, RenderStreamsTheSameTextItReturnsWhole) {
  for (int i = 0; i < 3000; ++i) Define("s" + std::to_string(i), Aggs({Aggregation::kSum}));
  std::string streamed;
  int pieces = 0;
  const size_t bytes = exposition_.Render(ExpositionFormat::kText, [&](absl::string_view piece) {
    streamed.append(piece.data(), piece.size());
    ++pieces;
    return true;
  });
  EXPECT_EQ(bytes, streamed.size());
  EXPECT_GT(pieces, 1);
  EXPECT_EQ(streamed, Scrape());
}

TEST_F(MetricsExpositionTest, RenderStopsWhenTheReaderGoesAway) {
  for (int i = 0; i < 3000; ++i) Define("s" + std::to_string(i), Aggs({Aggregation::kSum}));
  int pieces = 0;
  const size_t bytes = exposition_.Render(ExpositionFormat::kText, [&](absl::string_view) {
    ++pieces;
    return false;
  });
  EXPECT_EQ(bytes, 0u);
  EXPECT_EQ(pieces, 1);
}

TEST_F(MetricsExpositionTest, ScrapeSelfMetricsReflectDaemonStats) {
  stats_.scrapes = 4;
  stats_.scrape_bytes = 1234;
  stats_.last_scrape_duration_us = 250'000;
  const std::string text = Scrape();
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_scrapes_total"), Optional(4.0));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_scrape_bytes_total"), Optional(1234.0));
  EXPECT_THAT(ValueOf(text, "torchmon_daemon_last_scrape_duration_seconds"), Optional(0.25));
}

}  // namespace
}  // namespace torchmon::server

namespace torchmon::server {
namespace {

TEST_F(MetricsExpositionTest, EverySelfMetricOfTheListIsWrittenWithItsTypeAndHelp) {
  stats_.outputs[0].name = "jsonl";
  stats_.outputs[0].enabled = true;
  stats_.series_refused_total_limit = 3;
  const std::string text = Scrape();
  for (const SelfMetric& m : SelfMetrics()) {
    EXPECT_THAT(text, HasSubstr(absl::StrCat("# HELP ", m.name, " ", m.help, "\n# TYPE ", m.name,
                                             " ", m.type, "\n")));
  }
  EXPECT_EQ(ValueOf(text, "torchmon_daemon_series_refused_total{limit=\"total\"}"), 3.0);
  EXPECT_EQ(ValueOf(text, "torchmon_daemon_sink_records_total{sink=\"jsonl\"}"), 0.0);
  EXPECT_EQ(ValueOf(text, "torchmon_daemon_build_info{version=\"1.2.3\"}"), 1.0);
  // A sink the daemon does not run has no sample.
  EXPECT_THAT(text, Not(HasSubstr("sink=\"tensorboard\"")));
}

TEST(SelfMetricsDocTest, DocsMetricsTableIsTheListOfSelfMetrics) {
  const std::string path = std::string(TORCHMON_SOURCE_DIR) + "/docs/metrics.md";
  std::ifstream file(path);
  ASSERT_TRUE(file) << path;
  std::string line, table;
  bool in_section = false;
  while (std::getline(file, line)) {
    if (line == "## Daemon self-metrics") {
      in_section = true;
    } else if (in_section && line.rfind("|", 0) == 0) {
      table += line + "\n";
    } else if (in_section && !table.empty()) {
      break;  // the end of the table
    }
  }
  EXPECT_EQ(table, SelfMetricsMarkdown())
      << "docs/metrics.md's table of self-metrics is not the list in "
         "server/exposition/self_metrics.cc; replace it with the expected text above";
}


namespace pb = ::io::prometheus::client;

// Every MetricFamily of a protobuf scrape, read with the messages compiled
// from Debian's metrics.proto.
std::vector<pb::MetricFamily> ParseProtobuf(const std::string& bytes) {
  std::vector<pb::MetricFamily> out;
  google::protobuf::io::ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  for (;;) {
    pb::MetricFamily family;
    bool clean_eof = false;
    if (!google::protobuf::util::ParseDelimitedFromZeroCopyStream(&family, &input, &clean_eof)) {
      EXPECT_TRUE(clean_eof) << "a malformed MetricFamily after " << out.size();
      return out;
    }
    out.push_back(std::move(family));
  }
}

const pb::MetricFamily* FindFamily(const std::vector<pb::MetricFamily>& families,
                                   const std::string& name) {
  for (const pb::MetricFamily& f : families) {
    if (f.name() == name) return &f;
  }
  return nullptr;
}

std::map<std::string, std::string> LabelsOf(const pb::Metric& m) {
  std::map<std::string, std::string> out;
  for (const pb::LabelPair& l : m.label()) out[l.name()] = l.value();
  return out;
}

// A native histogram's buckets of one sign, decoded from spans and deltas.
std::map<int32_t, uint64_t> DecodeBuckets(
    const google::protobuf::RepeatedPtrField<pb::BucketSpan>& spans,
    const google::protobuf::RepeatedField<int64_t>& deltas) {
  std::map<int32_t, uint64_t> out;
  int32_t index = 0;
  int64_t count = 0;
  int d = 0;
  for (int s = 0; s < spans.size(); ++s) {
    index += spans[s].offset();
    for (uint32_t j = 0; j < spans[s].length(); ++j, ++index) {
      count += deltas[d++];
      if (count != 0) out[index] = static_cast<uint64_t>(count);
    }
  }
  EXPECT_EQ(d, deltas.size());
  return out;
}

TEST_F(MetricsExpositionTest, ProtobufCarriesEveryFamilyTheTextHasWithTheSameValues) {
  const SeriesId id = Define("train.loss", Aggs({Aggregation::kMean, Aggregation::kMax}));
  Add(id, {1, 4}, kT0 + 10);
  CloseWindowsEndingBy(kT0 + 1000);
  EventRecord e;
  e.name = "epoch";
  e.labels = {{"rank", "0"}};
  e.data = {{"n", 3.0}};
  events_.Append(e);
  const std::vector<pb::MetricFamily> families =
      ParseProtobuf(exposition_.RenderToString(ExpositionFormat::kProtobuf));
  std::set<std::string> text_families;
  std::istringstream lines(Scrape());
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) text_families.insert(line.substr(7, line.find(' ', 7) - 7));
  }
  std::set<std::string> proto_families;
  for (const pb::MetricFamily& f : families) proto_families.insert(f.name());
  EXPECT_EQ(proto_families, text_families);

  const pb::MetricFamily* stat = FindFamily(families, "torchmon_stat");
  ASSERT_NE(stat, nullptr);
  EXPECT_EQ(stat->type(), pb::GAUGE);
  ASSERT_EQ(stat->metric_size(), 2);
  EXPECT_EQ(LabelsOf(stat->metric(0)), (std::map<std::string, std::string>{
                                           {"stat", "train.loss"}, {"agg", "mean"}, {"rank", "0"}}));
  EXPECT_EQ(stat->metric(0).gauge().value(), 2.5);
  EXPECT_EQ(stat->metric(1).gauge().value(), 4);
  const pb::MetricFamily* accepted = FindFamily(families, "torchmon_samples_accepted_total");
  ASSERT_NE(accepted, nullptr);
  EXPECT_EQ(accepted->type(), pb::COUNTER);
  EXPECT_EQ(accepted->metric(0).counter().value(), 2);
  const pb::MetricFamily* events = FindFamily(families, "torchmon_events_total");
  ASSERT_NE(events, nullptr);
  EXPECT_EQ(LabelsOf(events->metric(0)),
            (std::map<std::string, std::string>{{"event", "epoch"}, {"rank", "0"}}));
}

TEST_F(MetricsExpositionTest, ProtobufNativeHistogramHoldsEveryAcceptedSampleInItsBucket) {
  auto id = aggregator_.Define(SeriesKey{"step_ms", {{"rank", "3"}}},
                               StatSpec{Aggs({Aggregation::kMean}), 1000, 0, {0.99}});
  ASSERT_TRUE(id.ok());
  const std::vector<double> first = {0.5, 1, 2, 3, 3, 100, -3, 0};
  Add(*id, first, kT0 + 10);
  CloseWindowsEndingBy(kT0 + 1000);
  const std::vector<double> second = {2, 7.5, std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity()};
  Add(*id, second, kT0 + 1500);  // in the open window: the histogram has it already
  const std::vector<pb::MetricFamily> families =
      ParseProtobuf(exposition_.RenderToString(ExpositionFormat::kProtobuf));
  const pb::MetricFamily* family = FindFamily(families, "torchmon_stat_distribution");
  ASSERT_NE(family, nullptr);
  EXPECT_EQ(family->type(), pb::HISTOGRAM);
  ASSERT_EQ(family->metric_size(), 1);
  EXPECT_EQ(LabelsOf(family->metric(0)),
            (std::map<std::string, std::string>{{"stat", "step_ms"}, {"rank", "3"}}));
  const pb::Histogram& h = family->metric(0).histogram();
  EXPECT_EQ(h.sample_count(), first.size() + second.size());
  EXPECT_TRUE(std::isnan(h.sample_sum()));  // a NaN sample
  EXPECT_EQ(h.schema(), NativeHistogram::kInitialSchema);
  EXPECT_EQ(h.zero_threshold(), NativeHistogram::kZeroThreshold);
  EXPECT_EQ(h.zero_count(), 1u);
  EXPECT_EQ(h.bucket_size(), 0);  // no classic buckets
  std::map<int32_t, uint64_t> positive, negative;
  for (double x : first) {
    if (x > 0) ++positive[NativeHistogram::Index(x, 5)];
    if (x < 0) ++negative[NativeHistogram::Index(-x, 5)];
  }
  ++positive[NativeHistogram::Index(2, 5)];
  ++positive[NativeHistogram::Index(7.5, 5)];
  ++positive[NativeHistogram::InfiniteIndex(5)];  // +Inf; NaN is in no bucket
  EXPECT_EQ(DecodeBuckets(h.positive_span(), h.positive_delta()), positive);
  EXPECT_EQ(DecodeBuckets(h.negative_span(), h.negative_delta()), negative);
}

TEST_F(MetricsExpositionTest, AHistogramIsExposedFromItsDefinitionOnAndOnlyWhenAskedFor) {
  StatSpec with{Aggs({Aggregation::kMean}), 1000, 0, {}};
  with.histogram = true;
  ASSERT_TRUE(aggregator_.Define(SeriesKey{"asked", {}}, with).ok());
  Define("plain", Aggs({Aggregation::kMean}));
  const std::vector<pb::MetricFamily> families =
      ParseProtobuf(exposition_.RenderToString(ExpositionFormat::kProtobuf));
  const pb::MetricFamily* family = FindFamily(families, "torchmon_stat_distribution");
  ASSERT_NE(family, nullptr);
  ASSERT_EQ(family->metric_size(), 1);  // not "plain"
  EXPECT_EQ(LabelsOf(family->metric(0)).at("stat"), "asked");
  // Empty, but native: a zero threshold tells Prometheus so.
  EXPECT_EQ(family->metric(0).histogram().sample_count(), 0u);
  EXPECT_GT(family->metric(0).histogram().zero_threshold(), 0);
  // The text formats show its count and sum.
  const std::string text = Scrape();
  EXPECT_THAT(ValueOf(text, "torchmon_stat_distribution_count{stat=\"asked\"}"), Optional(0.0));
  EXPECT_THAT(ValueOf(text, "torchmon_stat_distribution_bucket{stat=\"asked\",le=\"+Inf\"}"),
              Optional(0.0));
  EXPECT_THAT(text, Not(HasSubstr("stat=\"plain\",le=")));
}

TEST_F(MetricsExpositionTest, OpenMetricsNamesCountersWithoutTotalAndEndsWithEof) {
  StatSpec spec{Aggs({Aggregation::kMean}), 1000, 0, {}};
  spec.histogram = true;
  auto id = aggregator_.Define(SeriesKey{"loss", {{"rank", "0"}}}, spec);
  ASSERT_TRUE(id.ok());
  Add(*id, {1, 2}, kT0 + 10);
  auto negative = aggregator_.Define(SeriesKey{"delta", {{"rank", "0"}}}, spec);
  ASSERT_TRUE(negative.ok());
  Add(*negative, {-1, 0.5}, kT0 + 10);
  CloseWindowsEndingBy(kT0 + 1000);
  const std::string text = exposition_.RenderToString(ExpositionFormat::kOpenMetrics);
  EXPECT_THAT(text, HasSubstr("# TYPE torchmon_samples_accepted counter\n"));
  EXPECT_THAT(text, HasSubstr("# HELP torchmon_samples_accepted "));
  EXPECT_THAT(text, Not(HasSubstr("# TYPE torchmon_samples_accepted_total")));
  // The counter and its start (the series' creation, kT0) together.
  EXPECT_THAT(text, HasSubstr("torchmon_samples_accepted_total{stat=\"loss\",rank=\"0\"} 2\n"
                              "torchmon_samples_accepted_created{stat=\"loss\",rank=\"0\"} " +
                              std::to_string(kT0 / 1000) + "\n"));
  EXPECT_THAT(text, HasSubstr("torchmon_stat_distribution_sum{stat=\"loss\",rank=\"0\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("# TYPE torchmon_samples_dropped counter\n"));
  EXPECT_THAT(text, Not(HasSubstr("torchmon_samples_dropped_created")));
  // A negative sum has no place in OpenMetrics: the +Inf bucket alone.
  EXPECT_THAT(text, HasSubstr("torchmon_stat_distribution_bucket{stat=\"delta\",rank=\"0\","
                              "le=\"+Inf\"} 2\n"));
  EXPECT_THAT(text, Not(HasSubstr("torchmon_stat_distribution_sum{stat=\"delta\"")));
  EXPECT_THAT(text, Not(HasSubstr("torchmon_stat_distribution_count{stat=\"delta\"")));
  ASSERT_GE(text.size(), 6u);
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n");
  // Text 0.0.4 has neither.
  const std::string plain = Scrape();
  EXPECT_THAT(plain, Not(HasSubstr("_created")));
  EXPECT_THAT(plain, Not(HasSubstr("# EOF")));
  EXPECT_THAT(plain, HasSubstr("# TYPE torchmon_samples_accepted_total counter\n"));
}

}  // namespace
}  // namespace torchmon::server

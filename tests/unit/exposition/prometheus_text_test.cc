// The text format writer on its own: value spelling, label escaping,
// family headers and how text reaches the sink.
#include "server/exposition/prometheus_text.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::SizeIs;

std::string Value(double v) {
  std::string out;
  AppendPrometheusValue(out, v);
  return out;
}

std::string Label(absl::string_view key, absl::string_view value) {
  std::string out;
  AppendPrometheusLabel(out, key, value);
  return out;
}

TEST(PrometheusValueTest, IntegersHaveNoExponentOrFraction) {
  EXPECT_EQ(Value(0), "0");
  EXPECT_EQ(Value(42), "42");
  EXPECT_EQ(Value(-7), "-7");
  EXPECT_EQ(Value(1e15), "1000000000000000");
}

TEST(PrometheusValueTest, NegativeZeroIsZero) { EXPECT_EQ(Value(-0.0), "0"); }

TEST(PrometheusValueTest, HugeIntegersUseAnExponent) { EXPECT_EQ(Value(1e16), "1e+16"); }

TEST(PrometheusValueTest, FractionsUseTheShortestExactForm) {
  EXPECT_EQ(Value(0.1), "0.1");
  EXPECT_EQ(Value(-2.5), "-2.5");
  EXPECT_EQ(Value(1e-300), "1e-300");
}

TEST(PrometheusValueTest, EveryFiniteValueParsesBackExactly) {
  for (double v : {1.0 / 3.0, 2.0 / 3.0, 123456.789, -9.87654321e-12, 0.30000000000000004,
                   std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
                   std::numeric_limits<double>::denorm_min()}) {
    EXPECT_EQ(std::strtod(Value(v).c_str(), nullptr), v) << Value(v);
  }
}

TEST(PrometheusValueTest, NaNAndInfinities) {
  EXPECT_EQ(Value(std::numeric_limits<double>::quiet_NaN()), "NaN");
  EXPECT_EQ(Value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(Value(-std::numeric_limits<double>::infinity()), "-Inf");
}

TEST(PrometheusLabelTest, PlainValueIsQuoted) { EXPECT_EQ(Label("rank", "3"), "rank=\"3\""); }

TEST(PrometheusLabelTest, BackslashQuoteAndNewlineAreEscaped) {
  EXPECT_EQ(Label("k", "a\\b\"c\nd"), "k=\"a\\\\b\\\"c\\nd\"");
}

TEST(PrometheusLabelTest, OtherBytesPassThroughUnchanged) {
  EXPECT_EQ(Label("k", "tab\there ünï {x}"), "k=\"tab\there ünï {x}\"");
}

TEST(PrometheusLabelTest, EmptyValue) { EXPECT_EQ(Label("k", ""), "k=\"\""); }

struct Collected {
  std::vector<std::string> pieces;
  std::string Text() const {
    std::string all;
    for (const std::string& p : pieces) all += p;
    return all;
  }
};

PrometheusTextWriter::Sink Into(Collected& c) {
  return [&c](absl::string_view piece) {
    c.pieces.emplace_back(piece);
    return true;
  };
}

TEST(PrometheusTextWriterTest, FamilyWritesHelpThenTypeBeforeItsSamples) {
  Collected c;
  PrometheusTextWriter w(Into(c));
  w.Family("m", "What m is.", MetricKind::kGauge, [&] { w.Sample("m", {}, 1); });
  w.Finish();
  EXPECT_EQ(c.Text(), "# HELP m What m is.\n# TYPE m gauge\nm 1\n");
}

TEST(PrometheusTextWriterTest, AFamilyWithoutSamplesIsLeftOut) {
  Collected c;
  PrometheusTextWriter w(Into(c));
  w.Family("m", "What m is.", MetricKind::kGauge, [] {});
  w.Family("n", "What n is.", MetricKind::kCounter, [&] { w.Sample("n_total", {}, 2); });
  w.Finish();
  EXPECT_EQ(c.Text(), "# HELP n What n is.\n# TYPE n counter\nn_total 2\n");
}

TEST(PrometheusTextWriterTest, HelpEscapesBackslashAndNewlineButNotQuotes) {
  Collected c;
  PrometheusTextWriter w(Into(c));
  w.Family("m", "a\\b\n\"c\"", MetricKind::kCounter, [&] { w.Sample("m", {}, 1); });
  w.Finish();
  EXPECT_EQ(c.Text(), "# HELP m a\\\\b\\n\"c\"\n# TYPE m counter\nm 1\n");
}

TEST(PrometheusTextWriterTest, SampleConcatenatesLabelPartsInsideBraces) {
  Collected c;
  PrometheusTextWriter w(Into(c));
  w.Sample("m", {"stat=\"s\"", ",agg=\"mean\"", ",rank=\"0\""}, 2.5);
  w.Finish();
  EXPECT_EQ(c.Text(), "m{stat=\"s\",agg=\"mean\",rank=\"0\"} 2.5\n");
}

TEST(PrometheusTextWriterTest, SampleWithoutLabelsHasNoBraces) {
  Collected c;
  PrometheusTextWriter w(Into(c));
  w.Sample("m", {}, 1);
  w.Sample("n", {"", ""}, 2);
  w.Finish();
  EXPECT_EQ(c.Text(), "m 1\nn 2\n");
}

TEST(PrometheusTextWriterTest, TextReachesTheSinkInPiecesOfAboutTheFlushSize) {
  Collected c;
  PrometheusTextWriter w(Into(c), ExpositionFormat::kText, /*flush_bytes=*/100);
  for (int i = 0; i < 50; ++i) w.Sample("metric_name", {"k=\"v\""}, i);
  w.Finish();
  ASSERT_THAT(c.pieces, SizeIs(testing::Gt(5u)));
  for (size_t i = 0; i + 1 < c.pieces.size(); ++i) {
    EXPECT_GE(c.pieces[i].size(), 100u);
    EXPECT_LT(c.pieces[i].size(), 100u + 40u);  // at most one line past the threshold
  }
  EXPECT_EQ(w.bytes_written(), c.Text().size());
  EXPECT_EQ(c.Text().substr(0, 19), "metric_name{k=\"v\"} ");
}

TEST(PrometheusTextWriterTest, NothingReachesTheSinkBeforeFinishWhenBelowTheFlushSize) {
  Collected c;
  PrometheusTextWriter w(Into(c));
  w.Sample("m", {}, 1);
  EXPECT_THAT(c.pieces, SizeIs(0u));
  w.Finish();
  EXPECT_THAT(c.pieces, ElementsAre("m 1\n"));
}

TEST(PrometheusTextWriterTest, ARefusingSinkStopsTheOutput) {
  int calls = 0;
  PrometheusTextWriter w(
      [&](absl::string_view) {
        ++calls;
        return false;
      },
      ExpositionFormat::kText, /*flush_bytes=*/10);
  for (int i = 0; i < 100; ++i) w.Sample("m", {}, i);
  w.Finish();
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(w.ok());
  EXPECT_EQ(w.bytes_written(), 0u);
}

}  // namespace
}  // namespace torchmon::server

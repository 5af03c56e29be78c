// The text format writer on its own: value spelling, label escaping,
// family headers and how text reaches the sink.
#include "server/exposition/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
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

// The spelling of a C++ runtime without floating-point to_chars (the
// portable build's GCC 10 libstdc++), here where to_chars exists to be
// compared with.
std::string ShortestRoundTrip(double v) {
  char buf[32];
  return std::string(buf, internal::WriteShortestRoundTrip(buf, v));
}

TEST(ShortestRoundTripTest, SpellsWhatToCharsSpells) {
  // Fixed or exponent, whichever is shorter, fixed on a tie; the exponent
  // has two digits at least.
  EXPECT_EQ(ShortestRoundTrip(0.1), "0.1");
  EXPECT_EQ(ShortestRoundTrip(-2.5), "-2.5");
  EXPECT_EQ(ShortestRoundTrip(100), "100");
  EXPECT_EQ(ShortestRoundTrip(100000), "1e+05");
  EXPECT_EQ(ShortestRoundTrip(120000), "120000");
  EXPECT_EQ(ShortestRoundTrip(0.001), "0.001");
  EXPECT_EQ(ShortestRoundTrip(0.0001), "1e-04");
  EXPECT_EQ(ShortestRoundTrip(123456.7), "123456.7");
  EXPECT_EQ(ShortestRoundTrip(1e16), "1e+16");
  EXPECT_EQ(ShortestRoundTrip(1e-300), "1e-300");
  EXPECT_EQ(ShortestRoundTrip(0.30000000000000004), "0.30000000000000004");
  EXPECT_EQ(ShortestRoundTrip(std::numeric_limits<double>::max()), "1.7976931348623157e+308");
  EXPECT_EQ(ShortestRoundTrip(std::numeric_limits<double>::denorm_min()), "5e-324");
  EXPECT_EQ(ShortestRoundTrip(0.0), "0");
  EXPECT_EQ(ShortestRoundTrip(-0.0), "-0");
}

#if defined(__cpp_lib_to_chars)
TEST(ShortestRoundTripTest, AgreesWithToCharsOnAMillionDoubles) {
  // Every kind of double: random bit patterns (every exponent, subnormals
  // included), short decimals as metrics have them, means and quantiles
  // (every bit of the mantissa set at random) from 1e-20 to 1e15, and
  // integers past 2^53.
  std::mt19937_64 random(20261129);
  std::vector<double> values;
  while (values.size() < 300000) {
    const uint64_t bits = random();
    double v;
    std::memcpy(&v, &bits, sizeof v);
    if (std::isfinite(v)) values.push_back(v);
  }
  for (int i = 0; i < 300000; ++i) {
    values.push_back(static_cast<double>(random() % 2000001) /
                     std::pow(10.0, static_cast<double>(random() % 12)));
  }
  std::uniform_real_distribution<double> unit(1.0, 10.0);
  for (int i = 0; i < 200000; ++i) {
    values.push_back(unit(random) * std::pow(10.0, static_cast<double>(random() % 36) - 20));
  }
  for (int i = 0; i < 200000; ++i) {
    values.push_back(std::ldexp(static_cast<double>(random() >> 11), static_cast<int>(random() % 80)));
  }
  size_t mismatches = 0;
  for (double v : values) {
    char buf[32];
    const std::string expected(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
    const std::string actual = ShortestRoundTrip(v);
    if (actual != expected && ++mismatches <= 10) {
      ADD_FAILURE() << "bits " << std::hexfloat << v << ": to_chars " << expected << ", ours " << actual;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "of " << values.size();
}
#endif

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

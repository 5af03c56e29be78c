// The shared conventions of torchmon.v1: durations, label lists and keys,
// UTF-8, aggregation lists and spec bounds.
#include "torchmon/protocol/protocol.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torchmon/protocol/windows.h"

namespace torchmon::protocol {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;

int64_t DurationOrMinusOne(absl::string_view text) {
  auto ms = ParseDurationMs(text);
  return ms.ok() ? *ms : -1;
}

TEST(WindowRuleTest, ASampleFallsInTheEpochAlignedWindowThatHoldsItsMillisecond) {
  // 1 s windows: [0, 1000) ms is window 0, the last µs of it too.
  EXPECT_EQ(WindowIndex(0, 1000), 0);
  EXPECT_EQ(WindowIndex(999'999, 1000), 0);
  EXPECT_EQ(WindowIndex(1'000'000, 1000), 1);
  // A sample's millisecond is floored before its window: 1999.999 ms is
  // millisecond 1999, in the 2 ms window [1998, 2000).
  EXPECT_EQ(WindowIndex(1'999'999, 2), 999);
  EXPECT_EQ(WindowStartMs(WindowIndex(1'700'000'123'456'789, 60'000), 60'000), 1'700'000'100'000);
  EXPECT_EQ(WindowStartUs(3, 250), 750'000);
}

TEST(WindowRuleTest, TimestampsBefore1970FloorInsteadOfTruncating) {
  EXPECT_EQ(FloorDiv(-1, 1000), -1);
  EXPECT_EQ(FloorDiv(-1000, 1000), -1);
  EXPECT_EQ(FloorDiv(-1001, 1000), -2);
  EXPECT_EQ(FloorDiv(7, 2), 3);
  // -1 µs is in the millisecond -1, in the window [-1000, 0) ms.
  EXPECT_EQ(WindowIndex(-1, 1000), -1);
  EXPECT_EQ(WindowStartMs(WindowIndex(-1, 1000), 1000), -1000);
  EXPECT_EQ(WindowIndex(-1'000'000, 1000), -1);
  EXPECT_EQ(WindowIndex(-1'000'001, 1000), -2);
}

TEST(ParseDurationMsTest, AcceptsEachUnit) {
  EXPECT_EQ(DurationOrMinusOne("500ms"), 500);
  EXPECT_EQ(DurationOrMinusOne("2s"), 2'000);
  EXPECT_EQ(DurationOrMinusOne("1m"), 60'000);
  EXPECT_EQ(DurationOrMinusOne("1h"), 3'600'000);
  EXPECT_EQ(DurationOrMinusOne("0s"), 0);
}

TEST(ParseDurationMsTest, AcceptsFractionsThatAreWholeMilliseconds) {
  EXPECT_EQ(DurationOrMinusOne("1.5s"), 1'500);
  EXPECT_EQ(DurationOrMinusOne("0.5m"), 30'000);
  EXPECT_EQ(DurationOrMinusOne("0.001s"), 1);
}

TEST(ParseDurationMsTest, RefusesABareNumber) {
  auto ms = ParseDurationMs("60");
  ASSERT_FALSE(ms.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(ms.status()));
  EXPECT_THAT(std::string(ms.status().message()), HasSubstr("\"60\""));
}

TEST(ParseDurationMsTest, RefusesMalformedDurations) {
  EXPECT_FALSE(ParseDurationMs("").ok());
  EXPECT_FALSE(ParseDurationMs("s").ok());
  EXPECT_FALSE(ParseDurationMs("ms").ok());
  EXPECT_FALSE(ParseDurationMs("-1s").ok());
  EXPECT_FALSE(ParseDurationMs("1d").ok());
  EXPECT_FALSE(ParseDurationMs("abc").ok());
  EXPECT_FALSE(ParseDurationMs("infs").ok());
  EXPECT_FALSE(ParseDurationMs("nans").ok());
}

TEST(ParseDurationMsTest, RefusesFractionsOfAMillisecond) {
  EXPECT_FALSE(ParseDurationMs("1.5ms").ok());
  EXPECT_FALSE(ParseDurationMs("0.0001s").ok());
}

TEST(FormatDurationMsTest, UsesTheLargestExactUnit) {
  EXPECT_EQ(FormatDurationMs(500), "500ms");
  EXPECT_EQ(FormatDurationMs(2'000), "2s");
  EXPECT_EQ(FormatDurationMs(1'500), "1500ms");
  EXPECT_EQ(FormatDurationMs(120'000), "2m");
  EXPECT_EQ(FormatDurationMs(7'200'000), "2h");
  EXPECT_EQ(FormatDurationMs(0), "0ms");
}

TEST(ParseLabelListTest, ParsesKeyValuePairsInOrder) {
  auto labels = ParseLabelList("job=train, rank=0,host=node-1.example");
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(*labels, ElementsAre(Pair("job", "train"), Pair("rank", "0"),
                                   Pair("host", "node-1.example")));
}

TEST(ParseLabelListTest, EmptyTextIsAnEmptyList) {
  auto labels = ParseLabelList("");
  ASSERT_TRUE(labels.ok());
  EXPECT_THAT(*labels, IsEmpty());
}

TEST(ParseLabelListTest, LaterDuplicateOverridesEarlier) {
  auto labels = ParseLabelList("rank=0,job=a,rank=3");
  ASSERT_TRUE(labels.ok());
  EXPECT_THAT(*labels, ElementsAre(Pair("rank", "3"), Pair("job", "a")));
}

TEST(ParseLabelListTest, ValueMayContainEqualsSign) {
  auto labels = ParseLabelList("expr=a=b");
  ASSERT_TRUE(labels.ok());
  EXPECT_THAT(*labels, ElementsAre(Pair("expr", "a=b")));
}

TEST(ParseLabelListTest, RefusesAnItemWithoutEquals) {
  auto labels = ParseLabelList("job=a,rank");
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(std::string(labels.status().message()), HasSubstr("\"rank\""));
}

TEST(ParseLabelListTest, RefusesAnInvalidKeyNamingIt) {
  auto labels = ParseLabelList("job=a,1rank=0");
  ASSERT_FALSE(labels.ok());
  EXPECT_THAT(std::string(labels.status().message()), HasSubstr("\"1rank\""));
}

TEST(ValidateLabelKeyTest, AcceptsIdentifiers) {
  EXPECT_TRUE(ValidateLabelKey("rank").ok());
  EXPECT_TRUE(ValidateLabelKey("_private").ok());
  EXPECT_TRUE(ValidateLabelKey("local_rank2").ok());
  EXPECT_TRUE(ValidateLabelKey("Job").ok());
}

TEST(ValidateLabelKeyTest, RefusesNonIdentifiers) {
  EXPECT_FALSE(ValidateLabelKey("").ok());
  EXPECT_FALSE(ValidateLabelKey("1rank").ok());
  EXPECT_FALSE(ValidateLabelKey("local-rank").ok());
  EXPECT_FALSE(ValidateLabelKey("a.b").ok());
  EXPECT_FALSE(ValidateLabelKey("r\xc3\xa9").ok());
}

TEST(ValidateLabelKeyTest, RefusesReservedKeysNamingThem) {
  for (const char* key : {"stat", "agg", "reason", "event", "field"}) {
    absl::Status s = ValidateLabelKey(key);
    ASSERT_FALSE(s.ok()) << key;
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::string("\"") + key + "\""));
  }
}

// With honor_labels, a series label wins over the target's: a client must
// not be able to say which node (instance) or pod its series come from.
TEST(ValidateLabelKeyTest, RefusesPrometheusTargetLabelsNamingThemAndWhy) {
  for (const char* key : {"instance", "node", "namespace", "pod", "container", "endpoint",
                          "service", "le", "quantile"}) {
    absl::Status s = ValidateLabelKey(key);
    ASSERT_FALSE(s.ok()) << key;
    EXPECT_THAT(std::string(s.message()), HasSubstr(std::string("\"") + key + "\""));
    EXPECT_THAT(std::string(s.message()), HasSubstr("scrape target"));
  }
  // The training job is kept on purpose, and names merely containing a
  // target label are fine.
  EXPECT_TRUE(ValidateLabelKey("job").ok());
  EXPECT_TRUE(ValidateLabelKey("instance_id").ok());
  EXPECT_TRUE(ValidateLabelKey("training_pod").ok());
}

TEST(ValidateLabelKeyTest, RefusesDoubleUnderscorePrefix) {
  EXPECT_FALSE(ValidateLabelKey("__name__").ok());
  EXPECT_FALSE(ValidateLabelKey("__x").ok());
}

TEST(IsValidUtf8Test, AcceptsWellFormedText) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("train.loss"));
  EXPECT_TRUE(IsValidUtf8("\xc3\xa9"));          // é, 2 bytes
  EXPECT_TRUE(IsValidUtf8("\xe2\x82\xac"));      // €, 3 bytes
  EXPECT_TRUE(IsValidUtf8("\xf0\x9f\x98\x80"));  // 😀, 4 bytes
  EXPECT_TRUE(IsValidUtf8("\xf4\x8f\xbf\xbf"));  // U+10FFFF, the last code point
  EXPECT_TRUE(IsValidUtf8(absl::string_view("a\0b", 3)));
}

TEST(IsValidUtf8Test, RefusesOverlongEncodings) {
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // '/' in 2 bytes
  EXPECT_FALSE(IsValidUtf8("\xc1\xbf"));
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // '/' in 3 bytes
  EXPECT_FALSE(IsValidUtf8("\xf0\x82\x82\xac"));  // € in 4 bytes
}

TEST(IsValidUtf8Test, RefusesSurrogates) {
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));  // U+D800
  EXPECT_FALSE(IsValidUtf8("\xed\xbf\xbf"));  // U+DFFF
}

TEST(IsValidUtf8Test, RefusesTruncatedSequences) {
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));
  EXPECT_FALSE(IsValidUtf8("ok\xf0\x9f\x98"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));
}

TEST(IsValidUtf8Test, RefusesStrayAndInvalidBytes) {
  EXPECT_FALSE(IsValidUtf8("\x80"));              // lone continuation byte
  EXPECT_FALSE(IsValidUtf8("\xc3\x28"));          // lead byte, then ASCII
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xf8\x88\x80\x80\x80"));  // 5-byte form
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // U+110000, past the last code point
}

TEST(ValidateNameTest, RefusesEmptyAndInvalidUtf8NamingTheField) {
  absl::Status empty = ValidateName("stat name", "");
  ASSERT_FALSE(empty.ok());
  EXPECT_THAT(std::string(empty.message()), HasSubstr("stat name"));
  absl::Status bad = ValidateName("event name", "\xff");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.message()), HasSubstr("event name"));
  EXPECT_TRUE(ValidateName("stat name", "train loss/π").ok());
}

// The names of a parsed list, as AggregationName writes them.
std::vector<std::string> Names(const std::vector<NamedAggregation>& aggregations) {
  std::vector<std::string> out;
  for (const NamedAggregation& a : aggregations) out.push_back(AggregationName(a));
  return out;
}

TEST(ParseAggregationListTest, ParsesNamesCaseInsensitivelyInOrder) {
  auto aggs = ParseAggregationList("mean, MAX,Count");
  ASSERT_TRUE(aggs.ok()) << aggs.status();
  EXPECT_THAT(Names(*aggs), ElementsAre("mean", "max", "count"));
  EXPECT_EQ((*aggs)[1].aggregation, v1::MAX);
}

TEST(ParseAggregationListTest, AcceptsAllSix) {
  auto aggs = ParseAggregationList("value,mean,count,sum,max,min");
  ASSERT_TRUE(aggs.ok());
  std::vector<v1::Aggregation> kinds;
  for (const NamedAggregation& a : *aggs) kinds.push_back(a.aggregation);
  EXPECT_THAT(kinds, ElementsAre(v1::VALUE, v1::MEAN, v1::COUNT, v1::SUM, v1::MAX, v1::MIN));
}

TEST(ParseAggregationListTest, RefusesAnUnknownNameNamingIt) {
  auto aggs = ParseAggregationList("mean,median");
  ASSERT_FALSE(aggs.ok());
  EXPECT_THAT(std::string(aggs.status().message()), HasSubstr("\"median\""));
}

TEST(ParseAggregationListTest, RefusesAnEmptyList) {
  EXPECT_FALSE(ParseAggregationList("").ok());
  EXPECT_FALSE(ParseAggregationList(" , ").ok());
}

TEST(ParseAggregationTest, ParsesQuantileNamesToTheirQuantile) {
  struct Case {
    const char* name;
    double quantile;
  };
  for (const Case& c : {Case{"p50", 0.5}, Case{"p90", 0.9}, Case{"P99", 0.99},
                        Case{"p99.9", 0.999}, Case{"p99.99", 0.9999}, Case{"p0.1", 0.001},
                        Case{"p99.9999", 0.999999}, Case{"p05", 0.05}}) {
    auto parsed = ParseAggregation(c.name);
    ASSERT_TRUE(parsed.ok()) << c.name << ": " << parsed.status();
    EXPECT_EQ(parsed->aggregation, v1::QUANTILE) << c.name;
    EXPECT_EQ(parsed->quantile, c.quantile) << c.name;
  }
}

TEST(ParseAggregationTest, QuantileNamesRoundTrip) {
  for (const char* name : {"p50", "p90", "p99", "p99.9", "p99.99", "p0.0001", "p12.3456"}) {
    auto parsed = ParseAggregation(name);
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(AggregationName(*parsed), name);
    EXPECT_EQ(QuantileName(parsed->quantile), name);
  }
  // Another spelling of the same quantile names it the same way.
  EXPECT_EQ(QuantileName(*CanonicalQuantile(0.999)), "p99.9");
  EXPECT_EQ(QuantileName(*CanonicalQuantile(0.5)), "p50");
}

TEST(ParseAggregationTest, RefusesQuantilesOutsideTheOpenIntervalOrTooFine) {
  for (const char* name : {"p0", "p100", "p150", "p99.99999", "p", "p-1", "p1e1", "pinf",
                           "pnan", "p.5", "p5.", "p9 9", "p99..9", "q99"}) {
    auto parsed = ParseAggregation(name);
    ASSERT_FALSE(parsed.ok()) << name;
    EXPECT_THAT(std::string(parsed.status().message()), HasSubstr(name)) << name;
  }
}

TEST(ParseAggregationListTest, MixesTheSixAndQuantiles) {
  auto aggs = ParseAggregationList("mean,p99,max,p50");
  ASSERT_TRUE(aggs.ok()) << aggs.status();
  EXPECT_THAT(Names(*aggs), ElementsAre("mean", "p99", "max", "p50"));
  v1::StatSpec spec;
  for (const NamedAggregation& a : *aggs) AddToSpec(a, &spec);
  EXPECT_THAT(spec.aggregations(), ElementsAre(v1::MEAN, v1::MAX));
  EXPECT_THAT(spec.quantiles(), ElementsAre(0.99, 0.5));
}

TEST(CanonicalQuantileTest, RoundsToTheGridAndRefusesTheRest) {
  EXPECT_EQ(*CanonicalQuantile(0.99), 0.99);
  EXPECT_EQ(*CanonicalQuantile(99.9 / 100), 0.999);
  for (double q : {0.0, 1.0, -0.5, 1.5, 0.1234567, std::nan(""), HUGE_VAL}) {
    EXPECT_FALSE(CanonicalQuantile(q).ok()) << q;
  }
}

v1::StatSpec Spec(int64_t window_ms, int64_t max_samples = 0) {
  v1::StatSpec spec;
  spec.add_aggregations(v1::MEAN);
  spec.set_window_size_ms(window_ms);
  spec.set_max_samples(max_samples);
  return spec;
}

TEST(ValidateSpecTest, AcceptsWindowSizesWithinBounds) {
  EXPECT_TRUE(ValidateSpec(Spec(10)).ok());
  EXPECT_TRUE(ValidateSpec(Spec(86'400'000)).ok());       // a day
  EXPECT_TRUE(ValidateSpec(Spec(360'000'000)).ok());      // torch.monitor's 100 hours
  EXPECT_TRUE(ValidateSpec(Spec(2'678'400'000)).ok());    // 31 days
}

TEST(ValidateSpecTest, RefusesWindowSizesOutsideBoundsNamingTheField) {
  for (int64_t w : {int64_t{0}, int64_t{9}, int64_t{2'678'400'001}, int64_t{-1000}}) {
    absl::Status s = ValidateSpec(Spec(w));
    ASSERT_FALSE(s.ok()) << w;
    EXPECT_THAT(std::string(s.message()), HasSubstr("window_size_ms")) << w;
  }
}

TEST(DaemonWindowMsTest, KeepsWindowsWithinBoundsAndGivesTheNearestBoundOtherwise) {
  EXPECT_EQ(DaemonWindowMs(10), 10);
  EXPECT_EQ(DaemonWindowMs(1000), 1000);
  EXPECT_EQ(DaemonWindowMs(kMaxWindowMs), kMaxWindowMs);
  for (int64_t shorter : {int64_t{9}, int64_t{1}, int64_t{0}}) EXPECT_EQ(DaemonWindowMs(shorter), 10);
  EXPECT_EQ(DaemonWindowMs(kMaxWindowMs + 1), kMaxWindowMs);
  EXPECT_EQ(DaemonWindowMs(int64_t{365} * 24 * 3600 * 1000), kMaxWindowMs);
  // What it gives, the daemon accepts.
  for (int64_t w : {int64_t{0}, int64_t{1}, int64_t{9}, kMaxWindowMs + 1}) {
    EXPECT_TRUE(ValidateSpec(Spec(DaemonWindowMs(w))).ok()) << w;
  }
}

TEST(ValidateSpecTest, RefusesNegativeMaxSamples) {
  EXPECT_TRUE(ValidateSpec(Spec(1000, 0)).ok());
  EXPECT_FALSE(ValidateSpec(Spec(1000, -1)).ok());
}

TEST(ValidateSpecTest, RefusesMissingOrUnknownAggregations) {
  v1::StatSpec none = Spec(1000);
  none.clear_aggregations();
  EXPECT_FALSE(ValidateSpec(none).ok());
  v1::StatSpec unspecified = Spec(1000);
  unspecified.add_aggregations(v1::AGGREGATION_UNSPECIFIED);
  EXPECT_FALSE(ValidateSpec(unspecified).ok());
  v1::StatSpec unknown = Spec(1000);
  unknown.add_aggregations(static_cast<v1::Aggregation>(8));
  EXPECT_FALSE(ValidateSpec(unknown).ok());
  // QUANTILE names its quantile in `quantiles`, not in `aggregations`.
  v1::StatSpec bare_quantile = Spec(1000);
  bare_quantile.add_aggregations(v1::QUANTILE);
  absl::Status s = ValidateSpec(bare_quantile);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("quantiles field"));
}

TEST(ValidateSpecTest, AcceptsQuantilesAloneOrBesideTheSix) {
  v1::StatSpec alone = Spec(1000);
  alone.clear_aggregations();
  alone.add_quantiles(0.99);
  EXPECT_TRUE(ValidateSpec(alone).ok());
  v1::StatSpec both = Spec(1000);
  both.add_quantiles(0.5);
  both.add_quantiles(0.999);
  both.add_quantiles(0.5);  // duplicates are ignored
  EXPECT_TRUE(ValidateSpec(both).ok());
}

TEST(ValidateSpecTest, RefusesBadQuantilesNamingThem) {
  for (double q : {0.0, 1.0, 1.5, -0.1, 0.99999999, std::nan("")}) {
    v1::StatSpec spec = Spec(1000);
    spec.add_quantiles(q);
    absl::Status s = ValidateSpec(spec);
    ASSERT_FALSE(s.ok()) << q;
    EXPECT_THAT(std::string(s.message()), HasSubstr("quantile")) << q;
  }
}

TEST(ValidateSpecTest, RefusesMoreThanTheMaximumOfDistinctQuantiles) {
  v1::StatSpec spec = Spec(1000);
  for (size_t i = 1; i <= kMaxQuantiles; ++i) spec.add_quantiles(static_cast<double>(i) / 100);
  spec.add_quantiles(0.01);  // a duplicate does not count
  EXPECT_TRUE(ValidateSpec(spec).ok());
  spec.add_quantiles(0.99);
  absl::Status s = ValidateSpec(spec);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("at most 16"));
}

TEST(IsLoopbackHostTest, KnowsTheLoopbackAddresses) {
  for (const char* host :
       {"127.0.0.1", "127.1.2.3", "::1", "localhost", "LOCALHOST", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "10.0.0.1", "192.168.1.1", "example.org", ""}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

}  // namespace
}  // namespace torchmon::protocol

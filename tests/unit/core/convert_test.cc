// Conversions between torchmon.v1 messages and the core's types.
#include "server/core/convert.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using ::testing::SizeIs;

TEST(ConvertTest, WindowSummaryCarriesOnlyTheRequestedAggregations) {
  ClosedWindow w;
  w.series = std::make_shared<const SeriesKey>(SeriesKey{"s", {{"rank", "0"}}});
  w.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax);
  w.start_ms = 1000;
  w.end_ms = 2000;
  w.stats.Add(1, 0);
  w.stats.Add(4, 0);
  v1::WindowSummary out;
  WindowToProto(w, &out);
  ASSERT_THAT(out.aggregates(), SizeIs(2));
  EXPECT_EQ(out.aggregates(0).aggregation(), v1::MEAN);
  EXPECT_EQ(out.aggregates(0).value(), 2.5);
  EXPECT_EQ(out.aggregates(1).aggregation(), v1::MAX);
  EXPECT_EQ(out.aggregates(1).value(), 4);
  EXPECT_EQ(out.accepted(), 2u);
  EXPECT_EQ(out.start_ms(), 1000);
  EXPECT_EQ(out.end_ms(), 2000);
  EXPECT_EQ(out.series().labels().at("rank"), "0");
}

TEST(ConvertTest, SpecFromProtoTreatsAggregationsAsASet) {
  v1::StatSpec spec;
  spec.add_aggregations(v1::MAX);
  spec.add_aggregations(v1::MEAN);
  spec.add_aggregations(v1::MAX);
  spec.set_window_size_ms(1000);
  auto a = SpecFromProto(spec);
  ASSERT_TRUE(a.ok());
  v1::StatSpec reordered;
  reordered.add_aggregations(v1::MEAN);
  reordered.add_aggregations(v1::MAX);
  reordered.set_window_size_ms(1000);
  auto b = SpecFromProto(reordered);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*a, *b);
}

TEST(ConvertTest, MergeLabelsRefusesAKeyInBothNamingIt) {
  auto merged = MergeLabels({{"rank", "0"}}, {{"rank", "1"}});
  ASSERT_FALSE(merged.ok());
  EXPECT_THAT(std::string(merged.status().message()), HasSubstr("\"rank\""));
}

TEST(ConvertTest, MergeLabelsInterleavesSortedSets) {
  auto merged = MergeLabels({{"host", "h"}, {"rank", "0"}}, {{"device", "d"}, {"job", "j"}});
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(*merged, (Labels{{"device", "d"}, {"host", "h"}, {"job", "j"}, {"rank", "0"}}));
}

TEST(ConvertTest, SelectorFromProtoMapsEveryMatchOp) {
  v1::Selector proto;
  proto.set_stat("train.*");
  for (auto op : {v1::EQUAL, v1::NOT_EQUAL, v1::GLOB}) {
    v1::LabelMatcher* m = proto.add_labels();
    m->set_key("rank");
    m->set_value("0");
    m->set_op(op);
  }
  const Selector s = SelectorFromProto(proto);
  EXPECT_EQ(s.name, "train.*");
  ASSERT_THAT(s.labels, SizeIs(3));
  EXPECT_EQ(s.labels[0].op, LabelMatcher::Op::kEqual);
  EXPECT_EQ(s.labels[1].op, LabelMatcher::Op::kNotEqual);
  EXPECT_EQ(s.labels[2].op, LabelMatcher::Op::kGlob);
}

}  // namespace
}  // namespace torchmon::server

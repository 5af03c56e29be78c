// Selecting series by stat name (exact or glob) and label matchers.
#include "server/core/selector.h"

#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

LabelMatcher Match(std::string key, std::string value, LabelMatcher::Op op) {
  LabelMatcher m;
  m.key = std::move(key);
  m.value = std::move(value);
  m.op = op;
  return m;
}

const Labels kRank0 = {{"host", "node1"}, {"rank", "0"}};

TEST(GlobMatchTest, StarMatchesAnyRunIncludingEmpty) {
  EXPECT_TRUE(GlobMatch("train.*", "train.loss"));
  EXPECT_TRUE(GlobMatch("train.*", "train."));
  EXPECT_TRUE(GlobMatch("*", ""));
  EXPECT_TRUE(GlobMatch("*loss", "train.loss"));
  EXPECT_FALSE(GlobMatch("train.*", "eval.loss"));
}

TEST(GlobMatchTest, QuestionMarkMatchesExactlyOneByte) {
  EXPECT_TRUE(GlobMatch("rank?", "rank7"));
  EXPECT_FALSE(GlobMatch("rank?", "rank"));
  EXPECT_FALSE(GlobMatch("rank?", "rank10"));
}

TEST(GlobMatchTest, OtherCharactersMatchOnlyThemselves) {
  EXPECT_TRUE(GlobMatch("a.b", "a.b"));
  EXPECT_FALSE(GlobMatch("a.b", "axb"));  // '.' is not a regex wildcard
  EXPECT_FALSE(GlobMatch("", "a"));
  EXPECT_TRUE(GlobMatch("", ""));
}

TEST(GlobMatchTest, StarBacktracksToFindALaterMatch) {
  EXPECT_TRUE(GlobMatch("a*b*c", "aXbYbZc"));
  EXPECT_TRUE(GlobMatch("*.loss", "a.b.loss"));
  EXPECT_FALSE(GlobMatch("a*b*c", "aXbYcZ"));
  EXPECT_TRUE(GlobMatch("*a*a*a*", "xaxaxax"));
  EXPECT_FALSE(GlobMatch("*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"));
}

// Found by selector_fuzzer: a '*' in the pattern facing a '*' in the text
// was taken as a literal, so "*" did not match "*x".
TEST(GlobMatchTest, StarStaysAWildcardWhereTheTextHasAStar) {
  EXPECT_TRUE(GlobMatch("*", "*x"));
  EXPECT_TRUE(GlobMatch("a*", "a*b"));
  EXPECT_TRUE(GlobMatch("*b", "**b"));
  EXPECT_TRUE(GlobMatch("a*c", "a*bc"));
}

TEST(SelectorTest, EmptyNameMatchesEveryStat) {
  const Selector s;
  EXPECT_TRUE(s.Matches("anything", {}));
  EXPECT_TRUE(s.Matches("", kRank0));
}

TEST(SelectorTest, ExactNameMatchesOnlyThatName) {
  Selector s;
  s.name = "train.loss";
  EXPECT_TRUE(s.Matches("train.loss", kRank0));
  EXPECT_FALSE(s.Matches("train.loss2", kRank0));
  EXPECT_FALSE(s.Matches("train", kRank0));
}

TEST(SelectorTest, GlobNameMatchesByPattern) {
  Selector s;
  s.name = "train.*";
  EXPECT_TRUE(s.Matches("train.loss", {}));
  EXPECT_TRUE(s.Matches("train.lr", {}));
  EXPECT_FALSE(s.Matches("eval.loss", {}));
  s.name = "gpu?.util";
  EXPECT_TRUE(s.Matches("gpu3.util", {}));
  EXPECT_FALSE(s.Matches("gpu10.util", {}));
}

TEST(SelectorTest, MatchesSeriesKey) {
  Selector s;
  s.name = "train.loss";
  s.labels.push_back(Match("rank", "0", LabelMatcher::Op::kEqual));
  EXPECT_TRUE(s.Matches(SeriesKey{"train.loss", kRank0}));
  EXPECT_FALSE(s.Matches(SeriesKey{"train.loss", {{"rank", "1"}}}));
}

TEST(LabelMatcherTest, EqualComparesTheLabelValue) {
  EXPECT_TRUE(Match("rank", "0", LabelMatcher::Op::kEqual).Matches(kRank0));
  EXPECT_FALSE(Match("rank", "1", LabelMatcher::Op::kEqual).Matches(kRank0));
  EXPECT_FALSE(Match("rank", "", LabelMatcher::Op::kEqual).Matches(kRank0));
}

TEST(LabelMatcherTest, NotEqualIsTheNegationOfEqual) {
  EXPECT_FALSE(Match("rank", "0", LabelMatcher::Op::kNotEqual).Matches(kRank0));
  EXPECT_TRUE(Match("rank", "1", LabelMatcher::Op::kNotEqual).Matches(kRank0));
}

TEST(LabelMatcherTest, GlobMatchesTheLabelValueAsAPattern) {
  EXPECT_TRUE(Match("host", "node*", LabelMatcher::Op::kGlob).Matches(kRank0));
  EXPECT_TRUE(Match("host", "node?", LabelMatcher::Op::kGlob).Matches(kRank0));
  EXPECT_FALSE(Match("host", "gpu*", LabelMatcher::Op::kGlob).Matches(kRank0));
}

TEST(LabelMatcherTest, MissingLabelReadsAsEmpty) {
  EXPECT_TRUE(Match("job", "", LabelMatcher::Op::kEqual).Matches(kRank0));
  EXPECT_FALSE(Match("job", "x", LabelMatcher::Op::kEqual).Matches(kRank0));
  EXPECT_TRUE(Match("job", "x", LabelMatcher::Op::kNotEqual).Matches(kRank0));
  EXPECT_FALSE(Match("job", "", LabelMatcher::Op::kNotEqual).Matches(kRank0));
  EXPECT_TRUE(Match("job", "*", LabelMatcher::Op::kGlob).Matches(kRank0));
  EXPECT_FALSE(Match("job", "?*", LabelMatcher::Op::kGlob).Matches(kRank0));
}

TEST(LabelMatcherTest, KeyLookupFindsLabelsAnywhereInTheSortedSet) {
  const Labels labels = {{"a", "1"}, {"b", "2"}, {"c", "3"}, {"d", "4"}};
  EXPECT_TRUE(Match("a", "1", LabelMatcher::Op::kEqual).Matches(labels));
  EXPECT_TRUE(Match("c", "3", LabelMatcher::Op::kEqual).Matches(labels));
  EXPECT_TRUE(Match("d", "4", LabelMatcher::Op::kEqual).Matches(labels));
  EXPECT_TRUE(Match("bb", "", LabelMatcher::Op::kEqual).Matches(labels));
}

TEST(SelectorTest, AllConditionsMustHold) {
  Selector s;
  s.name = "train.*";
  s.labels.push_back(Match("rank", "0", LabelMatcher::Op::kEqual));
  s.labels.push_back(Match("host", "node*", LabelMatcher::Op::kGlob));
  EXPECT_TRUE(s.Matches("train.loss", kRank0));
  EXPECT_FALSE(s.Matches("eval.loss", kRank0));
  EXPECT_FALSE(s.Matches("train.loss", {{"host", "node1"}, {"rank", "1"}}));
  EXPECT_FALSE(s.Matches("train.loss", {{"host", "gpu1"}, {"rank", "0"}}));
}

}  // namespace
}  // namespace torchmon::server

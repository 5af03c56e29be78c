// The bounded event log and its per-name totals.
#include "server/core/event_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

constexpr int64_t kLogT0 = 1'700'000'000'000;

EventRecord Event(std::string name, Labels labels = {},
                  std::vector<std::pair<std::string, EventValue>> data = {}) {
  EventRecord e;
  e.name = std::move(name);
  e.timestamp_us = kLogT0 * 1000;
  e.labels = std::move(labels);
  e.data = std::move(data);
  return e;
}

std::vector<uint64_t> Sequences(const std::vector<EventRecord>& events) {
  std::vector<uint64_t> out;
  for (const EventRecord& e : events) out.push_back(e.sequence);
  return out;
}

// Totals of (name, labels), or a default Totals if none.
EventLog::Totals TotalsOf(const EventLog& log, const std::string& name, const Labels& labels = {}) {
  EventLog::Totals found;
  log.ForEachTotals([&](const SeriesKey& key, const EventLog::Totals& t) {
    if (key.stat == name && key.labels == labels) found = t;
  });
  return found;
}

class EventLogTest : public ::testing::Test {
 protected:
  ManualClock clock_{kLogT0};
};

TEST_F(EventLogTest, SequenceNumbersStartAtOneAndIncrease) {
  EventLog log(10, 60'000, clock_);
  EXPECT_EQ(log.Append(Event("a")), 1u);
  EXPECT_EQ(log.Append(Event("b")), 2u);
  EXPECT_EQ(log.Append(Event("c")), 3u);
  EXPECT_THAT(Sequences(log.Get(Selector{}, 0, 0)), ElementsAre(1, 2, 3));
}

TEST_F(EventLogTest, KeepsOnlyTheNewestEventsUpToCapacity) {
  EventLog log(3, 60'000, clock_);
  for (int i = 0; i < 5; ++i) log.Append(Event("e" + std::to_string(i)));
  EXPECT_EQ(log.size(), 3u);
  EXPECT_EQ(log.total_appended(), 5u);
  const auto events = log.Get(Selector{}, 0, 0);
  EXPECT_THAT(Sequences(events), ElementsAre(3, 4, 5));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].name, "e2");
  EXPECT_EQ(events[2].name, "e4");
}

TEST_F(EventLogTest, GetReturnsOnlyEventsAfterTheGivenSequence) {
  EventLog log(10, 60'000, clock_);
  for (int i = 0; i < 5; ++i) log.Append(Event("e"));
  EXPECT_THAT(Sequences(log.Get(Selector{}, 3, 0)), ElementsAre(4, 5));
  EXPECT_THAT(log.Get(Selector{}, 5, 0), IsEmpty());
}

TEST_F(EventLogTest, LimitKeepsTheMostRecentOldestFirst) {
  EventLog log(10, 60'000, clock_);
  for (int i = 0; i < 5; ++i) log.Append(Event("e"));
  EXPECT_THAT(Sequences(log.Get(Selector{}, 0, 2)), ElementsAre(4, 5));
}

TEST_F(EventLogTest, SelectorFiltersByNameAndLabels) {
  EventLog log(10, 60'000, clock_);
  log.Append(Event("epoch_end", {{"rank", "0"}}));  // 1
  log.Append(Event("checkpoint", {{"rank", "0"}}));  // 2
  log.Append(Event("epoch_end", {{"rank", "1"}}));  // 3
  log.Append(Event("epoch_start", {{"rank", "1"}}));  // 4
  Selector by_name;
  by_name.name = "epoch_*";
  EXPECT_THAT(Sequences(log.Get(by_name, 0, 0)), ElementsAre(1, 3, 4));
  Selector by_label;
  by_label.labels.push_back(LabelMatcher{"rank", "1", LabelMatcher::Op::kEqual});
  EXPECT_THAT(Sequences(log.Get(by_label, 0, 0)), ElementsAre(3, 4));
}

TEST_F(EventLogTest, LimitCountsOnlyMatchingEvents) {
  EventLog log(10, 60'000, clock_);
  log.Append(Event("a"));  // 1
  log.Append(Event("a"));  // 2
  log.Append(Event("b"));  // 3
  log.Append(Event("b"));  // 4
  Selector a;
  a.name = "a";
  EXPECT_THAT(Sequences(log.Get(a, 0, 1)), ElementsAre(2));
}

TEST_F(EventLogTest, TotalsCountEventsPerNameAndLabels) {
  EventLog log(2, 60'000, clock_);
  for (int i = 0; i < 4; ++i) log.Append(Event("epoch_end", {{"rank", "0"}}));
  log.Append(Event("epoch_end", {{"rank", "1"}}));
  // Totals outlive the bounded log.
  EXPECT_EQ(TotalsOf(log, "epoch_end", {{"rank", "0"}}).count, 4u);
  EXPECT_EQ(TotalsOf(log, "epoch_end", {{"rank", "1"}}).count, 1u);
}

TEST_F(EventLogTest, TotalsKeepTheLastNumericValueOfEachField) {
  EventLog log(10, 60'000, clock_);
  log.Append(Event("step", {},
                   {{"loss", 2.5}, {"step", int64_t{7}}, {"ok", true}, {"phase", std::string("train")}}));
  log.Append(Event("step", {}, {{"loss", 1.25}, {"ok", false}}));
  const auto totals = TotalsOf(log, "step");
  EXPECT_EQ(totals.count, 2u);
  // Sorted by field; strings excluded; bool as 0/1; int as double.
  EXPECT_THAT(totals.last_numeric,
              ElementsAre(Pair("loss", 1.25), Pair("ok", 0.0), Pair("step", 7.0)));
}

TEST_F(EventLogTest, TrueIsOne) {
  EventLog log(10, 60'000, clock_);
  log.Append(Event("e", {}, {{"ok", true}}));
  EXPECT_THAT(TotalsOf(log, "e").last_numeric, ElementsAre(Pair("ok", 1.0)));
}

TEST_F(EventLogTest, EventDataIsKeptVerbatim) {
  EventLog log(10, 60'000, clock_);
  log.Append(Event("e", {{"rank", "3"}}, {{"msg", std::string("hi")}, {"n", int64_t{-2}}}));
  const auto events = log.Get(Selector{}, 0, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].timestamp_us, kLogT0 * 1000);
  EXPECT_EQ(events[0].labels, (Labels{{"rank", "3"}}));
  ASSERT_EQ(events[0].data.size(), 2u);
  EXPECT_EQ(std::get<std::string>(events[0].data[0].second), "hi");
  EXPECT_EQ(std::get<int64_t>(events[0].data[1].second), -2);
}

TEST_F(EventLogTest, IdleTotalsExpireAfterTheTtl) {
  EventLog log(10, 60'000, clock_);
  log.Append(Event("old"));
  clock_.Advance(30'000);
  log.Append(Event("new"));
  clock_.Advance(29'999);
  EXPECT_EQ(log.ExpireIdle(), 0u);
  clock_.Advance(1);
  EXPECT_EQ(log.ExpireIdle(), 1u);
  EXPECT_EQ(TotalsOf(log, "old").count, 0u);
  EXPECT_EQ(TotalsOf(log, "new").count, 1u);
}

}  // namespace
}  // namespace torchmon::server

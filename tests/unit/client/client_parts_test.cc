// The parts ClientCore holds, each alone: option checks, the event queue,
// the ack ledger, the stat registry and the retirement of closed stats.
// Pure: no sockets, no threads, no sleeps.
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "detail/ack_ledger.h"
#include "detail/event_queue.h"
#include "detail/option_checks.h"
#include "detail/outgoing_batch.h"
#include "detail/stat_registry.h"
#include "detail/stat_retirement.h"
#include "detail/stat_state.h"
#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

using std::chrono::milliseconds;

// --- option checks ---

TEST(OptionChecksTest, NormalizeMakesEveryDurationUsable) {
  ClientOptions o;
  o.target = "unix:///tmp/x.sock";
  o.send_interval = milliseconds(0);
  o.initial_backoff = milliseconds(-5);
  o.max_backoff = milliseconds(0);
  o.destructor_flush_timeout = milliseconds(-1);
  const ClientOptions n = NormalizeOptions(o);
  EXPECT_EQ(n.send_interval, milliseconds(1));
  EXPECT_EQ(n.initial_backoff, milliseconds(1));
  EXPECT_EQ(n.max_backoff, milliseconds(1));
  EXPECT_EQ(n.destructor_flush_timeout, milliseconds(0));
  EXPECT_EQ(n.target, "unix:///tmp/x.sock");
}

TEST(OptionChecksTest, ABudgetBelowOneBatchIsTheOneRefusal) {
  ClientOptions o;
  o.buffer_bytes = ClientOptions::kMinBufferBytes - 1;
  EXPECT_THROW(CheckedBufferBudget(o), std::invalid_argument);
  o.buffer_bytes = ClientOptions::kMinBufferBytes;
  EXPECT_EQ(CheckedBufferBudget(o), ClientOptions::kMinBufferBytes);
}

TEST(OptionChecksTest, AnInvalidClientLabelIsLeftOutAndNamed) {
  ClientOptions o;
  o.labels_from_environment = false;
  o.labels = {{"job", "a"}, {"bad key", "b"}, {"job", "c"}};
  std::vector<std::string> errors;
  EXPECT_EQ(ResolveClientLabels(o, &errors), (Labels{{"job", "c"}}));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("client label ignored"), std::string::npos) << errors[0];
}

TEST(OptionChecksTest, ADefinitionIsCheckedAndKeyedByItsSeries) {
  StatOptions options;
  options.labels = {{"phase", "train"}};
  options.max_samples = 5;
  const CheckedDefinition a = CheckStatDefinition(
      "loss", {Aggregation::MEAN, Quantile(0.99)}, milliseconds(1000), options, {{"rank", "0"}});
  ASSERT_TRUE(a.status.ok()) << a.status;
  EXPECT_EQ(a.definition.name(), "loss");
  EXPECT_EQ(a.definition.spec().aggregations_size(), 1);
  EXPECT_EQ(a.definition.spec().quantiles_size(), 1);
  EXPECT_EQ(a.definition.spec().max_samples(), 5);
  EXPECT_EQ(a.definition.spec().requested_window_size_ms(), 0);  // the same as the window
  EXPECT_EQ(a.definition.labels().at("phase"), "train");

  // Another window or cap is the same series; other labels are another.
  StatOptions other_cap = options;
  other_cap.max_samples = 0;
  EXPECT_EQ(CheckStatDefinition("loss", {Aggregation::SUM}, milliseconds(10), other_cap, {})
                .key_hash,
            a.key_hash);
  StatOptions other_labels = options;
  other_labels.labels = {{"phase", "eval"}};
  EXPECT_NE(CheckStatDefinition("loss", {Aggregation::MEAN}, milliseconds(1000), other_labels, {})
                .key_hash,
            a.key_hash);

  // A label the client's identity already carries is refused, as the
  // daemon would.
  StatOptions clash;
  clash.labels = {{"rank", "1"}};
  const CheckedDefinition c =
      CheckStatDefinition("loss", {Aggregation::MEAN}, milliseconds(1000), clash, {{"rank", "0"}});
  EXPECT_FALSE(c.status.ok());
  EXPECT_NE(c.status.message().find("identity label"), std::string::npos) << c.status;
  EXPECT_FALSE(CheckStatDefinition("", {Aggregation::MEAN}, milliseconds(1000), {}, {}).status.ok());
}

// --- event queue ---

v1::Event Named(const std::string& name) {
  v1::Event e;
  e.set_name(name);
  return e;
}

TEST(EventQueueTest, HoldsAtMostItsBoundAndCountsEachEventUntilResolved) {
  EventQueue queue(2);
  EXPECT_FALSE(queue.Pending());
  EXPECT_TRUE(queue.Push(Named("a")));
  EXPECT_TRUE(queue.Push(Named("b")));
  EXPECT_FALSE(queue.Push(Named("c")));  // full: nothing queued
  EXPECT_TRUE(queue.Pending());

  EventQueue::Taken taken = queue.TakeAll();
  ASSERT_EQ(taken.events.size(), 2u);
  EXPECT_TRUE(queue.Pending());  // taken is not written
  EXPECT_TRUE(queue.Push(Named("c")));  // room again
  queue.Resolve(2);
  EXPECT_TRUE(queue.Pending());  // "c"
  EXPECT_EQ(queue.DropUnsent(), 1u);
  EXPECT_FALSE(queue.Pending());
}

TEST(EventQueueTest, WhatACycleCouldNotWriteGoesBackFirstInOrder) {
  EventQueue queue(10);
  queue.Push(Named("a"));
  queue.Push(Named("b"));
  queue.CountDrop("x");
  EventQueue::Taken taken = queue.TakeAll();
  queue.Push(Named("c"));
  queue.CountDrop("x");
  taken.events.pop_front();  // "a" was written
  queue.Requeue(taken);
  EXPECT_TRUE(taken.events.empty() && taken.drops.empty());
  EventQueue::Taken again = queue.TakeAll();
  ASSERT_EQ(again.events.size(), 2u);
  EXPECT_EQ(again.events[0].name(), "b");
  EXPECT_EQ(again.events[1].name(), "c");
  ASSERT_EQ(again.drops.size(), 1u);
  EXPECT_EQ(again.drops[0], (std::pair<std::string, uint64_t>{"x", 2}));
}

TEST(EventQueueTest, DropsPastTheNameBoundAreCountedTogether) {
  EventQueue queue(1);
  for (size_t i = 0; i < EventQueue::kMaxDropNames + 3; ++i) {
    queue.CountDrop("event." + std::to_string(i));
  }
  queue.CountDrop("event.0");
  const EventQueue::Taken taken = queue.TakeAll();
  EXPECT_EQ(taken.drops.size(), EventQueue::kMaxDropNames + 1);
  uint64_t total = 0, other = 0, first = 0;
  for (const auto& [name, n] : taken.drops) {
    total += n;
    if (name == EventQueue::kOtherEvents) other = n;
    if (name == "event.0") first = n;
  }
  EXPECT_EQ(total, EventQueue::kMaxDropNames + 4);
  EXPECT_EQ(other, 3u);
  EXPECT_EQ(first, 2u);
}

// --- ack ledger ---

struct Stats {
  Stats() : buffers(std::make_shared<ClientBuffers>(size_t{8} << 20)) {
    for (uint32_t id : {1u, 2u}) {
      v1::StatDefinition def;
      def.set_id(id);
      def.set_name("s" + std::to_string(id));
      def.mutable_spec()->add_aggregations(v1::SUM);
      def.mutable_spec()->set_window_size_ms(1000);
      stats.push_back(std::make_shared<StatState>(def, true, buffers));
    }
  }
  // A numbered batch: `blocked` samples of stat 1 (a block) and one of
  // stat 2 (the columns).
  std::shared_ptr<const OutgoingBatch> Batch(uint64_t sequence, int blocked) const {
    auto out = std::make_shared<OutgoingBatch>();
    std::vector<LogSample> samples;
    for (int i = 0; i < blocked; ++i) samples.push_back({1, 1.0, 1000 + i});
    samples.push_back({2, 2.0, 1000});
    SampleGroups groups;
    out->AddSamples(samples, groups);
    out->batch->set_sequence(sequence);
    return out;
  }
  const StatCounts& counts(uint32_t id) const { return buffers->table.At(id); }
  std::shared_ptr<ClientBuffers> buffers;
  std::vector<std::shared_ptr<StatState>> stats;
};

TEST(AckLedgerTest, AnAckSettlesTheBatchesUpToItsSequence) {
  Stats s;
  AckLedger ledger(s.buffers->table);
  ledger.Keep(s.Batch(1, 4));
  ledger.Keep(s.Batch(2, 5));
  EXPECT_GT(ledger.bytes(), 0u);
  EXPECT_TRUE(ledger.StillKept(1));

  const AckLedger::Retired retired = ledger.Acknowledge(1);
  EXPECT_EQ(retired.batches, 1u);
  EXPECT_FALSE(ledger.StillKept(1));
  EXPECT_TRUE(ledger.StillKept(2));
  EXPECT_EQ(s.counts(1).delivered.load(), 4u);
  EXPECT_EQ(s.counts(2).delivered.load(), 1u);
  EXPECT_EQ(ledger.samples_settled(), 5u);
  ASSERT_EQ(ledger.Kept().size(), 1u);
  EXPECT_EQ(ledger.Kept()[0]->batch->sequence(), 2u);

  // An ack of what is settled already changes nothing.
  EXPECT_EQ(ledger.Acknowledge(1).batches, 0u);
  EXPECT_EQ(ledger.Acknowledge(2).batches, 1u);
  EXPECT_TRUE(ledger.empty());
  EXPECT_EQ(ledger.bytes(), 0u);
  EXPECT_EQ(s.counts(1).delivered.load(), 9u);
  EXPECT_EQ(s.counts(1).delivered_current.load(), 9u);
}

TEST(AckLedgerTest, ANewDaemonProcessStartsThePerDaemonCountsAgain) {
  Stats s;
  AckLedger ledger(s.buffers->table);
  EXPECT_FALSE(ledger.SeeDaemon(11, 2));  // the first daemon is no restart
  ledger.Keep(s.Batch(1, 4));
  ledger.Acknowledge(1);
  EXPECT_FALSE(ledger.SeeDaemon(11, 2));
  EXPECT_FALSE(ledger.SeeDaemon(0, 2));  // an ack that names none
  EXPECT_EQ(s.counts(1).delivered_current.load(), 4u);
  EXPECT_TRUE(ledger.SeeDaemon(12, 2));
  EXPECT_EQ(s.counts(1).delivered_current.load(), 0u);
  EXPECT_EQ(s.counts(1).delivered.load(), 4u);
}

TEST(AckLedgerTest, AbandoningCountsEveryKeptSampleAsAbandoned) {
  Stats s;
  AckLedger ledger(s.buffers->table);
  ledger.Keep(s.Batch(1, 4));
  ledger.Keep(s.Batch(2, 0));
  EXPECT_EQ(ledger.AbandonAll().batches, 2u);
  EXPECT_TRUE(ledger.empty());
  EXPECT_EQ(s.counts(1).abandoned.load(), 4u);
  EXPECT_EQ(s.counts(2).abandoned.load(), 2u);
  EXPECT_EQ(s.counts(1).delivered.load(), 0u);
  EXPECT_EQ(ledger.samples_settled(), 6u);
}

TEST(AckLedgerTest, AFlushTicketIsWrittenByTheCycleThatServedIt) {
  Stats s;
  AckLedger ledger(s.buffers->table);
  EXPECT_FALSE(ledger.FlushWaiting());
  const uint64_t first = ledger.RequestFlush();
  const uint64_t second = ledger.RequestFlush();
  EXPECT_TRUE(ledger.FlushWaiting());
  ledger.CycleWrote(first, 7);  // a cycle that started between the two
  EXPECT_TRUE(ledger.FlushWritten(first));
  EXPECT_FALSE(ledger.FlushWritten(second));
  EXPECT_TRUE(ledger.FlushWaiting());
  ledger.CycleWrote(second, 9);
  EXPECT_FALSE(ledger.FlushWaiting());
  EXPECT_EQ(ledger.written_sequence(), 9u);
  EXPECT_EQ(ledger.flush_requested(), second);
}

// --- registry and retirement ---

std::shared_ptr<StatState> MakeStat(const std::shared_ptr<ClientBuffers>& buffers,
                                    StatRegistry& registry, uint64_t key_hash, bool valid = true) {
  v1::StatDefinition def;
  def.set_id(registry.NextId());
  def.set_name("stat");
  auto stat = std::make_shared<StatState>(def, valid, buffers);
  stat->key_hash = key_hash;
  registry.Add(stat);
  return stat;
}

TEST(StatRegistryTest, HandsOutIdsOnceAndNewValidStatsForTheNextCycle) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  EXPECT_EQ(registry.max_id(), 0u);
  auto a = MakeStat(buffers, registry, 100);
  auto invalid = MakeStat(buffers, registry, 200, /*valid=*/false);
  EXPECT_EQ(a->id, 1u);
  EXPECT_EQ(invalid->id, 2u);
  EXPECT_EQ(registry.max_id(), 2u);
  EXPECT_EQ(registry.TakeNew(), (std::vector<StatState*>{a.get()}));
  EXPECT_TRUE(registry.TakeNew().empty());
  EXPECT_EQ(registry.All().size(), 2u);
  // Neither definition is acknowledged yet (the invalid one never will be).
  EXPECT_TRUE(registry.AnyPendingDefinitionOrDrops());
  a->ever_defined = true;
  EXPECT_FALSE(registry.AnyPendingDefinitionOrDrops());
}

TEST(StatRegistryTest, AClosedStatMakesTheNextOfItsSeriesAfterReleaseUntilRetired) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  auto a = MakeStat(buffers, registry, 100);
  auto b = MakeStat(buffers, registry, 300);
  EXPECT_FALSE(registry.HasClosed(100));
  a->closed = true;
  EXPECT_TRUE(registry.HasClosed(100));
  EXPECT_FALSE(registry.HasClosed(300));

  std::vector<uint32_t> asked;
  registry.RetireClosed(
      [&](StatState& stat) {
        asked.push_back(stat.id);
        return false;  // kept
      },
      0);
  EXPECT_EQ(asked, (std::vector<uint32_t>{1}));  // only closed stats are asked
  EXPECT_EQ(registry.All().size(), 2u);
  registry.RetireClosed([](StatState&) { return true; }, 0);
  EXPECT_FALSE(registry.HasClosed(100));
  ASSERT_EQ(registry.All().size(), 1u);
  EXPECT_EQ(registry.All()[0].get(), b.get());
}

TEST(StatRegistryTest, StatsOfOneSeriesRetireInAnyOrder) {
  // A series' first stat and the others (its Stats made again before the
  // old ones retired) are kept apart; retiring any of them, the first
  // included, leaves the rest found.
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  std::vector<std::shared_ptr<StatState>> series;
  for (int i = 0; i < 5; ++i) series.push_back(MakeStat(buffers, registry, 100));
  auto other = MakeStat(buffers, registry, 300);
  const auto retire_closed = [&] { registry.RetireClosed([](StatState&) { return true; }, 0); };
  // Closed one at a time: the first, one in the middle, the last.
  for (int i : {0, 2, 4}) {
    EXPECT_FALSE(registry.HasClosed(100)) << i;
    series[i]->closed = true;
    EXPECT_TRUE(registry.HasClosed(100)) << i;
    EXPECT_FALSE(registry.HasClosed(300)) << i;
    retire_closed();
    EXPECT_FALSE(registry.HasClosed(100)) << i;
  }
  // Stats 1 and 3 are left; each is still found when closed.
  series[3]->closed = true;
  EXPECT_TRUE(registry.HasClosed(100));
  series[3]->closed = false;
  series[1]->closed = true;
  EXPECT_TRUE(registry.HasClosed(100));
  series[3]->closed = true;
  retire_closed();
  EXPECT_FALSE(registry.HasClosed(100));
  ASSERT_EQ(registry.All().size(), 1u);
  EXPECT_EQ(registry.All()[0].get(), other.get());
  // The series starts again from nothing.
  auto again = MakeStat(buffers, registry, 100);
  EXPECT_EQ(again->key_slot, 0u);
  again->closed = true;
  EXPECT_TRUE(registry.HasClosed(100));
  retire_closed();
  EXPECT_FALSE(registry.HasClosed(100));
}

TEST(StatRetirementTest, AClosedStatIsReleasedAfterACompleteCycleThenRetired) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  auto stat = MakeStat(buffers, registry, 100);
  stat->ever_defined = true;
  stat->sent.defined_on = 1;  // defined on stream 1
  StatRetirement retirement;
  const auto now = StatRetirement::Clock::now();

  EXPECT_FALSE(retirement.LookDue(0, 0, 1, now));  // nothing closed
  stat->closed = true;
  ASSERT_TRUE(retirement.LookDue(1, 0, 1, now));
  // Seen closed at cycle 0: its last samples may still be in the logs.
  EXPECT_FALSE(retirement.Consider(*stat, 0, 1));
  EXPECT_TRUE(retirement.TakeReleases(1).empty());
  EXPECT_FALSE(retirement.LookDue(1, 0, 1, now));

  // Cycle 1 completed: released on stream 1, and kept until that is
  // written.
  ASSERT_TRUE(retirement.LookDue(1, 1, 1, now));
  EXPECT_FALSE(retirement.Consider(*stat, 1, 1));
  EXPECT_EQ(retirement.TakeReleases(1), (std::vector<uint32_t>{stat->id}));
  EXPECT_TRUE(retirement.TakeReleases(1).empty());  // each release once

  // Nothing pending: retired at the next look (closed stats were kept, so
  // one comes after kLookInterval).
  EXPECT_FALSE(retirement.LookDue(1, 2, 1, now));
  ASSERT_TRUE(retirement.LookDue(1, 2, 1, now + StatRetirement::kLookInterval));
  EXPECT_TRUE(retirement.Consider(*stat, 2, 1));
}

TEST(StatRetirementTest, AStatWithSamplesUnacknowledgedIsNotRetired) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  auto stat = MakeStat(buffers, registry, 100);
  stat->ever_defined = true;
  stat->closed = true;
  stat->sent.taken = 3;  // taken into batches, none acknowledged
  StatRetirement retirement;
  ASSERT_TRUE(retirement.LookDue(1, 0, 1, StatRetirement::Clock::now()));
  EXPECT_FALSE(retirement.Consider(*stat, 0, 0));
  EXPECT_FALSE(retirement.Consider(*stat, 5, 0));  // no stream: no release either
  EXPECT_TRUE(retirement.TakeReleases(0).empty());
  Bump(stat->counts.delivered, 3);
  EXPECT_TRUE(retirement.Consider(*stat, 5, 0));
}

TEST(StatRetirementTest, AFlushWaitsForTheReleasesOfTheStatsClosedBeforeIt) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  auto stat = MakeStat(buffers, registry, 100);
  auto invalid = MakeStat(buffers, registry, 200, /*valid=*/false);
  stat->ever_defined = true;
  stat->sent.defined_on = 1;
  StatRetirement retirement;
  const auto now = StatRetirement::Clock::now();
  EXPECT_EQ(retirement.ReleasesWrittenBy(), 0u);
  // An invalid stat is never released: nothing to wait for.
  invalid->closed = true;
  ASSERT_TRUE(retirement.LookDue(1, 4, 1, now));
  retirement.Consider(*invalid, 4, 1);
  EXPECT_EQ(retirement.ReleasesWrittenBy(), 0u);
  // Seen closed before cycle 5: released at the look after it, written by
  // cycle 6.
  stat->closed = true;
  ASSERT_TRUE(retirement.LookDue(2, 4, 1, now));
  retirement.Consider(*stat, 4, 1);
  EXPECT_EQ(retirement.ReleasesWrittenBy(), 6u);
  ASSERT_TRUE(retirement.LookDue(2, 5, 1, now));
  retirement.Consider(*stat, 5, 1);
  EXPECT_EQ(retirement.TakeReleases(1), (std::vector<uint32_t>{stat->id}));
  EXPECT_EQ(retirement.ReleasesWrittenBy(), 6u);
}

TEST(StatRetirementTest, ANewStreamThatDefinedAClosedStatAgainReleasesItAtOnce) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  auto stat = MakeStat(buffers, registry, 100);
  stat->ever_defined = true;
  stat->sent.defined_on = 1;
  stat->sent.taken = 2;  // unacknowledged: kept
  StatRetirement retirement;
  const auto now = StatRetirement::Clock::now();
  stat->closed = true;
  ASSERT_TRUE(retirement.LookDue(1, 0, 1, now));
  EXPECT_FALSE(retirement.Consider(*stat, 0, 1));
  ASSERT_TRUE(retirement.LookDue(1, 1, 1, now));
  EXPECT_FALSE(retirement.Consider(*stat, 1, 1));
  EXPECT_EQ(retirement.TakeReleases(1), (std::vector<uint32_t>{stat->id}));
  EXPECT_FALSE(retirement.LookDue(1, 2, 1, now));
  // Stream 2 opened with every stat's definition, this one's too: it
  // needs a release there, in the next cycle, not a second later.
  stat->sent.defined_on = 2;
  ASSERT_TRUE(retirement.LookDue(1, 2, 2, now));
  EXPECT_FALSE(retirement.Consider(*stat, 2, 2));
  EXPECT_EQ(retirement.TakeReleases(2), (std::vector<uint32_t>{stat->id}));
  EXPECT_EQ(retirement.ReleasesWrittenBy(), 3u);
}

TEST(StatRegistryTest, ARetiredStatsIdIsFreeOnceItsBatchesAreAcknowledgedLowestFirst) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  std::vector<std::shared_ptr<StatState>> stats;
  for (int i = 0; i < 4; ++i) {
    stats.push_back(MakeStat(buffers, registry, 100 + i));
    stats.back()->ever_defined = true;
  }
  stats[2]->closed = true;
  registry.RetireClosed([](StatState&) { return true; }, /*written_through=*/7);
  stats[0]->closed = true;
  registry.RetireClosed([](StatState&) { return true; }, 9);
  EXPECT_EQ(registry.ids_waiting(), 2u);
  // Batch 7 still kept: nothing is free, a new stat gets a new id.
  EXPECT_TRUE(registry.FreeIdsSettledBefore(7).empty());
  EXPECT_EQ(registry.NextId(), 5u);
  // Acknowledged through 9: both, in retirement order; handed out lowest
  // first, then new ones again.
  EXPECT_EQ(registry.FreeIdsSettledBefore(10), (std::vector<uint32_t>{3, 1}));
  EXPECT_EQ(registry.ids_free(), 2u);
  EXPECT_EQ(registry.NextId(), 1u);
  EXPECT_EQ(registry.NextId(), 3u);
  EXPECT_EQ(registry.NextId(), 6u);
  EXPECT_EQ(registry.max_id(), 6u);
}

TEST(StatRegistryTest, AStatDestroyedBeforeItWasDefinedFreesItsIdAtOnce) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  auto stat = MakeStat(buffers, registry, 100);
  EXPECT_TRUE(registry.AnyPendingDefinitionOrDrops());
  stat->closed = true;  // nothing of it will be sent: nothing pending
  EXPECT_FALSE(registry.AnyPendingDefinitionOrDrops());
  registry.RetireClosed([](StatState&) { return true; }, /*written_through=*/5);
  EXPECT_EQ(registry.FreeIdsSettledBefore(1), (std::vector<uint32_t>{1}));
  EXPECT_EQ(registry.NextId(), 1u);
}

TEST(StatRegistryTest, AStatRefusedAnIdLeavesIdZeroToTheOthers) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  StatRegistry registry;
  v1::StatDefinition def;
  def.set_id(0);  // as RegisterStat makes a stat past kMaxIds
  auto refused = std::make_shared<StatState>(def, /*is_valid=*/false, buffers);
  registry.Add(refused);
  refused->closed = true;
  registry.RetireClosed([](StatState&) { return true; }, 0);
  EXPECT_EQ(registry.ids_waiting(), 0u);
}

TEST(FreedCountsTest, AFreedIdsCountsMoveToTheTotalsAndItsEntriesStartAgain) {
  StatTable table;
  SenderTable sent;
  StatCounts& c = table.Create(5);
  SenderSlot& slot = sent.Create(5);
  Bump(c.rejected, 2);
  Bump(c.delivered, 7);
  Bump(c.drops_acked, 2);
  Bump(c.delivered_current, 7);
  Bump(c.drops_acked_current, 2);
  Bump(c.abandoned, 1);
  Bump(slot.taken, 8);
  slot.defined_on = 3;
  FreedCounts freed;
  freed.Absorb(c, slot);
  EXPECT_EQ(freed.rejected, 2u);
  EXPECT_EQ(freed.delivered, 7u);
  EXPECT_EQ(freed.abandoned, 1u);
  EXPECT_EQ(freed.taken, 8u);
  for (const auto* counter : {&c.rejected, &c.delivered, &c.drops_acked, &c.delivered_current,
                              &c.drops_acked_current, &c.abandoned, &slot.taken}) {
    EXPECT_EQ(counter->load(), 0u);
  }
  // Not defined on any stream: the id's next stat is defined before its
  // first sample goes out.
  EXPECT_EQ(slot.defined_on, 0u);
}

TEST(StatStateTest, AStateDestroyedAfterItsIdServesAnotherStatLeavesTheEntryAlone) {
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  v1::StatDefinition def;
  def.set_id(9);
  auto old_state = std::make_unique<StatState>(def, true, buffers);
  auto new_state = std::make_unique<StatState>(def, true, buffers);
  EXPECT_EQ(buffers->table.At(9).state.load(), new_state.get());
  old_state.reset();
  EXPECT_EQ(buffers->table.At(9).state.load(), new_state.get());
  new_state.reset();
  EXPECT_EQ(buffers->table.At(9).state.load(), nullptr);
}

}  // namespace
}  // namespace torchmon::detail

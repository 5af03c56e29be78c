// Applying torchmon.v1 IngestBatch messages: decoding, binding stat ids to
// series, and refusing bad parts by name while applying the rest.
#include "server/ingest/ingest_session.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/clock.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int64_t kT0 = 1'700'000'000'000;  // ms
constexpr int64_t kGrace = 2000;

int32_t Code(absl::StatusCode code) { return static_cast<int32_t>(code); }

v1::StatDefinition* AddDefinition(v1::IngestBatch& batch, uint32_t id, const std::string& name,
                                  std::vector<v1::Aggregation> aggregations,
                                  int64_t window_ms = 1000, int64_t max_samples = 0) {
  v1::StatDefinition* def = batch.add_definitions();
  def->set_id(id);
  def->set_name(name);
  for (v1::Aggregation a : aggregations) def->mutable_spec()->add_aggregations(a);
  def->mutable_spec()->set_window_size_ms(window_ms);
  def->mutable_spec()->set_max_samples(max_samples);
  return def;
}

void AddSamples(v1::IngestBatch& batch, uint32_t stat_id, int64_t base_time_us,
                std::vector<double> values, std::vector<int64_t> deltas_us = {}) {
  v1::SampleBlock* block = batch.add_samples();
  block->set_stat_id(stat_id);
  block->set_base_time_us(base_time_us);
  for (double v : values) block->add_values(v);
  for (int64_t d : deltas_us) block->add_time_deltas_us(d);
}

// Batch 1 of a redefinition that waits: id 1 binds "s" (one sample), id 2
// redefines "s" after id 1's release, its samples 5 and 6 held meanwhile.
v1::IngestBatch ARedefinitionThatWaits() {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  AddDefinition(batch, 1, "s", {v1::SUM}, 1000);
  AddSamples(batch, 1, kT0 * 1000, {1});
  AddDefinition(batch, 2, "s", {v1::SUM}, 2000)->set_after_release(true);
  AddSamples(batch, 2, kT0 * 1000 + 10, {5, 6});
  return batch;
}

// Batch `sequence` after it: one more sample under id 2, then id 1's
// release, which settles the waiting definition.
v1::IngestBatch TheReleaseItWaitsFor(uint64_t sequence) {
  v1::IngestBatch batch;
  batch.set_sequence(sequence);
  AddSamples(batch, 2, kT0 * 1000 + 20, {7});
  batch.add_released(1);
  return batch;
}

void SetHello(v1::IngestBatch& batch, std::vector<std::pair<std::string, std::string>> labels) {
  for (const auto& [k, v] : labels) (*batch.mutable_hello()->mutable_labels())[k] = v;
  batch.mutable_hello()->set_client_name("test-client");
}

class IngestSessionTest : public ::testing::Test {
 protected:
  static AggregatorOptions Options() {
    AggregatorOptions o;
    o.grace_ms = kGrace;
    o.series_ttl_ms = 10'000;
    o.max_future_skew_ms = 60'000;
    return o;
  }

  v1::IngestAck Apply(const v1::IngestBatch& batch) {
    v1::IngestAck ack;
    session_.Apply(batch, &ack);
    return ack;
  }

  // Applies `batch` as the daemon receives it: encoded and decoded again, so
  // sint64 deltas go through their zigzag wire encoding.
  v1::IngestAck ApplyFromWire(const v1::IngestBatch& batch) {
    v1::IngestBatch decoded;
    EXPECT_TRUE(decoded.ParseFromString(batch.SerializeAsString()));
    return Apply(decoded);
  }

  std::vector<ClosedWindow> CloseEverythingDue(int64_t now_ms) {
    clock_.Set(now_ms);
    aggregator_.CloseDueWindows();
    return aggregator_.GetWindows(Selector{}, 0, 0, 0);
  }

  SeriesSnapshot Series(const std::string& name) {
    Selector s;
    s.name = name;
    auto list = aggregator_.ListSeries(s);
    EXPECT_THAT(list, SizeIs(1)) << name;
    return list.empty() ? SeriesSnapshot{} : list[0];
  }

  ManualClock clock_{kT0};
  Aggregator aggregator_{Options(), clock_};
  EventLog events_{100, 60'000, clock_};
  DaemonStats stats_;
  IngestSession session_{aggregator_, events_, stats_, nullptr};
};

TEST_F(IngestSessionTest, HelloDefinitionAndZigzagDeltasLandInTheRightWindows) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  SetHello(batch, {{"job", "j"}, {"rank", "0"}});
  AddDefinition(batch, 1, "train.loss", {v1::MEAN, v1::COUNT, v1::VALUE});
  // t = base + 100 ms, + 950 ms (= 1050 ms), - 100 ms (= 950 ms).
  AddSamples(batch, 1, kT0 * 1000, {1, 2, 3}, {100'000, 950'000, -100'000});
  clock_.Set(kT0 + 1100);
  const v1::IngestAck ack = ApplyFromWire(batch);
  EXPECT_THAT(ack.errors(), IsEmpty());
  EXPECT_EQ(session_.client_name(), "test-client");

  const auto windows = CloseEverythingDue(kT0 + 2000 + kGrace);
  ASSERT_THAT(windows, SizeIs(2));
  EXPECT_EQ(windows[0].series->ToString(), "train.loss{job=\"j\",rank=\"0\"}");
  // [kT0, kT0+1000): samples 1 (100 ms) and 3 (950 ms).
  EXPECT_EQ(windows[0].start_ms, kT0);
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kCount), 2);
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kMean), 2);
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kValue), 3);
  // [kT0+1000, kT0+2000): sample 2 (1050 ms).
  EXPECT_EQ(windows[1].start_ms, kT0 + 1000);
  EXPECT_EQ(windows[1].stats.Get(Aggregation::kValue), 2);
  EXPECT_EQ(windows[1].stats.Get(Aggregation::kCount), 1);
}

TEST_F(IngestSessionTest, EmptyTimeDeltasStampEverySampleAtTheBaseTime) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::SUM});
  AddSamples(batch, 1, (kT0 + 999) * 1000, {1, 2, 4});
  Apply(batch);
  const auto windows = CloseEverythingDue(kT0 + 1000 + kGrace);
  ASSERT_THAT(windows, SizeIs(1));
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kSum), 7);
}

TEST_F(IngestSessionTest, AckSequenceIsTheBatchSequence) {
  v1::IngestBatch batch;
  batch.set_sequence(42);
  EXPECT_EQ(Apply(batch).sequence(), 42u);
}

TEST_F(IngestSessionTest, UnknownStatIdIsNotFoundAndTheRestOfTheBatchIsApplied) {
  v1::IngestBatch batch;
  batch.set_sequence(3);
  AddDefinition(batch, 1, "s", {v1::COUNT});
  AddSamples(batch, 7, kT0 * 1000, {1, 2, 3, 4});
  AddSamples(batch, 1, kT0 * 1000, {5, 6});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  const v1::IngestError& e = ack.errors(0);
  EXPECT_EQ(e.code(), Code(absl::StatusCode::kNotFound));
  EXPECT_EQ(e.stat_id(), 7u);
  EXPECT_EQ(e.sequence(), 3u);
  EXPECT_EQ(e.samples_refused(), 4u);
  EXPECT_THAT(e.message(), HasSubstr("stat id 7"));
  EXPECT_EQ(stats_.samples_refused.load(), 4u);
  EXPECT_EQ(stats_.samples_received.load(), 6u);
  EXPECT_EQ(stats_.batches_with_errors.load(), 1u);
  EXPECT_EQ(Series("s").counters.accepted, 2u);
}

TEST_F(IngestSessionTest, ConflictingRedefinitionOnTheSameStreamKeepsTheFirstBinding) {
  v1::IngestBatch first;
  first.set_sequence(1);
  AddDefinition(first, 1, "loss", {v1::SUM}, /*window_ms=*/1000);
  AddSamples(first, 1, kT0 * 1000 + 100, {1.0});
  ASSERT_THAT(Apply(first).errors(), IsEmpty());

  v1::IngestBatch second;
  second.set_sequence(2);
  AddDefinition(second, 1, "loss", {v1::SUM}, /*window_ms=*/2000);
  AddSamples(second, 1, kT0 * 1000 + 200, {2.0});
  const v1::IngestAck ack = Apply(second);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(ack.errors(0).samples_refused(), 0u);
  // The samples after the refused re-definition still reach the first one.
  EXPECT_EQ(Series("loss").counters.accepted, 2u);
  EXPECT_EQ(Series("loss").spec.window_ms, 1000);
}

// --- Redefinition: a Stat made again with another spec ----------------------

// Upstream's sequence on one stream, as the client sends it: the first Stat
// gone (its last samples, then its release), the next one defined in the
// same batch, before the release, with its samples.
TEST_F(IngestSessionTest, ADefinitionWaitsForThisStreamsReleaseInTheSameBatch) {
  v1::IngestBatch first;
  first.set_sequence(1);
  AddDefinition(first, 1, "asdf", {v1::SUM, v1::COUNT}, /*window_ms=*/1000, /*max_samples=*/3);
  AddSamples(first, 1, kT0 * 1000 + 100, {1, 2});
  ASSERT_THAT(Apply(first).errors(), IsEmpty());

  v1::IngestBatch second;
  second.set_sequence(2);
  AddDefinition(second, 2, "asdf", {v1::SUM, v1::COUNT}, /*window_ms=*/100)->set_after_release(true);
  AddSamples(second, 1, kT0 * 1000 + 200, {3});                  // the first Stat's last
  AddSamples(second, 2, kT0 * 1000 + 300'000, {10, 20, 30, 40});  // the second's
  second.add_released(1);
  clock_.Set(kT0 + 400);
  const v1::IngestAck ack = Apply(second);
  EXPECT_THAT(ack.errors(), IsEmpty());
  EXPECT_EQ(stats_.series_redefined.load(), 1u);
  const SeriesSnapshot series = Series("asdf");
  EXPECT_EQ(series.spec.window_ms, 100);
  EXPECT_EQ(series.definition, 1u);
  EXPECT_EQ(series.counters.accepted, 7u);  // nothing lost, nothing capped
  const auto windows = CloseEverythingDue(kT0 + 400 + kGrace);
  ASSERT_THAT(windows, SizeIs(2));
  EXPECT_EQ(windows[0].definition, 0u);
  EXPECT_TRUE(windows[0].partial);
  EXPECT_EQ(windows[0].stats.Get(Aggregation::kSum), 6);
  EXPECT_EQ(windows[1].definition, 1u);
  EXPECT_EQ(windows[1].start_ms, kT0 + 300);
  EXPECT_EQ(windows[1].stats.Get(Aggregation::kCount), 4);
}

TEST_F(IngestSessionTest, ADefinitionWaitsForAReleaseInALaterBatchHoldingItsSamples) {
  v1::IngestBatch first = ARedefinitionThatWaits();
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  // Held: neither accepted nor refused yet.
  EXPECT_EQ(Series("s").counters.accepted, 1u);
  EXPECT_EQ(stats_.samples_refused.load(), 0u);
  ASSERT_THAT(Apply(TheReleaseItWaitsFor(2)).errors(), IsEmpty());
  EXPECT_EQ(Series("s").spec.window_ms, 2000);
  EXPECT_EQ(Series("s").counters.accepted, 4u);
  // Released: later samples under id 1 are refused, saying so.
  v1::IngestBatch third;
  third.set_sequence(3);
  AddSamples(third, 1, kT0 * 1000 + 30, {9});
  const v1::IngestAck ack = Apply(third);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kNotFound));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("never defined, or released"));
  EXPECT_EQ(ack.errors(0).samples_refused(), 1u);
}

TEST_F(IngestSessionTest, AnInvalidDefinitionOfAWaitingIdIsRefusedAndTheWaitingOneKept) {
  v1::IngestBatch first = ARedefinitionThatWaits();
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  // The same id and name again, with a spec that cannot be: refused, and
  // the definition that waits keeps waiting with its samples.
  v1::IngestBatch second;
  second.set_sequence(2);
  AddDefinition(second, 2, "s", {v1::SUM}, /*window_ms=*/5);
  const v1::IngestAck refused = Apply(second);
  ASSERT_THAT(refused.errors(), SizeIs(1));
  EXPECT_EQ(refused.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(refused.errors(0).message(), HasSubstr("window_size_ms"));
  EXPECT_EQ(Series("s").counters.accepted, 1u);
  ASSERT_THAT(Apply(TheReleaseItWaitsFor(3)).errors(), IsEmpty());
  EXPECT_EQ(Series("s").spec.window_ms, 2000);
  EXPECT_EQ(Series("s").counters.accepted, 4u);
  EXPECT_EQ(stats_.samples_refused.load(), 0u);
  EXPECT_EQ(session_.samples_waiting(), 0u);
}

TEST_F(IngestSessionTest, TwoDefinitionsAliveOnOneStreamStillConflictOnceTheWaitIsOver) {
  v1::IngestBatch first;
  first.set_sequence(1);
  AddDefinition(first, 1, "s", {v1::SUM}, 1000);
  AddDefinition(first, 2, "s", {v1::SUM}, 2000)->set_after_release(true);
  AddSamples(first, 2, kT0 * 1000, {5, 6});
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  clock_.Set(kT0 + IngestLimits{}.redefinition_wait_ms);
  v1::IngestBatch second;
  second.set_sequence(2);
  const int64_t now_us = (kT0 + IngestLimits{}.redefinition_wait_ms) * 1000;
  AddSamples(second, 2, now_us, {7});
  AddSamples(second, 1, now_us, {1});
  const v1::IngestAck ack = Apply(second);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).stat_id(), 2u);
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("was not released within 10000 ms"));
  EXPECT_EQ(ack.errors(0).samples_refused(), 3u);
  EXPECT_EQ(stats_.samples_refused.load(), 3u);
  EXPECT_EQ(stats_.definitions_refused.load(), 1u);
  EXPECT_EQ(Series("s").spec.window_ms, 1000);
  EXPECT_EQ(Series("s").counters.accepted, 1u);
  // Refused for good, like any conflict.
  v1::IngestBatch third;
  third.set_sequence(3);
  AddSamples(third, 2, kT0 * 1000 + 2, {8});
  EXPECT_EQ(Apply(third).errors(0).code(), Code(absl::StatusCode::kFailedPrecondition));
}

TEST_F(IngestSessionTest, ADefinitionNotAfterAReleaseConflictsAtOnceEvenOnOneStream) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::SUM}, 1000);
  AddDefinition(batch, 2, "s", {v1::SUM}, 2000);  // both Stats alive in the client
  AddSamples(batch, 2, kT0 * 1000, {1});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(2));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(ack.errors(1).code(), Code(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(ack.errors(1).samples_refused(), 1u);
}

TEST_F(IngestSessionTest, ADefinitionHeldByAnotherStreamIsRefusedAtOnce) {
  IngestSession other(aggregator_, events_, stats_, nullptr);
  v1::IngestBatch theirs;
  AddDefinition(theirs, 1, "s", {v1::SUM}, 1000);
  v1::IngestAck their_ack;
  other.Apply(theirs, &their_ack);
  ASSERT_THAT(their_ack.errors(), IsEmpty());
  v1::IngestBatch mine;
  AddDefinition(mine, 1, "s", {v1::SUM}, 1000);  // this stream holds it too
  AddDefinition(mine, 2, "s", {v1::SUM}, 2000)->set_after_release(true);
  AddSamples(mine, 2, kT0 * 1000, {1});
  const v1::IngestAck ack = Apply(mine);
  ASSERT_THAT(ack.errors(), SizeIs(2));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(ack.errors(1).samples_refused(), 1u);
}

TEST_F(IngestSessionTest, TheEndOfAStreamReleasesItsDefinitionsAndSettlesWhatWaits) {
  auto stream = std::make_unique<IngestSession>(aggregator_, events_, stats_, nullptr);
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::SUM}, 1000);
  AddSamples(batch, 1, kT0 * 1000, {1});
  AddDefinition(batch, 2, "s", {v1::MAX}, 500)->set_after_release(true);
  AddSamples(batch, 2, kT0 * 1000 + 1, {2, 3});
  v1::IngestAck ack;
  stream->Apply(batch, &ack);
  ASSERT_THAT(ack.errors(), IsEmpty());
  stream.reset();  // the stream ends: id 1's release never came
  EXPECT_EQ(Series("s").spec.window_ms, 500);
  EXPECT_EQ(Series("s").counters.accepted, 3u);
  // Nothing holds it now: another stream may define it as it likes.
  v1::IngestBatch next;
  AddDefinition(next, 1, "s", {v1::SUM}, 1000);
  EXPECT_THAT(Apply(next).errors(), IsEmpty());
  EXPECT_EQ(stats_.series_redefined.load(), 2u);
}

TEST_F(IngestSessionTest, ADefinitionWaitingHoldsAtMostTheLimitOfSamples) {
  IngestLimits limits;
  limits.max_samples_waiting = 3;
  IngestSession stream(aggregator_, events_, stats_, nullptr, limits);
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::SUM}, 1000);
  AddDefinition(batch, 2, "s", {v1::SUM}, 2000)->set_after_release(true);
  AddSamples(batch, 2, kT0 * 1000, {1, 2, 3});
  AddSamples(batch, 2, kT0 * 1000, {4});
  v1::IngestAck ack;
  stream.Apply(batch, &ack);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("more than 3 samples waited"));
  EXPECT_EQ(ack.errors(0).samples_refused(), 4u);
}

TEST_F(IngestSessionTest, ReleasingAnIdNeverBoundOrTwiceIsHarmless) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  AddDefinition(batch, 1, "s", {v1::SUM}, 1000);
  batch.add_released(7);
  batch.add_released(1);
  batch.add_released(1);
  EXPECT_THAT(Apply(batch).errors(), IsEmpty());
  // A re-send after a broken stream may carry a release again.
  v1::IngestBatch again;
  again.set_sequence(2);
  again.add_released(1);
  EXPECT_THAT(Apply(again).errors(), IsEmpty());
  EXPECT_TRUE(aggregator_.Define(SeriesKey{"s", {}}, StatSpec{AggregationBit(Aggregation::kMax),
                                                              1000, 0, {}})
                  .ok());
}

// A client reuses the id of a Stat it destroyed once the release is
// acknowledged: the id binds afresh, to another series or another spec, and
// the old series keeps only what came before the release.
TEST_F(IngestSessionTest, AReleasedIdDefinedAgainBindsTheNewStatAlone) {
  v1::IngestBatch first;
  first.set_sequence(1);
  AddDefinition(first, 1, "old", {v1::SUM}, 1000);
  AddSamples(first, 1, kT0 * 1000, {1, 2});
  first.add_released(1);
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  v1::IngestBatch second;
  second.set_sequence(2);
  AddDefinition(second, 1, "new", {v1::MAX}, 500);
  AddSamples(second, 1, kT0 * 1000 + 1, {10, 20, 30});
  ASSERT_THAT(Apply(second).errors(), IsEmpty());
  EXPECT_EQ(Series("old").counters.accepted, 2u);
  EXPECT_EQ(Series("new").counters.accepted, 3u);
  EXPECT_EQ(Series("new").spec.window_ms, 500);
  // And again, with the first series' name and another spec: nothing else
  // holds it, so the series takes the new definition.
  v1::IngestBatch third;
  third.set_sequence(3);
  third.add_released(1);
  ASSERT_THAT(Apply(third).errors(), IsEmpty());
  v1::IngestBatch fourth;
  fourth.set_sequence(4);
  AddDefinition(fourth, 1, "old", {v1::SUM}, 2000);
  AddSamples(fourth, 1, kT0 * 1000 + 2, {4});
  ASSERT_THAT(Apply(fourth).errors(), IsEmpty());
  EXPECT_EQ(Series("old").spec.window_ms, 2000);
  EXPECT_EQ(Series("old").counters.accepted, 3u);
  EXPECT_EQ(stats_.definitions_refused.load(), 0u);
  EXPECT_EQ(stats_.samples_refused.load(), 0u);
}

// A definition waiting for an older one's release may itself be released
// (its Stat gone too) before that release comes: it keeps waiting with its
// samples, and its id may be defined again meanwhile.
TEST_F(IngestSessionTest, AnIdReleasedWhileItsDefinitionWaitsMayBeDefinedAgain) {
  v1::IngestBatch first = ARedefinitionThatWaits();
  first.add_released(2);
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  v1::IngestBatch second;
  second.set_sequence(2);
  AddDefinition(second, 2, "other", {v1::COUNT}, 1000);
  AddSamples(second, 2, kT0 * 1000 + 20, {7, 8, 9});
  ASSERT_THAT(Apply(second).errors(), IsEmpty());
  EXPECT_EQ(Series("other").counters.accepted, 3u);
  EXPECT_EQ(Series("s").counters.accepted, 1u);  // 5 and 6 still wait
  EXPECT_EQ(session_.samples_waiting(), 2u);
  v1::IngestBatch third;
  third.set_sequence(3);
  third.add_released(1);
  ASSERT_THAT(Apply(third).errors(), IsEmpty());
  EXPECT_EQ(Series("s").spec.window_ms, 2000);
  EXPECT_EQ(Series("s").counters.accepted, 3u);
  EXPECT_EQ(session_.samples_waiting(), 0u);
  // Nothing of this stream holds "s" any more; id 2 still names "other".
  EXPECT_TRUE(aggregator_.Define(SeriesKey{"s", {}}, StatSpec{AggregationBit(Aggregation::kMax),
                                                              1000, 0, {}})
                  .ok());
  v1::IngestBatch fourth;
  fourth.set_sequence(4);
  AddSamples(fourth, 2, kT0 * 1000 + 30, {1});
  ASSERT_THAT(Apply(fourth).errors(), IsEmpty());
  EXPECT_EQ(Series("other").counters.accepted, 4u);
}

// The same, when the older definition is never released: the released one
// is refused once the wait is over, and the id's new binding is untouched.
TEST_F(IngestSessionTest, AReleasedDefinitionRefusedAfterItsWaitLeavesItsIdsNewBinding) {
  v1::IngestBatch first;
  first.set_sequence(1);
  AddDefinition(first, 1, "s", {v1::SUM}, 1000);
  AddDefinition(first, 2, "s", {v1::SUM}, 2000)->set_after_release(true);
  AddSamples(first, 2, kT0 * 1000, {5, 6});
  first.add_released(2);
  AddDefinition(first, 3, "t", {v1::SUM}, 1000);
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  v1::IngestBatch second;
  second.set_sequence(2);
  AddDefinition(second, 2, "t2", {v1::COUNT}, 1000);
  ASSERT_THAT(Apply(second).errors(), IsEmpty());
  clock_.Set(kT0 + IngestLimits{}.redefinition_wait_ms);
  v1::IngestBatch third;
  third.set_sequence(3);
  AddSamples(third, 2, (kT0 + IngestLimits{}.redefinition_wait_ms) * 1000, {1});
  const v1::IngestAck ack = Apply(third);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).stat_id(), 2u);
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(ack.errors(0).samples_refused(), 2u);
  EXPECT_EQ(Series("t2").counters.accepted, 1u);
  EXPECT_EQ(session_.samples_waiting(), 0u);
}

TEST_F(IngestSessionTest, AnIdRedefinedWithAnotherSpecIsRefusedAndKeepsItsSeries) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::SUM}, 1000);
  Apply(batch);
  v1::IngestBatch other;
  AddDefinition(other, 1, "s", {v1::SUM}, 2000);
  AddSamples(other, 1, kT0 * 1000, {1});
  const v1::IngestAck ack = Apply(other);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("a new definition takes a new id"));
  EXPECT_EQ(Series("s").spec.window_ms, 1000);
  EXPECT_EQ(Series("s").counters.accepted, 1u);
}

TEST_F(IngestSessionTest, ConflictingDefinitionIsAlreadyExistsNamingBothAndOtherStatsApply) {
  ASSERT_TRUE(aggregator_
                  .Define(SeriesKey{"train.loss", {{"rank", "0"}}},
                          StatSpec{AggregationBit(Aggregation::kMean), 1000, 0, {}})
                  .ok());
  v1::IngestBatch batch;
  SetHello(batch, {{"rank", "0"}});
  AddDefinition(batch, 1, "train.loss", {v1::SUM}, 2000);
  AddDefinition(batch, 2, "train.lr", {v1::VALUE});
  AddSamples(batch, 2, kT0 * 1000, {0.5});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  const v1::IngestError& e = ack.errors(0);
  EXPECT_EQ(e.code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_EQ(e.stat_id(), 1u);
  EXPECT_THAT(e.message(), HasSubstr("train.loss{rank=\"0\"}"));
  EXPECT_THAT(e.message(), HasSubstr("aggregations=[mean] window=1s max_samples=unlimited"));
  EXPECT_THAT(e.message(), HasSubstr("aggregations=[sum] window=2s max_samples=unlimited"));
  EXPECT_EQ(stats_.definitions_refused.load(), 1u);
  EXPECT_EQ(Series("train.lr").counters.accepted, 1u);
}

TEST_F(IngestSessionTest, SamplesUnderARefusedDefinitionAreRefusedWithItsReason) {
  ASSERT_TRUE(aggregator_
                  .Define(SeriesKey{"s", {}}, StatSpec{AggregationBit(Aggregation::kMean), 1000, 0, {}})
                  .ok());
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::MAX});
  AddSamples(batch, 1, kT0 * 1000, {1, 2, 3});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(2));
  const v1::IngestError& e = ack.errors(1);
  EXPECT_EQ(e.code(), Code(absl::StatusCode::kFailedPrecondition));
  EXPECT_EQ(e.samples_refused(), 3u);
  EXPECT_THAT(e.message(), HasSubstr("already defined"));
  EXPECT_EQ(Series("s").counters.accepted, 0u);
}

TEST_F(IngestSessionTest, MismatchedTimeDeltasLengthIsInvalidArgumentNamingTheField) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::COUNT});
  AddSamples(batch, 1, kT0 * 1000, {1, 2, 3}, {0, 1});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_EQ(ack.errors(0).samples_refused(), 3u);
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("time_deltas_us"));
  EXPECT_EQ(Series("s").counters.accepted, 0u);
}

TEST_F(IngestSessionTest, StatLabelAlsoSetByTheIdentityIsRefusedNamingTheKey) {
  v1::IngestBatch batch;
  SetHello(batch, {{"rank", "0"}});
  v1::StatDefinition* def = AddDefinition(batch, 1, "s", {v1::COUNT});
  (*def->mutable_labels())["rank"] = "1";
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("\"rank\""));
  EXPECT_EQ(aggregator_.series_count(), 0u);
}

TEST_F(IngestSessionTest, StatLabelsAreMergedWithIdentityLabels) {
  v1::IngestBatch batch;
  SetHello(batch, {{"rank", "0"}});
  v1::StatDefinition* def = AddDefinition(batch, 1, "s", {v1::COUNT});
  (*def->mutable_labels())["device"] = "cuda:0";
  EXPECT_THAT(Apply(batch).errors(), IsEmpty());
  EXPECT_EQ(Series("s").key->labels, (Labels{{"device", "cuda:0"}, {"rank", "0"}}));
}

TEST_F(IngestSessionTest, InvalidLabelKeyIsRefusedNamingIt) {
  v1::IngestBatch batch;
  v1::StatDefinition* def = AddDefinition(batch, 1, "s", {v1::COUNT});
  (*def->mutable_labels())["1bad"] = "x";
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("\"1bad\""));
}

TEST_F(IngestSessionTest, ReservedLabelKeyIsRefusedNamingIt) {
  v1::IngestBatch batch;
  v1::StatDefinition* def = AddDefinition(batch, 1, "s", {v1::COUNT});
  (*def->mutable_labels())["stat"] = "x";
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("\"stat\""));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("reserved"));
  EXPECT_EQ(aggregator_.series_count(), 0u);
}

TEST_F(IngestSessionTest, InvalidSpecIsRefusedNamingTheField) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::COUNT}, /*window_ms=*/5);
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("window_size_ms"));
}

TEST_F(IngestSessionTest, RebindingAStatIdToAnotherNameIsRefused) {
  v1::IngestBatch first;
  AddDefinition(first, 1, "a", {v1::COUNT});
  Apply(first);
  v1::IngestBatch second;
  AddDefinition(second, 1, "b", {v1::COUNT});
  AddSamples(second, 1, kT0 * 1000, {1});
  const v1::IngestAck ack = Apply(second);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("\"a\""));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("\"b\""));
  // The id still means "a".
  EXPECT_EQ(Series("a").counters.accepted, 1u);
}

TEST_F(IngestSessionTest, RebindingAStatIdToOtherLabelsIsRefusedAndTheIdKeepsItsSeries) {
  v1::IngestBatch first;
  (*AddDefinition(first, 1, "a", {v1::COUNT})->mutable_labels())["layer"] = "1";
  AddSamples(first, 1, kT0 * 1000, {1});
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  v1::IngestBatch second;
  (*AddDefinition(second, 1, "a", {v1::COUNT})->mutable_labels())["layer"] = "2";
  AddSamples(second, 1, kT0 * 1000, {1});
  const v1::IngestAck ack = Apply(second);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kAlreadyExists));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("layer=\"1\""));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("layer=\"2\""));
  // Still one series, layer 1, which got both samples.
  const SeriesSnapshot series = Series("a");
  EXPECT_EQ(series.counters.accepted, 2u);
  EXPECT_THAT(series.key->ToString(), HasSubstr("layer=\"1\""));
}

TEST_F(IngestSessionTest, ResendingTheSameDefinitionOfAnIdIsHarmless) {
  v1::IngestBatch first;
  (*AddDefinition(first, 1, "a", {v1::COUNT})->mutable_labels())["layer"] = "1";
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  v1::IngestBatch again;
  (*AddDefinition(again, 1, "a", {v1::COUNT})->mutable_labels())["layer"] = "1";
  AddSamples(again, 1, kT0 * 1000, {1});
  EXPECT_THAT(Apply(again).errors(), IsEmpty());
  EXPECT_EQ(Series("a").counters.accepted, 1u);
}

TEST_F(IngestSessionTest, EventWithInvalidUtf8NameIsRefusedNamingTheField) {
  v1::IngestBatch batch;
  batch.add_events()->set_name("bad\xff");
  batch.add_events()->set_name("good");
  // Applied in memory: the protobuf parser itself would refuse the bytes.
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("event name is not valid UTF-8"));
  EXPECT_EQ(stats_.events_refused.load(), 1u);
  const auto logged = events_.Get(Selector{}, 0, 0);
  ASSERT_THAT(logged, SizeIs(1));
  EXPECT_EQ(logged[0].name, "good");
}

TEST_F(IngestSessionTest, EventIsLoggedWithIdentityLabelsAndTypedData) {
  v1::IngestBatch batch;
  SetHello(batch, {{"rank", "2"}});
  v1::Event* event = batch.add_events();
  event->set_name("epoch_end");
  event->set_timestamp_us(kT0 * 1000 + 5);
  (*event->mutable_data())["epoch"].set_int_value(3);
  (*event->mutable_data())["loss"].set_double_value(0.25);
  (*event->mutable_data())["tag"].set_string_value("x");
  EXPECT_THAT(Apply(batch).errors(), IsEmpty());
  const auto logged = events_.Get(Selector{}, 0, 0);
  ASSERT_THAT(logged, SizeIs(1));
  EXPECT_EQ(logged[0].timestamp_us, kT0 * 1000 + 5);
  EXPECT_EQ(logged[0].labels, (Labels{{"rank", "2"}}));
  ASSERT_THAT(logged[0].data, SizeIs(3));
  EXPECT_EQ(logged[0].data[0].first, "epoch");  // sorted by key
  EXPECT_EQ(std::get<int64_t>(logged[0].data[0].second), 3);
  EXPECT_EQ(std::get<double>(logged[0].data[1].second), 0.25);
  EXPECT_EQ(std::get<std::string>(logged[0].data[2].second), "x");
}

TEST_F(IngestSessionTest, EventDataWithoutAValueIsRefusedNamingTheKey) {
  v1::IngestBatch batch;
  v1::Event* event = batch.add_events();
  event->set_name("e");
  (*event->mutable_data())["empty"];
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("data[\"empty\"]"));
  EXPECT_EQ(events_.size(), 0u);
}

TEST_F(IngestSessionTest, DropReportsAddToClientDropped) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::COUNT});
  v1::DropReport* d = batch.add_drops();
  d->set_stat_id(1);
  d->set_dropped(5);
  Apply(batch);
  v1::IngestBatch later;
  d = later.add_drops();
  d->set_stat_id(1);
  d->set_dropped(7);
  EXPECT_THAT(Apply(later).errors(), IsEmpty());
  EXPECT_EQ(Series("s").counters.client_dropped, 12u);
}

TEST_F(IngestSessionTest, DropReportForAnUnknownStatIsReported) {
  v1::IngestBatch batch;
  v1::DropReport* d = batch.add_drops();
  d->set_stat_id(9);
  d->set_dropped(5);
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kNotFound));
  EXPECT_EQ(ack.errors(0).stat_id(), 9u);
}

TEST_F(IngestSessionTest, HelloInALaterBatchIsReportedAndIgnored) {
  v1::IngestBatch first;
  first.set_sequence(1);
  SetHello(first, {{"rank", "0"}});
  Apply(first);
  v1::IngestBatch second;
  second.set_sequence(2);
  SetHello(second, {{"rank", "5"}});
  AddDefinition(second, 1, "s", {v1::COUNT});
  const v1::IngestAck ack = Apply(second);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).sequence(), 2u);
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("hello"));
  EXPECT_EQ(Series("s").key->labels, (Labels{{"rank", "0"}}));
}

// With Prometheus's honor_labels, a series' `instance` would replace the
// scraped node's: neither a stream's identity nor a stat may carry one.
TEST_F(IngestSessionTest, TargetLabelsAreRefusedInHelloAndDefinitionsNamingTheLabel) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  SetHello(batch, {{"rank", "0"}, {"instance", "gpu-07:9464"}});
  AddDefinition(batch, 1, "s", {v1::COUNT});
  v1::StatDefinition* spoofing = AddDefinition(batch, 2, "t", {v1::COUNT});
  (*spoofing->mutable_labels())["pod"] = "torchmond-abcde";
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(2));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("hello.labels: label key \"instance\""));
  EXPECT_EQ(ack.errors(1).code(), static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(1).message(), HasSubstr("label key \"pod\" is reserved"));
  // The refused identity does not land; the stat without the label does.
  EXPECT_EQ(Series("s").key->labels, Labels{});
  EXPECT_THAT(aggregator_.ListSeries(Selector{}), SizeIs(1));
}

TEST_F(IngestSessionTest, SamplesForASeriesThatExpiredRecreateIt) {
  v1::IngestBatch first;
  AddDefinition(first, 1, "s", {v1::COUNT});
  Apply(first);
  clock_.Set(kT0 + 10'000);
  ASSERT_EQ(aggregator_.ExpireIdleSeries(), 1u);
  v1::IngestBatch later;
  AddSamples(later, 1, (kT0 + 10'000) * 1000, {1, 2});
  EXPECT_THAT(Apply(later).errors(), IsEmpty());
  EXPECT_EQ(Series("s").counters.accepted, 2u);
}

TEST_F(IngestSessionTest, SampleClassificationReachesTheSeriesCounters) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "s", {v1::COUNT}, 1000, /*max_samples=*/1);
  // Two in the current window (one capped), one 1 h ahead (skewed), one an
  // hour old (late).
  AddSamples(batch, 1, kT0 * 1000, {1, 2, 3, 4}, {0, 0, 3'600'000'000, -7'200'000'000});
  EXPECT_THAT(Apply(batch).errors(), IsEmpty());
  const SeriesCounters c = Series("s").counters;
  EXPECT_EQ(c.accepted, 1u);
  EXPECT_EQ(c.capped, 1u);
  EXPECT_EQ(c.skewed, 1u);
  EXPECT_EQ(c.late, 1u);
}

// --- Stat ids ---------------------------------------------------------------

TEST_F(IngestSessionTest, StatIdsFarBeyondThoseDefinedStillBind) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  AddDefinition(batch, 4'000'000'000u, "huge", {v1::SUM});
  AddDefinition(batch, 7, "small", {v1::SUM});
  AddSamples(batch, 4'000'000'000u, kT0 * 1000, {1, 2});
  AddSamples(batch, 7, kT0 * 1000, {5});
  EXPECT_THAT(Apply(batch).errors(), IsEmpty());
  EXPECT_EQ(Series("huge").counters.accepted, 2u);
  EXPECT_EQ(Series("small").counters.accepted, 1u);
}

TEST_F(IngestSessionTest, ThousandsOfStatIdsInAnyOrderEachReachTheirOwnSeries) {
  constexpr uint32_t kStats = 5000;  // past the table's first dense bound
  v1::IngestBatch define;
  define.set_sequence(1);
  for (uint32_t i = 0; i < kStats; ++i) {
    // Odd ids ascending, then even ids descending.
    const uint32_t id = i < kStats / 2 ? 2 * i + 1 : 2 * (kStats - i);
    AddDefinition(define, id, "s" + std::to_string(id), {v1::SUM});
  }
  ASSERT_THAT(Apply(define).errors(), IsEmpty());
  v1::IngestBatch samples;
  samples.set_sequence(2);
  for (uint32_t id = 1; id <= kStats; ++id) {
    AddSamples(samples, id, kT0 * 1000, std::vector<double>(id % 3 + 1, 1.0));
  }
  ASSERT_THAT(Apply(samples).errors(), IsEmpty());
  for (uint32_t id : {1u, 2u, 1023u, 1024u, 1025u, 2500u, 4999u, 5000u}) {
    EXPECT_EQ(Series("s" + std::to_string(id)).counters.accepted, id % 3 + 1) << id;
  }
}

// --- SampleColumns ----------------------------------------------------------

void AddColumns(v1::IngestBatch& batch, int64_t base_time_us, std::vector<uint32_t> ids,
                std::vector<double> values, std::vector<int64_t> deltas_us = {}) {
  v1::SampleColumns* c = batch.mutable_columns();
  c->set_base_time_us(base_time_us);
  for (uint32_t id : ids) c->add_stat_ids(id);
  for (double v : values) c->add_values(v);
  for (int64_t d : deltas_us) c->add_time_deltas_us(d);
}

TEST_F(IngestSessionTest, ColumnsReachEachStatsSeriesInOrderAfterTheBlocks) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  AddDefinition(batch, 1, "a", {v1::SUM, v1::COUNT, v1::VALUE});
  AddDefinition(batch, 2, "b", {v1::SUM, v1::COUNT, v1::VALUE});
  AddSamples(batch, 1, kT0 * 1000, {100});
  // a: 1, 2 (at +0, +1 ms); b: 10 (+2 ms); a: 3 (+1.1 s: next window);
  // b: 20, 30 (+1.1 s, then back to +1 ms).
  AddColumns(batch, kT0 * 1000, {1, 1, 2, 1, 2, 2}, {1, 2, 10, 3, 20, 30},
             {0, 1000, 1000, 1'098'000, 0, -1'099'000});
  EXPECT_THAT(ApplyFromWire(batch).errors(), IsEmpty());
  EXPECT_EQ(stats_.samples_received.load(), 7u);
  const auto windows = CloseEverythingDue(kT0 + 2000 + kGrace);
  ASSERT_THAT(windows, SizeIs(4));
  for (const ClosedWindow& w : windows) {
    const std::string name = w.series->stat;
    if (name == "a" && w.start_ms == kT0) {
      EXPECT_EQ(w.stats.Get(Aggregation::kSum), 103);
      EXPECT_EQ(w.stats.Get(Aggregation::kCount), 3);
      EXPECT_EQ(w.stats.Get(Aggregation::kValue), 2);  // the block came first
    } else if (name == "a") {
      EXPECT_EQ(w.stats.Get(Aggregation::kSum), 3);
    } else if (name == "b" && w.start_ms == kT0) {
      EXPECT_EQ(w.stats.Get(Aggregation::kSum), 40);
      EXPECT_EQ(w.stats.Get(Aggregation::kValue), 30);
    } else {
      EXPECT_EQ(w.stats.Get(Aggregation::kSum), 20);
    }
  }
}

TEST_F(IngestSessionTest, ColumnsOfUnequalLengthAreRefusedWholeNamingTheArrays) {
  v1::IngestBatch batch;
  batch.set_sequence(5);
  AddDefinition(batch, 1, "a", {v1::COUNT});
  AddSamples(batch, 1, kT0 * 1000, {1});
  AddColumns(batch, kT0 * 1000, {1, 1, 1}, {1, 2});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("stat_ids has 3 entries, values 2"));
  EXPECT_EQ(ack.errors(0).samples_refused(), 3u);
  EXPECT_EQ(stats_.samples_refused.load(), 3u);
  EXPECT_EQ(Series("a").counters.accepted, 1u);  // the block still counts
}

TEST_F(IngestSessionTest, ColumnEntriesOfAnUnknownStatAreRefusedAndTheOthersApplied) {
  v1::IngestBatch batch;
  batch.set_sequence(6);
  AddDefinition(batch, 1, "a", {v1::COUNT});
  AddColumns(batch, kT0 * 1000, {1, 9, 9, 1}, {1, 2, 3, 4});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kNotFound));
  EXPECT_EQ(ack.errors(0).stat_id(), 9u);
  EXPECT_EQ(ack.errors(0).samples_refused(), 2u);
  EXPECT_EQ(Series("a").counters.accepted, 2u);
}

// --- re-sent batches, limits ---

// A client's second stream: sequence-0 opening with the definitions, then
// the batches it kept because the first stream broke before their ack.
class ResendTest : public IngestSessionTest {
 protected:
  static constexpr uint64_t kInstance = 0x1234'5678'9abc'def0;

  std::unique_ptr<IngestSession> NewStream() {
    return std::make_unique<IngestSession>(aggregator_, events_, stats_, nullptr, IngestLimits{},
                                           &clients_);
  }
  static v1::IngestBatch Opening(uint64_t instance = kInstance) {
    v1::IngestBatch batch;
    batch.set_sequence(0);
    SetHello(batch, {{"rank", "0"}});
    batch.mutable_hello()->set_client_instance(instance);
    AddDefinition(batch, 1, "loss", {v1::COUNT});
    return batch;
  }
  static v1::IngestBatch Samples(uint64_t sequence, int n) {
    v1::IngestBatch batch;
    batch.set_sequence(sequence);
    AddSamples(batch, 1, kT0 * 1000, std::vector<double>(static_cast<size_t>(n), 1.0));
    return batch;
  }
  static v1::IngestAck ApplyTo(IngestSession& session, const v1::IngestBatch& batch) {
    v1::IngestAck ack;
    session.Apply(batch, &ack);
    return ack;
  }

  ClientRegistry clients_{clock_, 60'000, 100};
};

TEST_F(ResendTest, BatchReSentOnANewStreamIsAcknowledgedButNotAppliedAgain) {
  auto first = NewStream();
  ApplyTo(*first, Opening());
  ApplyTo(*first, Samples(1, 3));
  ApplyTo(*first, Samples(2, 4));
  first.reset();  // the stream broke before the client saw the acks

  auto second = NewStream();
  EXPECT_THAT(ApplyTo(*second, Opening()).errors(), IsEmpty());
  const v1::IngestAck resent = ApplyTo(*second, Samples(2, 4));
  EXPECT_EQ(resent.sequence(), 2u);
  EXPECT_THAT(resent.errors(), IsEmpty());
  ApplyTo(*second, Samples(3, 5));  // new data after the re-send is applied
  EXPECT_EQ(Series("loss").counters.accepted, 3u + 4u + 5u);
  EXPECT_EQ(stats_.batches_duplicate.load(), 1u);
}

TEST_F(ResendTest, TwoClientsWithTheSameSequenceNumbersAreIndependent) {
  auto a = NewStream();
  auto b = NewStream();
  ApplyTo(*a, Opening(1));
  ApplyTo(*b, Opening(2));
  ApplyTo(*a, Samples(1, 3));
  ApplyTo(*b, Samples(1, 4));
  EXPECT_EQ(Series("loss").counters.accepted, 7u);
  EXPECT_EQ(stats_.batches_duplicate.load(), 0u);
}

TEST_F(ResendTest, ClientWithoutAnInstanceHasEveryBatchApplied) {
  auto first = NewStream();
  ApplyTo(*first, Opening(0));
  ApplyTo(*first, Samples(1, 3));
  first.reset();
  auto second = NewStream();
  ApplyTo(*second, Opening(0));
  ApplyTo(*second, Samples(1, 3));
  EXPECT_EQ(Series("loss").counters.accepted, 6u);
}

TEST_F(ResendTest, IdleClientIsForgottenOnceItsMemoryTimePasses) {
  auto first = NewStream();
  ApplyTo(*first, Opening());
  ApplyTo(*first, Samples(1, 3));
  first.reset();
  clock_.Set(kT0 + 60'001);
  EXPECT_EQ(clients_.ExpireIdle(), 1u);
  EXPECT_EQ(clients_.size(), 0u);
}

TEST_F(ResendTest, ClientWithAnOpenStreamIsNeverForgotten) {
  auto stream = NewStream();
  ApplyTo(*stream, Opening());
  clock_.Set(kT0 + 3'600'000);
  EXPECT_EQ(clients_.ExpireIdle(), 0u);
  EXPECT_EQ(clients_.size(), 1u);
}

TEST(ClientRegistryTest, KeepsAtMostMaxIdleClientsDroppingTheLongestIdle) {
  ManualClock clock(kT0);
  ClientRegistry registry(clock, 60'000, 2);
  for (uint64_t instance = 1; instance <= 3; ++instance) {
    registry.Acquire(instance);
    clock.Advance(10);
    registry.Release(instance);
  }
  EXPECT_EQ(registry.size(), 2u);
  // Client 1 went idle first and was dropped: its record is new again.
  auto again = registry.Acquire(1);
  absl::MutexLock lock(&again->mu);
  EXPECT_EQ(again->applied_through, 0u);
}

class LimitsTest : public IngestSessionTest {
 protected:
  IngestSession Limited(size_t max_series, int max_errors = 100) {
    IngestLimits limits;
    limits.max_series_per_stream = max_series;
    limits.max_errors_per_batch = max_errors;
    return IngestSession(aggregator_, events_, stats_, nullptr, limits);
  }
};

TEST_F(LimitsTest, SeriesPastTheStreamLimitAreRefusedNamedAndCounted) {
  IngestSession session = Limited(2);
  v1::IngestBatch batch;
  batch.set_sequence(1);
  SetHello(batch, {{"rank", "7"}});
  for (uint32_t id = 1; id <= 4; ++id) AddDefinition(batch, id, absl::StrCat("s", id), {v1::SUM});
  AddSamples(batch, 3, kT0 * 1000, {1, 2});
  v1::IngestAck ack;
  session.Apply(batch, &ack);
  ASSERT_THAT(ack.errors(), SizeIs(3));  // s3, s4, then s3's samples
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("s3{rank=\"7\"}"));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("--max-series-per-client"));
  EXPECT_EQ(ack.errors(2).samples_refused(), 2u);
  EXPECT_EQ(stats_.series_refused_stream_limit.load(), 2u);
  EXPECT_EQ(stats_.samples_refused.load(), 2u);
  EXPECT_EQ(aggregator_.series_count(), 2u);
}

TEST_F(LimitsTest, RedefiningABoundSeriesDoesNotCountAgainstTheLimit) {
  IngestSession session = Limited(1);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    v1::IngestBatch batch;
    batch.set_sequence(seq);
    AddDefinition(batch, 1, "loss", {v1::SUM});
    v1::IngestAck ack;
    session.Apply(batch, &ack);
    EXPECT_THAT(ack.errors(), IsEmpty()) << "batch " << seq;
  }
}

TEST_F(LimitsTest, DaemonWideSeriesLimitRefusesNewSeriesByName) {
  AggregatorOptions options = Options();
  options.max_series = 1;
  Aggregator small(options, clock_);
  IngestSession session(small, events_, stats_, nullptr);
  v1::IngestBatch batch;
  batch.set_sequence(1);
  AddDefinition(batch, 1, "a", {v1::SUM});
  AddDefinition(batch, 2, "b", {v1::SUM});
  v1::IngestAck ack;
  session.Apply(batch, &ack);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kResourceExhausted));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("series b{} refused"));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("--max-series"));
  EXPECT_EQ(stats_.series_refused_total_limit.load(), 1u);
}

TEST_F(LimitsTest, ErrorsPastThePerBatchLimitAreSummarisedWithTheirSamples) {
  IngestSession session = Limited(100, 3);
  v1::IngestBatch batch;
  batch.set_sequence(9);
  for (uint32_t id = 1; id <= 10; ++id) AddSamples(batch, id, kT0 * 1000, {1, 2});
  v1::IngestAck ack;
  session.Apply(batch, &ack);
  ASSERT_THAT(ack.errors(), SizeIs(4));
  EXPECT_THAT(ack.errors(3).message(), HasSubstr("7 more errors not listed"));
  EXPECT_EQ(ack.errors(3).samples_refused(), 14u);
  EXPECT_EQ(stats_.samples_refused.load(), 20u);
}

TEST_F(IngestSessionTest, OverlongStatNameIsRefusedWithItsLengthAndAShortQuote) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  AddDefinition(batch, 1, std::string(5000, 'x'), {v1::SUM});
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("5000 bytes long (at most 1024)"));
  EXPECT_LT(ack.errors(0).message().size(), 400u);
}

TEST_F(IngestSessionTest, TooManyLabelsAreRefusedNamingTheCount) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  v1::StatDefinition* def = AddDefinition(batch, 1, "loss", {v1::SUM});
  for (int i = 0; i < 40; ++i) (*def->mutable_labels())[absl::StrCat("k", i)] = "v";
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("40 labels (at most 32)"));
}

TEST_F(IngestSessionTest, OverlongLabelValueIsRefusedNamingTheLabel) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  v1::StatDefinition* def = AddDefinition(batch, 1, "loss", {v1::SUM});
  (*def->mutable_labels())["tag"] = std::string(2000, 'v');
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("value of label \"tag\" is 2000 bytes long"));
}

TEST_F(IngestSessionTest, EventWithTooManyFieldsOrAHugeStringIsRefusedAlone) {
  v1::IngestBatch batch;
  batch.set_sequence(1);
  v1::Event* wide = batch.add_events();
  wide->set_name("wide");
  for (int i = 0; i < 65; ++i) (*wide->mutable_data())[absl::StrCat("f", i)].set_int_value(i);
  v1::Event* huge = batch.add_events();
  huge->set_name("huge");
  (*huge->mutable_data())["text"].set_string_value(std::string(5000, 'a'));
  v1::Event* fine = batch.add_events();
  fine->set_name("fine");
  const v1::IngestAck ack = Apply(batch);
  ASSERT_THAT(ack.errors(), SizeIs(2));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("event \"wide\": data has 65 entries (at most 64)"));
  EXPECT_THAT(ack.errors(1).message(), HasSubstr("data[\"text\"] is 5000 bytes long (at most 4096)"));
  EXPECT_EQ(events_.size(), 1u);
}

// Found by ingest_fuzzer: an id bound while it lay past the dense part of
// the binding table (so it went to the map) became "never defined" once
// enough later definitions grew the dense part past it.
TEST_F(IngestSessionTest, StatIdBoundBeforeTheDenseTableGrewPastItStaysBound) {
  v1::IngestBatch first;
  first.set_sequence(1);
  AddDefinition(first, 1536, "early", {v1::SUM});
  AddSamples(first, 1536, kT0 * 1000, {1});
  ASSERT_THAT(Apply(first).errors(), IsEmpty());
  v1::IngestBatch many;
  many.set_sequence(2);
  for (uint32_t id = 1; id <= 2000; ++id) {
    if (id != 1536) AddDefinition(many, id, "s" + std::to_string(id), {v1::SUM});
  }
  ASSERT_THAT(Apply(many).errors(), IsEmpty());
  v1::IngestBatch later;
  later.set_sequence(3);
  AddSamples(later, 1536, kT0 * 1000, {2});
  EXPECT_THAT(Apply(later).errors(), IsEmpty());
  EXPECT_EQ(Series("early").counters.accepted, 2u);
}

TEST_F(IngestSessionTest, ASeriesThatExpiredUnderAStreamIsDefinedAgainByItsNextSamples) {
  v1::IngestBatch first;
  first.set_sequence(1);
  SetHello(first, {{"job", "j"}});
  AddDefinition(first, 1, "comes.back", {v1::SUM});
  AddDefinition(first, 2, "stays", {v1::SUM});
  AddSamples(first, 1, kT0 * 1000, {1});
  EXPECT_THAT(Apply(first).errors(), IsEmpty());
  // Idle past the TTL: the series goes, the stream's binding stays.
  clock_.Set(kT0 + 20'000);
  aggregator_.CloseDueWindows();
  ASSERT_EQ(aggregator_.ExpireIdleSeries(), 2u);
  // Its next samples and drop report re-create it, in this batch and the
  // ones after (which must find the new series, not the gone one).
  for (uint64_t seq = 2; seq <= 4; ++seq) {
    v1::IngestBatch more;
    more.set_sequence(seq);
    AddSamples(more, 1, (kT0 + 20'000) * 1000, {2, 3});
    v1::DropReport* drops = more.add_drops();
    drops->set_stat_id(1);
    drops->set_dropped(5);
    EXPECT_THAT(Apply(more).errors(), IsEmpty()) << seq;
  }
  const SeriesSnapshot s = Series("comes.back");
  EXPECT_EQ(s.counters.accepted, 6u);  // 2 per batch, after the re-definition
  EXPECT_EQ(s.counters.client_dropped, 15u);
  Selector stays;
  stays.name = "stays";
  EXPECT_THAT(aggregator_.ListSeries(stays), IsEmpty());
}

// With --peer-labels the daemon vouches for some labels (the user, the
// Slurm job from the cgroup, ...): they are on every series and event of
// the stream, and a client that sends one is refused, naming it.
class VouchedIngestSessionTest : public IngestSessionTest {
 protected:
  VouchedIdentity Of(std::string user, std::string slurm_job) {
    return {{{"slurm_job_id", slurm_job}, {"user", user}},
            {"user", "slurm_job_id", "slurm_step", "k8s_pod_uid", "container_id", "systemd_unit"},
            user,
            &jobs_};
  }
  VouchedIdentity Alice() { return Of("alice", "4242"); }
  std::unique_ptr<IngestSession> Stream(VouchedIdentity who) {
    return std::make_unique<IngestSession>(aggregator_, events_, stats_, nullptr, IngestLimits{},
                                           nullptr, nullptr, std::move(who));
  }
  static v1::IngestAck ApplyTo(IngestSession& session, const v1::IngestBatch& batch) {
    v1::IngestAck ack;
    session.Apply(batch, &ack);
    return ack;
  }

  JobClaims jobs_;
  IngestSession vouched_{aggregator_, events_, stats_, nullptr, {}, nullptr, nullptr, Alice()};

  v1::IngestAck ApplyVouched(const v1::IngestBatch& batch) {
    v1::IngestAck ack;
    vouched_.Apply(batch, &ack);
    return ack;
  }
};

TEST_F(VouchedIngestSessionTest, VouchedLabelsJoinTheHelloLabelsOnEverySeries) {
  v1::IngestBatch batch;
  SetHello(batch, {{"job", "j"}, {"rank", "1"}});
  AddDefinition(batch, 1, "loss", {v1::MEAN});
  AddDefinition(batch, 2, "lr", {v1::VALUE})->mutable_labels()->insert({"group", "0"});
  AddSamples(batch, 1, kT0 * 1000, {1});
  AddSamples(batch, 2, kT0 * 1000, {2});
  EXPECT_THAT(ApplyVouched(batch).errors(), IsEmpty());
  EXPECT_EQ(Series("loss").key->ToString(),
            "loss{job=\"j\",rank=\"1\",slurm_job_id=\"4242\",user=\"alice\"}");
  EXPECT_EQ(Series("lr").key->ToString(),
            "lr{group=\"0\",job=\"j\",rank=\"1\",slurm_job_id=\"4242\",user=\"alice\"}");
}

TEST_F(VouchedIngestSessionTest, AStreamWithoutHelloIsLabelledToo) {
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "loss", {v1::MEAN});
  AddSamples(batch, 1, kT0 * 1000, {1});
  EXPECT_THAT(ApplyVouched(batch).errors(), IsEmpty());
  EXPECT_EQ(Series("loss").key->ToString(), "loss{slurm_job_id=\"4242\",user=\"alice\"}");
}

TEST_F(VouchedIngestSessionTest, AVouchedLabelInTheHelloIsRefusedAndTheOthersKept) {
  v1::IngestBatch batch;
  SetHello(batch, {{"job", "j"}, {"user", "bob"}});
  AddDefinition(batch, 1, "loss", {v1::MEAN});
  AddSamples(batch, 1, kT0 * 1000, {1});
  const v1::IngestAck ack = ApplyVouched(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ack.errors(0).message(),
              HasSubstr("hello.labels: label \"user\" is set by torchmond, from what the kernel "
                        "says of this connection (here \"alice\"); a client may not send it"));
  EXPECT_EQ(stats_.labels_refused_vouched.load(), 1u);
  // The samples are not lost: they go to the series with the daemon's user.
  EXPECT_EQ(Series("loss").key->ToString(),
            "loss{job=\"j\",slurm_job_id=\"4242\",user=\"alice\"}");
  EXPECT_EQ(Series("loss").counters.accepted, 1u);
}

TEST_F(VouchedIngestSessionTest, AVouchedNameNotDerivedHereIsRefusedAllTheSame) {
  // No pod here: a client cannot fill the gap with a pod of its choosing.
  v1::IngestBatch batch;
  AddDefinition(batch, 1, "loss", {v1::MEAN})->mutable_labels()->insert({"k8s_pod_uid", "x"});
  AddSamples(batch, 1, kT0 * 1000, {1, 2});
  const v1::IngestAck ack = ApplyVouched(batch);
  ASSERT_THAT(ack.errors(), SizeIs(2));  // the definition, then its samples
  EXPECT_THAT(ack.errors(0).message(),
              HasSubstr("definition of stat \"loss\": label \"k8s_pod_uid\" is set by "
                        "torchmond, from what the kernel says of this connection (here nothing: "
                        "it could not be derived for this connection)"));
  EXPECT_EQ(ack.errors(1).samples_refused(), 2u);
  EXPECT_EQ(aggregator_.series_count(), 0u);
  EXPECT_EQ(stats_.definitions_refused.load(), 1u);
}

TEST_F(VouchedIngestSessionTest, AnEventWithAVouchedLabelIsRefusedAndTheNextLoggedLabelled) {
  v1::IngestBatch batch;
  v1::Event* forged = batch.add_events();
  forged->set_name("checkpoint");
  forged->mutable_labels()->insert({"slurm_job_id", "1"});
  batch.add_events()->set_name("epoch_end");
  const v1::IngestAck ack = ApplyVouched(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(),
              HasSubstr("event \"checkpoint\": its labels: label \"slurm_job_id\" is set by "
                        "torchmond"));
  const auto logged = events_.Get(Selector{}, 0, 0);
  ASSERT_THAT(logged, SizeIs(1));
  EXPECT_EQ(logged[0].name, "epoch_end");
  EXPECT_EQ(logged[0].labels, (Labels{{"slurm_job_id", "4242"}, {"user", "alice"}}));
}

// A job label comes from the client's environment: on a shared node the
// first user whose streams label a job holds it, and another user's stream
// that sends it (in its hello, a definition or an event) is refused.
TEST_F(VouchedIngestSessionTest, AnotherUsersJobIsRefusedWhereverItIsSent) {
  v1::IngestBatch alice;
  SetHello(alice, {{"job", "train-a"}});
  AddDefinition(alice, 1, "loss", {v1::MEAN});
  AddSamples(alice, 1, kT0 * 1000, {1});
  ASSERT_THAT(ApplyVouched(alice).errors(), IsEmpty());

  auto bob = Stream(Of("bob", "77"));
  v1::IngestBatch forged;
  SetHello(forged, {{"job", "train-a"}, {"rank", "3"}});
  AddDefinition(forged, 1, "loss", {v1::MEAN});
  AddDefinition(forged, 2, "lr", {v1::VALUE})->mutable_labels()->insert({"job", "train-a"});
  AddSamples(forged, 1, kT0 * 1000, {5});
  AddSamples(forged, 2, kT0 * 1000, {6, 7});
  v1::Event* event = forged.add_events();
  event->set_name("checkpoint");
  event->mutable_labels()->insert({"job", "train-a"});
  const v1::IngestAck ack = ApplyTo(*bob, forged);
  ASSERT_THAT(ack.errors(), SizeIs(4));  // the hello's label, lr, lr's samples, the event
  const std::string why =
      "job \"train-a\" belongs to user \"alice\", whose streams label it on this daemon; a "
      "client may label only its own user's jobs";
  EXPECT_EQ(ack.errors(0).code(), Code(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(ack.errors(0).message(), absl::StrCat("hello.labels: ", why, "; the label is ignored"));
  EXPECT_EQ(ack.errors(1).code(), Code(absl::StatusCode::kPermissionDenied));
  EXPECT_EQ(ack.errors(1).message(), absl::StrCat("definition of stat \"lr\": ", why));
  EXPECT_EQ(ack.errors(2).samples_refused(), 2u);
  EXPECT_EQ(ack.errors(3).code(), Code(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(ack.errors(3).message(), HasSubstr(absl::StrCat("event \"checkpoint\": ", why)));
  EXPECT_EQ(stats_.labels_refused_job.load(), 3u);
  // Alice's series is untouched; bob's "loss" is his own, without the job.
  Selector alices;
  alices.labels.push_back({"user", "alice", LabelMatcher::Op::kEqual});
  alices.name = "loss";
  const auto mine = aggregator_.ListSeries(alices);
  ASSERT_THAT(mine, SizeIs(1));
  EXPECT_EQ(mine[0].key->ToString(), "loss{job=\"train-a\",slurm_job_id=\"4242\",user=\"alice\"}");
  EXPECT_EQ(mine[0].counters.accepted, 1u);
  Selector bobs;
  bobs.labels.push_back({"user", "bob", LabelMatcher::Op::kEqual});
  const auto his = aggregator_.ListSeries(bobs);
  ASSERT_THAT(his, SizeIs(1));
  EXPECT_EQ(his[0].key->ToString(), "loss{rank=\"3\",slurm_job_id=\"77\",user=\"bob\"}");
  EXPECT_THAT(events_.Get(Selector{}, 0, 0), IsEmpty());
}

TEST_F(VouchedIngestSessionTest, AJobIsFreeOnceNoStreamOfItsUserHoldsIt) {
  auto first = Stream(Alice());
  auto second = Stream(Alice());
  v1::IngestBatch batch;
  SetHello(batch, {{"job", "train-a"}});
  ASSERT_THAT(ApplyTo(*first, batch).errors(), IsEmpty());
  ASSERT_THAT(ApplyTo(*second, batch).errors(), IsEmpty());  // the same user: no conflict
  EXPECT_EQ(jobs_.size(), 1u);
  first.reset();
  EXPECT_THAT(ApplyTo(*Stream(Of("bob", "77")), batch).errors(), SizeIs(1));  // still held
  second.reset();
  EXPECT_EQ(jobs_.size(), 0u);
  auto bob = Stream(Of("bob", "77"));
  EXPECT_THAT(ApplyTo(*bob, batch).errors(), IsEmpty());
  EXPECT_THAT(ApplyTo(*Stream(Alice()), batch).errors(), SizeIs(1));  // now bob's
}

TEST_F(VouchedIngestSessionTest, AClientTheDaemonCannotIdentifyHoldsJobsAsOneOwner) {
  // A TCP client (no vouched labels, owner "") may not take a user's job,
  // and a user may not take the job of such clients.
  auto tcp = Stream(VouchedIdentity{{},
                                    {"user", "slurm_job_id", "slurm_step", "k8s_pod_uid",
                                     "container_id", "systemd_unit"},
                                    "",
                                    &jobs_});
  v1::IngestBatch batch;
  SetHello(batch, {{"job", "shared"}});
  ASSERT_THAT(ApplyTo(*tcp, batch).errors(), IsEmpty());
  const v1::IngestAck ack = ApplyVouched(batch);
  ASSERT_THAT(ack.errors(), SizeIs(1));
  EXPECT_THAT(ack.errors(0).message(),
              HasSubstr("job \"shared\" belongs to TCP clients with no name (no named token, no client certificate)"));
}

TEST_F(IngestSessionTest, WithoutVouchingTheSameLabelsAreTheClients) {
  v1::IngestBatch batch;
  SetHello(batch, {{"user", "bob"}});
  AddDefinition(batch, 1, "loss", {v1::MEAN});
  AddSamples(batch, 1, kT0 * 1000, {1});
  EXPECT_THAT(Apply(batch).errors(), IsEmpty());
  EXPECT_EQ(Series("loss").key->ToString(), "loss{user=\"bob\"}");
}

}  // namespace
}  // namespace torchmon::server

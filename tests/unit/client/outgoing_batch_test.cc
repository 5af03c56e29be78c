// OutgoingBatch: filling one IngestBatch within its byte budget from the
// samples taken from the logs. Pure: no sockets, no sleeps.
#include "detail/outgoing_batch.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "detail/stat_state.h"
#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

struct Fixture {
  Fixture() : buffers(std::make_shared<ClientBuffers>(size_t{8} << 20)) {
    v1::StatDefinition def;
    def.set_id(7);
    def.set_name("batch.stat");
    def.mutable_spec()->add_aggregations(v1::SUM);
    def.mutable_spec()->set_window_size_ms(1000);
    stat = std::make_unique<StatState>(def, true, buffers);
  }
  std::shared_ptr<ClientBuffers> buffers;
  std::unique_ptr<StatState> stat;
};

TEST(OutgoingBatchTest, AStatWithSeveralSamplesGetsOneBlockOfValuesAndTimeDeltas) {
  OutgoingBatch out;
  SampleGroups groups;
  // Explicit timestamps may go back.
  out.AddSamples({{7, 1.5, 1000}, {7, 2.5, 1003}, {7, 3.5, 1001}, {7, 4.5, 1001}}, groups);
  ASSERT_EQ(out.batch->samples_size(), 1);
  EXPECT_FALSE(out.batch->has_columns());
  const v1::SampleBlock& block = out.batch->samples(0);
  EXPECT_EQ(block.stat_id(), 7u);
  EXPECT_EQ(block.base_time_us(), 1000);
  EXPECT_EQ(std::vector<double>(block.values().begin(), block.values().end()),
            (std::vector<double>{1.5, 2.5, 3.5, 4.5}));
  EXPECT_EQ(std::vector<int64_t>(block.time_deltas_us().begin(), block.time_deltas_us().end()),
            (std::vector<int64_t>{0, 3, -2, 0}));
  EXPECT_EQ(out.samples, 4u);
  ASSERT_EQ(out.parts.size(), 1u);
  EXPECT_EQ(out.parts[0].stat_id, 7u);
  EXPECT_EQ(out.parts[0].samples, 4u);
  EXPECT_EQ(out.bytes, kBlockOverheadBytes + 4 * kSampleBytes);
  ASSERT_EQ(groups.groups.size(), 1u);
  EXPECT_EQ(groups.groups[0].count, 4u);
}

TEST(OutgoingBatchTest, DeltasAreOmittedWhenEverySampleIsAtTheBase) {
  OutgoingBatch out;
  SampleGroups groups;
  out.AddSamples({{7, 0, 5000}, {7, 1, 5000}, {7, 2, 5000}, {7, 3, 5000}}, groups);
  EXPECT_EQ(out.batch->samples(0).time_deltas_us_size(), 0);
}

TEST(OutgoingBatchTest, StatsWithFewSamplesGoToTheColumnsInOrder) {
  OutgoingBatch out;
  SampleGroups groups;
  // Stat 3 has kMinBlockSamples samples (a block), 1 and 2 fewer (columns).
  out.AddSamples({{1, 10, 100}, {3, 30, 101}, {2, 20, 102}, {3, 31, 103}, {1, 11, 99},
                  {3, 32, 104}, {3, 33, 105}},
                 groups);
  ASSERT_EQ(out.batch->samples_size(), 1);
  EXPECT_EQ(out.batch->samples(0).stat_id(), 3u);
  EXPECT_EQ(out.batch->samples(0).values_size(), 4);
  const v1::SampleColumns& c = out.batch->columns();
  EXPECT_EQ(std::vector<uint32_t>(c.stat_ids().begin(), c.stat_ids().end()),
            (std::vector<uint32_t>{1, 2, 1}));
  EXPECT_EQ(std::vector<double>(c.values().begin(), c.values().end()),
            (std::vector<double>{10, 20, 11}));
  EXPECT_EQ(c.base_time_us(), 100);
  EXPECT_EQ(std::vector<int64_t>(c.time_deltas_us().begin(), c.time_deltas_us().end()),
            (std::vector<int64_t>{0, 2, -3}));
  EXPECT_EQ(out.samples, 7u);
  std::vector<std::pair<uint32_t, uint64_t>> runs;
  out.ForEachColumnRun([&](uint32_t id, uint64_t n) { runs.emplace_back(id, n); });
  EXPECT_EQ(runs, (std::vector<std::pair<uint32_t, uint64_t>>{{1, 1}, {2, 1}, {1, 1}}));
  // Only the block has a part; the columns' ids account for the rest.
  ASSERT_EQ(out.parts.size(), 1u);
  EXPECT_EQ(out.parts[0].samples, 4u);
  // More samples continue the columns' deltas from their last time; a
  // stat's consecutive entries count as one run.
  out.AddSamples({{2, 21, 150}, {2, 22, 151}}, groups);
  EXPECT_EQ(out.batch->columns().time_deltas_us(3), 51);
  EXPECT_EQ(out.batch->columns().base_time_us(), 100);
  runs.clear();
  out.ForEachColumnRun([&](uint32_t id, uint64_t n) { runs.emplace_back(id, n); });
  EXPECT_EQ(runs, (std::vector<std::pair<uint32_t, uint64_t>>{{1, 1}, {2, 1}, {1, 1}, {2, 2}}));
}

TEST(OutgoingBatchTest, GroupingForgetsItsStatsBetweenCalls) {
  OutgoingBatch out;
  SampleGroups groups;
  out.AddSamples({{5, 1, 1}, {5, 2, 2}, {5, 3, 3}, {5, 4, 4}}, groups);
  out.AddSamples({{5, 5, 5}}, groups);
  ASSERT_EQ(groups.groups.size(), 1u);
  EXPECT_EQ(groups.groups[0].count, 1u);
  EXPECT_EQ(out.batch->samples_size(), 1);
  EXPECT_EQ(out.batch->columns().values_size(), 1);
}

TEST(OutgoingBatchTest, NothingTakenAddsNothing) {
  OutgoingBatch out;
  SampleGroups groups;
  out.AddSamples({}, groups);
  EXPECT_EQ(out.batch->samples_size(), 0);
  EXPECT_FALSE(out.batch->has_columns());
  EXPECT_TRUE(out.empty());
}

TEST(OutgoingBatchTest, SampleRoomCapsABatchAtTheBudget) {
  OutgoingBatch out;
  EXPECT_EQ(out.SampleRoom(), (kBatchBudgetBytes - kBlockOverheadBytes) / kSampleBytes);
  EXPECT_LE(out.SampleRoom(), 65536u);
  out.bytes = kBatchBudgetBytes - kBlockOverheadBytes - kSampleBytes + 1;
  EXPECT_EQ(out.SampleRoom(), 0u);
}

TEST(OutgoingBatchTest, AnEmptyBatchTakesAnyItemAFullOneRefuses) {
  OutgoingBatch out;
  EXPECT_TRUE(out.Fits(kBatchBudgetBytes * 2));
  out.bytes = kBatchBudgetBytes - 10;
  EXPECT_TRUE(out.Fits(10));
  EXPECT_FALSE(out.Fits(11));
}

TEST(BatchMemoryTest, AGivenBlockIsTakenAgainUpToKeepAndTrimFreesThem) {
  BatchMemory memory;
  std::unique_ptr<char[]> block = memory.Take();
  char* const first = block.get();
  memory.Give(std::move(block));
  EXPECT_EQ(memory.kept(), 1u);
  EXPECT_EQ(memory.Take().get(), first);  // the block written last, still in cache
  std::vector<std::unique_ptr<char[]>> taken;
  for (size_t i = 0; i < BatchMemory::kKeep + 2; ++i) taken.push_back(memory.Take());
  for (auto& b : taken) memory.Give(std::move(b));
  EXPECT_EQ(memory.kept(), BatchMemory::kKeep);
  memory.Trim();
  EXPECT_EQ(memory.kept(), 0u);
}

TEST(BatchMemoryTest, AFullBatchOfSamplesFitsInOneBlockWhichComesBackWithTheBatch) {
  auto memory = std::make_shared<BatchMemory>();
  {
    OutgoingBatch out(memory);
    // As many samples as a batch takes, spread over 50 stats (a block each)
    // and a few stats with a sample or two (the columns).
    std::vector<LogSample> taken;
    const uint64_t room = out.SampleRoom();
    for (uint64_t i = 0; taken.size() < room; ++i) {
      const uint32_t id = i % 64 < 50 ? static_cast<uint32_t>(i % 50) + 1
                                      : static_cast<uint32_t>(1000 + i);
      taken.push_back({id, static_cast<double>(i), static_cast<int64_t>(1000 + i)});
    }
    SampleGroups groups;
    out.AddSamples(taken, groups);
    EXPECT_EQ(out.samples, room);
    // Nothing beyond the block was allocated: the arena's whole space is
    // the block.
    EXPECT_EQ(out.arena->get()->SpaceAllocated(), BatchMemory::kBlockBytes);
    EXPECT_EQ(memory->kept(), 0u);
  }
  EXPECT_EQ(memory->kept(), 1u);
}

TEST(OutgoingBatchTest, DefinitionsAndDropReportsAreAccounted) {
  Fixture f;
  OutgoingBatch out;
  out.AddDefinition(*f.stat);
  out.AddDropReport(*f.stat, 42);
  // The definition is kept as the stat's bytes, not parsed into the batch;
  // the daemon reads it from the wire.
  EXPECT_EQ(out.batch->definitions_size(), 0);
  v1::IngestBatch wire;
  ASSERT_TRUE(wire.ParseFromString(out.wire().Encode()));
  ASSERT_EQ(wire.definitions_size(), 1);
  EXPECT_EQ(wire.definitions(0).name(), "batch.stat");
  EXPECT_EQ(wire.definitions(0).SerializeAsString(), f.stat->definition_bytes.view());
  ASSERT_EQ(out.batch->drops_size(), 1);
  EXPECT_EQ(out.batch->drops(0).stat_id(), 7u);
  EXPECT_EQ(out.batch->drops(0).dropped(), 42u);
  ASSERT_EQ(out.defines.size(), 1u);
  EXPECT_EQ(out.defines[0], f.stat.get());
  ASSERT_EQ(out.parts.size(), 1u);
  EXPECT_EQ(out.parts[0].stat_id, 7u);
  EXPECT_EQ(out.parts[0].drops, 42u);
  EXPECT_EQ(out.bytes, DefinitionBytes(*f.stat) + kDropReportBytes);
}

TEST(OutgoingBatchTest, RoomForNewDefinitionsIsMadeOnceAndExactly) {
  // 300 stats with names of 8 to 300 bytes (definitions whose lengths take
  // one varint byte and two): the batch's definitions are reserved once,
  // exactly, and adding them all moves nothing.
  auto buffers = std::make_shared<ClientBuffers>(size_t{8} << 20);
  std::vector<std::unique_ptr<StatState>> owned;
  std::vector<StatState*> fresh;
  for (uint32_t id = 1; id <= 300; ++id) {
    v1::StatDefinition def;
    def.set_id(id);
    def.set_name(std::string(8 + id % 2 * (id - 1), 'n'));
    def.mutable_spec()->add_aggregations(v1::MEAN);
    owned.push_back(std::make_unique<StatState>(def, true, buffers));
    fresh.push_back(owned.back().get());
  }
  OutgoingBatch out;
  out.ReserveDefinitions(fresh);
  const char* const data = out.definitions.data();
  const size_t capacity = out.definitions.capacity();
  for (StatState* stat : fresh) out.AddDefinition(*stat);
  EXPECT_EQ(out.definitions.data(), data);
  EXPECT_EQ(out.definitions.capacity(), capacity);
  EXPECT_EQ(out.definitions.size(), capacity) << "reserved exactly";
  EXPECT_EQ(out.defines.size(), fresh.size());
  v1::IngestBatch wire;
  ASSERT_TRUE(wire.ParseFromString(out.wire().Encode()));
  EXPECT_EQ(wire.definitions_size(), 300);
}

TEST(OutgoingBatchTest, ReservedGroupsHoldEveryStatUpToTheMaxIdWithoutMoving) {
  // Stats 1..300 with a sample each, in a drain of at most 1000 samples:
  // the scratch is sized once, and counting them moves nothing.
  SampleGroups groups;
  groups.Begin();
  groups.Reserve(300, 1000);
  ASSERT_EQ(groups.slot_of_id.size(), 301u);
  ASSERT_GE(groups.groups.capacity(), 301u);
  const SampleGroups::Group* const data = groups.groups.data();
  const uint32_t* const slots = groups.slot_of_id.data();
  for (uint32_t id = 300; id >= 1; --id) groups.Count(id, 1000 + id);
  EXPECT_EQ(groups.groups.data(), data);
  EXPECT_EQ(groups.slot_of_id.data(), slots);
  ASSERT_EQ(groups.groups.size(), 300u);
  EXPECT_EQ(groups.groups[0].stat_id, 300u);
  EXPECT_EQ(groups.groups[0].first_us, 1300);
  // Fewer samples than stats bound the groups instead.
  SampleGroups few;
  few.Reserve(300, 8);
  EXPECT_GE(few.groups.capacity(), 8u);
  EXPECT_LT(few.groups.capacity(), 301u);
}

}  // namespace
}  // namespace torchmon::detail

// OutgoingBatch: filling one IngestBatch within its byte budget from the
// stats' buffers. Pure: no sockets, no sleeps.
#include "detail/outgoing_batch.h"

#include <memory>
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

TEST(OutgoingBatchTest, SamplesBecomeOneBlockOfValuesAndTimeDeltas) {
  Fixture f;
  f.stat->Add(1.5, 1000);
  f.stat->Add(2.5, 1003);
  f.stat->Add(3.5, 1001);  // explicit timestamps may go back
  OutgoingBatch out;
  EXPECT_EQ(out.AddSamples(*f.stat, f.buffers->pool, 10), 3u);
  ASSERT_EQ(out.batch->samples_size(), 1);
  const v1::SampleBlock& block = out.batch->samples(0);
  EXPECT_EQ(block.stat_id(), 7u);
  EXPECT_EQ(block.base_time_us(), 1000);
  EXPECT_EQ(std::vector<double>(block.values().begin(), block.values().end()),
            (std::vector<double>{1.5, 2.5, 3.5}));
  EXPECT_EQ(std::vector<int64_t>(block.time_deltas_us().begin(), block.time_deltas_us().end()),
            (std::vector<int64_t>{0, 3, -2}));
  EXPECT_EQ(out.samples, 3u);
  ASSERT_EQ(out.parts.size(), 1u);
  EXPECT_EQ(out.parts[0].samples, 3u);
  EXPECT_EQ(out.bytes, kBlockOverheadBytes + 3 * kSampleBytes);
}

TEST(OutgoingBatchTest, DeltasAreOmittedWhenEverySampleIsAtTheBase) {
  Fixture f;
  for (int i = 0; i < 4; ++i) f.stat->Add(i, 5000);
  OutgoingBatch out;
  EXPECT_EQ(out.AddSamples(*f.stat, f.buffers->pool, 10), 4u);
  EXPECT_EQ(out.batch->samples(0).time_deltas_us_size(), 0);
}

TEST(OutgoingBatchTest, NothingBufferedAddsNoBlock) {
  Fixture f;
  OutgoingBatch out;
  EXPECT_EQ(out.AddSamples(*f.stat, f.buffers->pool, 10), 0u);
  EXPECT_EQ(out.batch->samples_size(), 0);
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

TEST(OutgoingBatchTest, DefinitionsAndDropReportsAreAccountedAsParts) {
  Fixture f;
  OutgoingBatch out;
  out.AddDefinition(*f.stat);
  out.AddDropReport(*f.stat, 42);
  ASSERT_EQ(out.batch->definitions_size(), 1);
  EXPECT_EQ(out.batch->definitions(0).name(), "batch.stat");
  ASSERT_EQ(out.batch->drops_size(), 1);
  EXPECT_EQ(out.batch->drops(0).stat_id(), 7u);
  EXPECT_EQ(out.batch->drops(0).dropped(), 42u);
  ASSERT_EQ(out.parts.size(), 2u);
  EXPECT_TRUE(out.parts[0].defines);
  EXPECT_EQ(out.parts[1].drops, 42u);
  EXPECT_EQ(out.bytes, DefinitionBytes(*f.stat) + kDropReportBytes);
}

}  // namespace
}  // namespace torchmon::detail

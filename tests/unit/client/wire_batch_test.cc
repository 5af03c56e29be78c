// WireBatch: what the client writes on its Ingest stream is an IngestBatch
// on the wire, its definitions written from the stats' bytes. Pure: no
// sockets.
#include "detail/wire_batch.h"

#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

v1::StatDefinition Definition(uint32_t id, const std::string& name) {
  v1::StatDefinition def;
  def.set_id(id);
  def.set_name(name);
  (*def.mutable_labels())["rank"] = "3";
  def.mutable_spec()->add_aggregations(v1::MEAN);
  def.mutable_spec()->set_window_size_ms(60000);
  return def;
}

TEST(WireBatchTest, ParsesAsTheIngestBatchWithItsDefinitionsInOrder) {
  v1::IngestBatch message;
  message.set_sequence(41);
  message.mutable_hello()->set_client_name("trainer");
  v1::SampleBlock* block = message.add_samples();
  block->set_stat_id(2);
  block->add_values(1.5);
  message.add_released(9);

  // Every length a definition's varint takes: 1 byte (below 128), 2 and 3.
  std::string definitions;
  v1::IngestBatch expected = message;
  for (const size_t name_size : {size_t{5}, size_t{200}, size_t{20000}}) {
    const v1::StatDefinition def =
        Definition(static_cast<uint32_t>(name_size), std::string(name_size, 'n'));
    AppendDefinitionEntry(def.SerializeAsString(), &definitions);
    *expected.add_definitions() = def;
  }

  const WireBatch wire{message, definitions};
  const std::string encoded = wire.Encode();
  EXPECT_EQ(encoded.size(), wire.Size());
  EXPECT_EQ(encoded.size(), expected.ByteSizeLong());
  v1::IngestBatch parsed;
  ASSERT_TRUE(parsed.ParseFromString(encoded));
  std::string differences;
  google::protobuf::util::MessageDifferencer differencer;
  differencer.ReportDifferencesToString(&differences);
  EXPECT_TRUE(differencer.Compare(expected, parsed)) << differences;
}

TEST(WireBatchTest, WithoutDefinitionsItIsTheMessagesOwnEncoding) {
  v1::IngestBatch message;
  message.set_sequence(7);
  message.add_drops()->set_stat_id(3);
  EXPECT_EQ(WireBatch({message, {}}).Encode(), message.SerializeAsString());
}

TEST(WireBatchTest, TheStreamMethodIsIngestStreamOfBatchesAndAcks) {
  // The client opens the stream by this name, not through the stub.
  const google::protobuf::ServiceDescriptor* service =
      v1::IngestBatch::descriptor()->file()->FindServiceByName("Ingest");
  ASSERT_NE(service, nullptr);
  const google::protobuf::MethodDescriptor* method = service->FindMethodByName("Stream");
  ASSERT_NE(method, nullptr);
  EXPECT_EQ(kIngestStreamMethod, "/" + service->full_name() + "/" + method->name());
  EXPECT_EQ(method->input_type(), v1::IngestBatch::descriptor());
  EXPECT_EQ(method->output_type(), v1::IngestAck::descriptor());
  EXPECT_TRUE(method->client_streaming());
  EXPECT_TRUE(method->server_streaming());
}

}  // namespace
}  // namespace torchmon::detail

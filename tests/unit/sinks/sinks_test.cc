// The sinks' encoders: CRC-32C, TFRecord framing, the TensorBoard Event
// bytes, JSON lines and run names. The end-to-end check of the files a real
// daemon writes, with an independent reader, is tests/sinks/.
#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sinks/crc32c.h"
#include "server/core/json_lines.h"
#include "server/sinks/sink_writer.h"
#include "server/sinks/tfrecord.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::initializer_list<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

TEST(Crc32cTest, Rfc3720Vectors) {
  // RFC 3720, B.4 (iSCSI CRC examples).
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46DD794Eu);
  EXPECT_EQ(Crc32c(descending), 0x113FDB5Cu);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);  // the check value of CRC-32C
  EXPECT_EQ(Crc32c(""), 0u);
}

TEST(Crc32cTest, MaskIsRotateRight15PlusConstant) {
  EXPECT_EQ(MaskCrc32c(0), 0xa282ead8u);
  EXPECT_EQ(MaskCrc32c(0x00008000u), 0xa282ead9u);  // bit 15 rotates to bit 0
  EXPECT_EQ(MaskCrc32c(1), 0xa282ead8u + 0x20000u);
}

TEST(TfRecordTest, FramesLengthAndDataWithMaskedCrcs) {
  const std::string record = TfRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(record.substr(0, 8), Bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  const uint32_t length_crc = MaskCrc32c(Crc32c(record.substr(0, 8)));
  const uint32_t data_crc = MaskCrc32c(Crc32c("abc"));
  auto le32 = [](uint32_t v) {
    return Bytes({static_cast<int>(v & 0xFF), static_cast<int>((v >> 8) & 0xFF),
                  static_cast<int>((v >> 16) & 0xFF), static_cast<int>(v >> 24)});
  };
  EXPECT_EQ(record.substr(8, 4), le32(length_crc));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(record.substr(15, 4), le32(data_crc));
}

TEST(TfRecordTest, FileVersionEventBytes) {
  // wall_time = 1.5: field 1, fixed64 (tag 0x09), IEEE 754 LE; file_version:
  // field 3, length-delimited (tag 0x1a).
  EXPECT_EQ(FileVersionEvent(1.5),
            Bytes({0x09, 0, 0, 0, 0, 0, 0, 0xF8, 0x3F, 0x1a, 13}) + "brain.Event:2");
}

TEST(TfRecordTest, ScalarsEventBytes) {
  // wall_time 2.0, step 300 (varint AC 02), summary { value { tag "a.mean"
  // simple_value 0.5f } }.
  const std::string value = Bytes({0x0a, 6}) + "a.mean" + Bytes({0x15, 0, 0, 0, 0x3F});
  const std::string summary = Bytes({0x0a, static_cast<int>(value.size())}) + value;
  EXPECT_EQ(ScalarsEvent(2.0, 300, {{"a.mean", 0.5f}}),
            Bytes({0x09, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x10, 0xAC, 0x02, 0x2a,
                   static_cast<int>(summary.size())}) +
                summary);
}

ClosedWindow Window() {
  ClosedWindow w;
  w.series = std::make_shared<SeriesKey>(
      SeriesKey{"train.\"loss\"", Labels{{"host", "gpu\n7"}, {"rank", "0"}}});
  w.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax) |
                   AggregationBit(Aggregation::kCount);
  w.start_ms = 1'700'000'000'000;
  w.end_ms = 1'700'000'001'000;
  w.stats.Add(1.0, 0);
  w.stats.Add(2.0, 0);
  w.stats.Add(std::numeric_limits<double>::quiet_NaN(), 0);
  w.stats.capped = 4;
  w.partial = true;
  return w;
}

TEST(JsonlTest, WindowLineHasEveryFieldEscapedAndNaNAsAString) {
  EXPECT_EQ(WindowJsonLine(Window()),
            "{\"type\":\"window\",\"stat\":\"train.\\\"loss\\\"\","
            "\"labels\":{\"host\":\"gpu\\n7\",\"rank\":\"0\"},"
            "\"start_ms\":1700000000000,\"end_ms\":1700000001000,"
            "\"start\":\"2023-11-14T22:13:20.000Z\",\"end\":\"2023-11-14T22:13:21.000Z\","
            "\"partial\":true,\"definition\":0,\"accepted\":3,\"capped\":4,"
            "\"aggregates\":{\"mean\":\"NaN\",\"count\":3,\"max\":\"NaN\"}}");
}

TEST(JsonlTest, QuantilesFollowTheSixUnderTheirNames) {
  ClosedWindow w = Window();
  w.quantiles = {{0.5, 1.5}, {0.999, std::numeric_limits<double>::infinity()}};
  EXPECT_THAT(WindowJsonLine(w),
              HasSubstr("\"aggregates\":{\"mean\":\"NaN\",\"count\":3,\"max\":\"NaN\","
                        "\"p50\":1.5,\"p99.9\":\"+Inf\"}}"));
}

TEST(JsonlTest, EventLineKeepsFieldTypes) {
  EventRecord e;
  e.sequence = 7;
  e.name = "epoch_end";
  e.timestamp_us = 1'700'000'000'123'456;
  e.labels = {{"rank", "1"}};
  e.data = {{"epoch", int64_t{3}}, {"lr", 0.25}, {"ok", true}, {"note", std::string("a\"b")},
            {"bad", std::numeric_limits<double>::infinity()}};
  EXPECT_EQ(EventJsonLine(e),
            "{\"type\":\"event\",\"name\":\"epoch_end\",\"labels\":{\"rank\":\"1\"},"
            "\"timestamp_us\":1700000000123456,\"timestamp\":\"2023-11-14T22:13:20.123456Z\","
            "\"sequence\":7,\"data\":{\"epoch\":3,\"lr\":0.25,\"ok\":true,\"note\":\"a\\\"b\","
            "\"bad\":\"+Inf\"},\"data_types\":{\"epoch\":\"int\",\"lr\":\"double\","
            "\"ok\":\"bool\",\"note\":\"string\",\"bad\":\"double\"}}");
}

TEST(TensorBoardRunNameTest, LabelsInKeyOrderWithUnsafeBytesEscaped) {
  EXPECT_EQ(TensorBoardRunName({{"host", "gpu-07"}, {"rank", "0"}}), "host=gpu-07,rank=0");
  EXPECT_EQ(TensorBoardRunName({{"job", "a/../b c%"}}), "job=a%2F..%2Fb%20c%25");
  EXPECT_EQ(TensorBoardRunName({}), "no-labels");
  // Distinct label sets never share a run, even when escaping is involved.
  EXPECT_NE(TensorBoardRunName({{"k", "a/b"}}), TensorBoardRunName({{"k", "a%2Fb"}}));
  const std::string long_name = TensorBoardRunName({{"k", std::string(400, 'x')}});
  EXPECT_LE(long_name.size(), 255u);
  EXPECT_NE(long_name, TensorBoardRunName({{"k", std::string(401, 'x')}}));
}

}  // namespace
}  // namespace torchmon::server

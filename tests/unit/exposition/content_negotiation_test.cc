// /metrics content negotiation (Accept, Accept-Encoding) and the gzip
// stream, on the headers real scrapers send.
#include "server/exposition/content_negotiation.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/exposition/gzip_stream.h"
#include "support/gunzip.h"

namespace torchmon::server {
namespace {

using ::torchmon::testing::Gunzip;

constexpr ExpositionFormat kText = ExpositionFormat::kText;
constexpr ExpositionFormat kOpenMetrics = ExpositionFormat::kOpenMetrics;
constexpr ExpositionFormat kProtobuf = ExpositionFormat::kProtobuf;

TEST(NegotiateFormatTest, WhatPrometheusAsksFor) {
  // Prometheus 2.42 (Debian bookworm), with and without
  // --enable-feature=native-histograms.
  EXPECT_EQ(NegotiateFormat("application/vnd.google.protobuf;proto=io.prometheus.client."
                            "MetricFamily;encoding=delimited,application/openmetrics-text;"
                            "version=1.0.0;q=0.8,application/openmetrics-text;version=0.0.1;"
                            "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"),
            kProtobuf);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0,application/"
                            "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;"
                            "q=0.5,*/*;q=0.1"),
            kOpenMetrics);
  // Prometheus 3: escaping= is a parameter every name we send satisfies.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;"
                            "q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;"
                            "version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;"
                            "q=0.2,*/*;q=0.1"),
            kOpenMetrics);
  // A scraper that only reads text 0.0.4 and says so.
  EXPECT_EQ(NegotiateFormat("text/plain;version=0.0.4;q=1,*/*;q=0.1"), kText);
}

TEST(NegotiateFormatTest, QValuesDecideAndSpecificRangesGiveTheirOwn) {
  EXPECT_EQ(NegotiateFormat("text/plain;q=0.9, application/openmetrics-text;version=1.0.0"),
            kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0.2, text/plain"), kText);
  // The specific range's q (0) wins over the wildcard's for OpenMetrics.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;q=0, application/*"), kProtobuf);
  EXPECT_EQ(NegotiateFormat("APPLICATION/OpenMetrics-Text; Version=1.0.0"), kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("application/vnd.google.protobuf"), kProtobuf);
  // Equal q: the range listed first.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text, text/plain"), kOpenMetrics);
  EXPECT_EQ(NegotiateFormat("text/plain, application/openmetrics-text"), kText);
}

TEST(NegotiateFormatTest, AnotherVersionOrEncodingMatchesNothing) {
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=0.0.1"), kText);
  EXPECT_EQ(NegotiateFormat("application/vnd.google.protobuf;proto=io.prometheus.client."
                            "MetricFamily;encoding=text"),
            kText);
  EXPECT_EQ(NegotiateFormat("text/plain;version=1.0.0"), kText);  // text anyway, as fallback
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0;foo=bar"), kText);
}

TEST(NegotiateFormatTest, NothingWeServeOrABadHeaderGetsText) {
  EXPECT_EQ(NegotiateFormat(nullptr), kText);
  EXPECT_EQ(NegotiateFormat(""), kText);
  EXPECT_EQ(NegotiateFormat("*/*"), kText);
  EXPECT_EQ(NegotiateFormat("application/json"), kText);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0;q=0"), kText);
  // Malformed: treated as absent, even where a valid range is listed too.
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version=1.0.0;q=2"), kText);
  EXPECT_EQ(NegotiateFormat("application/vnd.google.protobuf;q=high"), kText);
  EXPECT_EQ(NegotiateFormat("application/openmetrics-text;version"), kText);
  EXPECT_EQ(NegotiateFormat(";;;"), kText);
}

TEST(NegotiateFormatTest, ContentTypeNamesExactlyTheFormat) {
  EXPECT_EQ(ContentType(kText), "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(ContentType(kOpenMetrics), "application/openmetrics-text; version=1.0.0; charset=utf-8");
  EXPECT_EQ(ContentType(kProtobuf),
            "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
            "encoding=delimited");
  // What we send is what we would choose for it.
  for (ExpositionFormat f : {kText, kOpenMetrics, kProtobuf}) {
    EXPECT_EQ(NegotiateFormat(std::string(ContentType(f)).c_str()), f);
  }
}

TEST(AcceptsGzipTest, GzipWhenNamedOrCoveredByAStar) {
  EXPECT_TRUE(AcceptsGzip("gzip"));  // Prometheus
  EXPECT_TRUE(AcceptsGzip("deflate, gzip;q=0.5"));
  EXPECT_TRUE(AcceptsGzip("x-gzip"));
  EXPECT_TRUE(AcceptsGzip("*"));
  EXPECT_FALSE(AcceptsGzip("gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("*, gzip;q=0"));
  EXPECT_FALSE(AcceptsGzip("*;q=0"));
  EXPECT_FALSE(AcceptsGzip("identity"));
  EXPECT_FALSE(AcceptsGzip("br, deflate"));
  EXPECT_FALSE(AcceptsGzip(""));
  EXPECT_FALSE(AcceptsGzip(nullptr));
  EXPECT_FALSE(AcceptsGzip("gzip;q=x"));  // malformed: as if absent
}


// Threads compressing: 1 (in the writer's thread) or several (blocks in
// parallel, pigz-style); the output is one gzip stream either way.
class GzipStreamTest : public ::testing::TestWithParam<size_t> {};

INSTANTIATE_TEST_SUITE_P(Threads, GzipStreamTest, ::testing::Values(1, 2, 3));

TEST_P(GzipStreamTest, PiecesInAreOneGzipStreamOut) {
  std::string compressed;
  int calls = 0;
  GzipStream gzip(
      [&](absl::string_view piece) {
        ++calls;
        compressed.append(piece.data(), piece.size());
        return true;
      },
      GetParam());
  std::string original;
  for (int i = 0; i < 200000; ++i) {
    const std::string line = "torchmon_stat{stat=\"s" + std::to_string(i % 977) + "\"} " +
                             std::to_string(i * 7919 % 100003) + "\n";
    original += line;
    ASSERT_TRUE(gzip.Write(line));
  }
  ASSERT_TRUE(gzip.Finish());
  EXPECT_GT(calls, 1);  // streamed, not held to the end
  EXPECT_LT(compressed.size(), original.size() / 4);
  EXPECT_EQ(Gunzip(compressed), original);
}

TEST_P(GzipStreamTest, EmptyAndTinyStreamsAreWholeGzipStreams) {
  for (const std::string& original : {std::string(), std::string("x"), std::string(1000, 'y')}) {
    std::string compressed;
    GzipStream gzip(
        [&](absl::string_view piece) {
          compressed.append(piece.data(), piece.size());
          return true;
        },
        GetParam());
    ASSERT_TRUE(gzip.Write(original));
    ASSERT_TRUE(gzip.Finish());
    EXPECT_EQ(Gunzip(compressed), original) << original.size() << " bytes";
  }
}

TEST_P(GzipStreamTest, AReaderThatGoesAwayStopsTheStream) {
  GzipStream gzip([](absl::string_view) { return false; }, GetParam());
  std::string big(1 << 20, 'x');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + (i * 7919) % 26);
  // 8 MiB of poorly compressible text: output reaches the sink, which refuses.
  bool refused = false;
  for (int i = 0; i < 8 && !refused; ++i) refused = !gzip.Write(big);
  EXPECT_TRUE(refused);
  EXPECT_FALSE(gzip.Write("more"));
  EXPECT_FALSE(gzip.Finish());
}

}  // namespace
}  // namespace torchmon::server

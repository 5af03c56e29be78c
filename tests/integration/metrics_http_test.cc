// /metrics over real HTTP from a real daemon: the format each Accept header
// gets, gzip, and what HEAD says; the protobuf answer read back with the
// messages compiled from Debian's metrics.proto.
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/delimited_message_util.h"
#include "gtest/gtest.h"
#include "io/prometheus/client/metrics.pb.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/gunzip.h"
#include "torchmon/client.h"

namespace torchmon::testing {
namespace {

namespace pb = ::io::prometheus::client;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr char kProtobuf[] =
    "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
    "encoding=delimited";

class MetricsHttpTest : public DaemonFixture {
 protected:
  absl::StatusOr<HttpResponse> Get(std::vector<std::string> headers,
                                   const std::string& method = "GET") {
    return HttpRequest(daemon_->metrics_address(), method, "/metrics", headers);
  }
};

std::vector<pb::MetricFamily> ParseDelimited(const std::string& bytes) {
  std::vector<pb::MetricFamily> out;
  google::protobuf::io::ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  pb::MetricFamily family;
  bool clean_eof = false;
  while (google::protobuf::util::ParseDelimitedFromZeroCopyStream(&family, &input, &clean_eof)) {
    out.push_back(family);
  }
  EXPECT_TRUE(clean_eof) << "a malformed MetricFamily after " << out.size();
  return out;
}


TEST_F(MetricsHttpTest, EachAcceptHeaderGetsItsFormatNamedExactly) {
  StartDaemon();
  Client client(Options());
  Stat step(client, "step_ms", {Aggregation::MEAN, Quantile(0.99)},
            std::chrono::milliseconds(100));
  const std::vector<double> samples = {10, 20, 40, 80, 160, -1};
  for (double x : samples) step.add(x);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());

  // Prometheus 2.42 with native histograms: protobuf first.
  auto proto = Get({"Accept: application/vnd.google.protobuf;proto=io.prometheus.client."
                    "MetricFamily;encoding=delimited,application/openmetrics-text;version=1.0.0;"
                    "q=0.8,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"});
  ASSERT_TRUE(proto.ok()) << proto.status();
  EXPECT_EQ(proto->status, 200);
  EXPECT_THAT(proto->head, HasSubstr(std::string("Content-Type: ") + kProtobuf + "\r\n"));
  EXPECT_THAT(proto->head, HasSubstr("Vary: Accept, Accept-Encoding"));
  const std::vector<pb::MetricFamily> families = ParseDelimited(proto->body);
  const pb::MetricFamily* histogram = nullptr;
  for (const pb::MetricFamily& f : families) {
    if (f.name() == "torchmon_stat_distribution") histogram = &f;
  }
  ASSERT_NE(histogram, nullptr);
  ASSERT_EQ(histogram->metric_size(), 1);
  const pb::Histogram& h = histogram->metric(0).histogram();
  EXPECT_EQ(h.sample_count(), samples.size());
  EXPECT_EQ(h.sample_sum(), 309);
  EXPECT_EQ(h.schema(), 5);
  EXPECT_EQ(h.negative_span_size(), 1);
  int64_t positive = 0, count = 0;
  for (int64_t delta : h.positive_delta()) positive += (count += delta);
  EXPECT_EQ(positive, 5);  // 10, 20, 40, 80 and 160, each in its own bucket

  // Prometheus without the feature: OpenMetrics 1.0.
  auto om = Get({"Accept: application/openmetrics-text;version=1.0.0,application/"
                 "openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"});
  ASSERT_TRUE(om.ok()) << om.status();
  EXPECT_THAT(om->head, HasSubstr("Content-Type: application/openmetrics-text; version=1.0.0; "
                                  "charset=utf-8\r\n"));
  EXPECT_THAT(om->body, HasSubstr("# TYPE torchmon_samples_accepted counter\n"));
  EXPECT_THAT(om->body, EndsWith("# EOF\n"));

  // Nothing we serve, a malformed header, no header: text 0.0.4.
  for (const std::vector<std::string>& headers :
       std::vector<std::vector<std::string>>{{"Accept: application/json"},
                                             {"Accept: application/openmetrics-text;q=7"},
                                             {}}) {
    auto text = Get(headers);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_EQ(text->status, 200);
    EXPECT_THAT(text->head, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
    EXPECT_THAT(text->body, StartsWith("# HELP torchmon_"));
    EXPECT_THAT(text->body, HasSubstr("torchmon_stat_distribution_count{stat=\"step_ms\""));
    EXPECT_THAT(text->body, Not(HasSubstr("# EOF")));
  }
}

TEST_F(MetricsHttpTest, GzipWhenAcceptEncodingAsksInEveryFormat) {
  StartDaemon();
  Client client(Options());
  Stat loss(client, "loss", {Aggregation::MEAN}, std::chrono::milliseconds(100));
  loss.add(0.5);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  auto plain = Get({});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_THAT(plain->head, Not(HasSubstr("Content-Encoding")));

  auto text = Get({"Accept-Encoding: gzip"});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_THAT(text->head, HasSubstr("Content-Encoding: gzip\r\n"));
  const std::string unzipped = Gunzip(text->body);
  EXPECT_THAT(unzipped, StartsWith("# HELP torchmon_"));
  EXPECT_THAT(unzipped, HasSubstr("torchmon_samples_accepted_total{stat=\"loss\""));
  EXPECT_LT(text->body.size(), unzipped.size() / 3);

  auto proto = Get({std::string("Accept: ") + kProtobuf, "Accept-Encoding: deflate, gzip;q=0.5"});
  ASSERT_TRUE(proto.ok()) << proto.status();
  EXPECT_THAT(proto->head, HasSubstr(std::string("Content-Type: ") + kProtobuf));
  EXPECT_THAT(proto->head, HasSubstr("Content-Encoding: gzip\r\n"));
  EXPECT_FALSE(ParseDelimited(Gunzip(proto->body)).empty());

  auto refused = Get({"Accept-Encoding: gzip;q=0, identity"});
  ASSERT_TRUE(refused.ok()) << refused.status();
  EXPECT_THAT(refused->head, Not(HasSubstr("Content-Encoding")));
  EXPECT_THAT(refused->body, StartsWith("# HELP"));
}

TEST_F(MetricsHttpTest, HeadSaysWhatAGetWithTheSameHeadersWouldSend) {
  StartDaemon();
  auto head = Get({"Accept: application/openmetrics-text; version=1.0.0", "Accept-Encoding: gzip"},
                  "HEAD");
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200);
  EXPECT_THAT(head->head, HasSubstr("Content-Type: application/openmetrics-text; version=1.0.0"));
  EXPECT_THAT(head->head, HasSubstr("Content-Encoding: gzip\r\n"));
  EXPECT_EQ(head->body, "");
}

}  // namespace
}  // namespace torchmon::testing

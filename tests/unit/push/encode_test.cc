// The push encodings read back with the protocols' own generated messages:
// remote-write bodies uncompressed with snappy and parsed as
// prometheus.WriteRequest, OTLP bodies parsed as ExportMetricsServiceRequest.
#include "server/push/encode.h"

#include <snappy-c.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"
#include "prometheus/prompb/remote.pb.h"
#include "server/core/native_histogram.h"
#include "support/gunzip.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;

ClosedWindow Window(const std::string& stat, Labels labels, int64_t start_ms, int64_t end_ms,
                    std::vector<double> values) {
  ClosedWindow w;
  w.series = std::make_shared<const SeriesKey>(SeriesKey{stat, LabelSet(std::move(labels))});
  w.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kMax) |
                   AggregationBit(Aggregation::kCount);
  w.start_ms = start_ms;
  w.end_ms = end_ms;
  for (double v : values) w.stats.Add(v, 0);
  w.counters.accepted = 40;
  w.counters.capped = 1;
  w.counters.late = 2;
  w.counters.skewed = 3;
  w.counters.client_dropped = 4;
  w.series_created_ms = 1000;
  return w;
}

prometheus::WriteRequest DecodeRemoteWrite(const std::string& body) {
  size_t size = 0;
  EXPECT_EQ(snappy_uncompressed_length(body.data(), body.size(), &size), SNAPPY_OK);
  std::string raw(size, '\0');
  EXPECT_EQ(snappy_uncompress(body.data(), body.size(), raw.data(), &size), SNAPPY_OK);
  prometheus::WriteRequest request;
  EXPECT_TRUE(request.ParseFromString(raw));
  return request;
}

std::map<std::string, std::string> LabelsOf(const prometheus::TimeSeries& ts) {
  std::map<std::string, std::string> out;
  for (const auto& l : ts.labels()) out[l.name()] = l.value();
  return out;
}

TEST(RemoteWriteTest, AggregatesAreStampedWithTheWindowsEndCountersWhenTheyWereRead) {
  ClosedWindow w = Window("train.loss", {{"job", "j"}, {"rank", "3"}}, 10'000, 11'000, {1, 2, 6});
  w.counters_ms = 11'600;  // closed after a grace of 600 ms
  const std::vector<EncodedRequest> requests = EncodeRemoteWrite({w}, 100);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].windows, 1u);
  const prometheus::WriteRequest request = DecodeRemoteWrite(requests[0].body);
  std::map<std::string, double> values;
  for (const prometheus::TimeSeries& ts : request.timeseries()) {
    // Sorted by name, as remote-write requires.
    for (int i = 1; i < ts.labels_size(); ++i) EXPECT_LT(ts.labels(i - 1).name(), ts.labels(i).name());
    auto labels = LabelsOf(ts);
    EXPECT_EQ(labels["stat"], "train.loss");
    EXPECT_EQ(labels["job"], "j");
    EXPECT_EQ(labels["rank"], "3");
    ASSERT_EQ(ts.samples_size(), 1);
    const bool counter = absl::EndsWith(labels["__name__"], "_total");
    EXPECT_EQ(ts.samples(0).timestamp(), counter ? 11'600 : 11'000) << labels["__name__"];
    std::string key = labels["__name__"];
    if (labels.count("agg")) key += "/" + labels["agg"];
    if (labels.count("reason")) key += "/" + labels["reason"];
    values[key] = ts.samples(0).value();
  }
  EXPECT_THAT(values, ElementsAre(Pair("torchmon_samples_accepted_total", 40),
                                  Pair("torchmon_samples_dropped_total/capped", 1),
                                  Pair("torchmon_samples_dropped_total/client", 4),
                                  Pair("torchmon_samples_dropped_total/late", 2),
                                  Pair("torchmon_samples_dropped_total/skewed", 3),
                                  Pair("torchmon_stat/count", 3), Pair("torchmon_stat/max", 6),
                                  Pair("torchmon_stat/mean", 3),
                                  Pair("torchmon_window_accepted_samples", 3),
                                  Pair("torchmon_window_capped_samples", 0)));
}

TEST(RemoteWriteTest, LabelsAreSortedByteWiseWhereverTheirNamesFallAroundTheAddedOnes) {
  // "Zone" sorts before "__name__" (upper case before '_'), "a" before
  // "agg", "rank" before "reason" before "stat", "zz" after everything.
  ClosedWindow w = Window("s", {{"Zone", "eu"}, {"a", "1"}, {"rank", "2"}, {"zz", "3"}}, 0, 1000, {1});
  w.histogram = std::make_shared<NativeHistogram>();
  const prometheus::WriteRequest request = DecodeRemoteWrite(EncodeRemoteWrite({w}, 10)[0].body);
  ASSERT_GT(request.timeseries_size(), 10);
  for (const prometheus::TimeSeries& ts : request.timeseries()) {
    std::vector<std::string> names;
    for (const auto& l : ts.labels()) names.push_back(l.name());
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end())) << ::testing::PrintToString(names);
    EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
    auto labels = LabelsOf(ts);
    EXPECT_EQ(labels["Zone"], "eu");
    EXPECT_EQ(labels["a"], "1");
    EXPECT_EQ(labels["rank"], "2");
    EXPECT_EQ(labels["zz"], "3");
    EXPECT_EQ(labels["stat"], "s");
    const size_t extra = labels.count("agg") + labels.count("reason");
    EXPECT_EQ(names.size(), 6 + extra) << ::testing::PrintToString(names);
  }
}

TEST(RemoteWriteTest, QuantilesAreNamedAsTheScrapeNamesThem) {
  ClosedWindow w = Window("step", {}, 0, 1000, {5});
  w.quantiles = {{0.5, 5.0}, {0.999, 5.5}};
  const prometheus::WriteRequest request = DecodeRemoteWrite(EncodeRemoteWrite({w}, 10)[0].body);
  std::map<std::string, double> quantiles;
  for (const auto& ts : request.timeseries()) {
    auto labels = LabelsOf(ts);
    if (labels["agg"] == "p50" || labels["agg"] == "p99.9") quantiles[labels["agg"]] = ts.samples(0).value();
  }
  EXPECT_THAT(quantiles, ElementsAre(Pair("p50", 5.0), Pair("p99.9", 5.5)));
}

// The bucket counts a native histogram's spans and deltas stand for.
std::map<int32_t, int64_t> Buckets(const google::protobuf::RepeatedPtrField<prometheus::BucketSpan>& spans,
                                   const google::protobuf::RepeatedField<int64_t>& deltas) {
  std::map<int32_t, int64_t> out;
  int32_t index = 0;
  int64_t count = 0;
  int d = 0;
  for (int s = 0; s < spans.size(); ++s) {
    index += spans[s].offset();
    for (uint32_t i = 0; i < spans[s].length(); ++i) {
      count += deltas[d++];
      out[index++] = count;
    }
  }
  EXPECT_EQ(d, deltas.size());
  return out;
}

TEST(RemoteWriteTest, TheHistogramIsANativeHistogramOfTheSameSchemaAndBuckets) {
  ClosedWindow w = Window("lat", {}, 0, 2000, {1});
  auto h = std::make_shared<NativeHistogram>();
  for (double v : {1.0, 1.0, 3.0, 100.0, -2.0, 0.0}) h->Add(v);
  w.histogram = h;
  const prometheus::WriteRequest request = DecodeRemoteWrite(EncodeRemoteWrite({w}, 10)[0].body);
  const prometheus::Histogram* out = nullptr;
  for (const auto& ts : request.timeseries()) {
    if (LabelsOf(ts)["__name__"] == "torchmon_stat_distribution") {
      ASSERT_EQ(ts.histograms_size(), 1);
      EXPECT_EQ(ts.samples_size(), 0);
      out = &ts.histograms(0);
    }
  }
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->count_int(), 6u);
  EXPECT_EQ(out->sum(), 103.0);
  EXPECT_EQ(out->schema(), h->schema());
  EXPECT_EQ(out->zero_count_int(), 1u);
  EXPECT_EQ(out->zero_threshold(), NativeHistogram::kZeroThreshold);
  EXPECT_EQ(out->timestamp(), 2000);
  std::map<int32_t, int64_t> want_positive, want_negative;
  h->ForEachBucket(true, [&](int32_t i, uint64_t n) { want_positive[i] = static_cast<int64_t>(n); });
  h->ForEachBucket(false, [&](int32_t i, uint64_t n) { want_negative[i] = static_cast<int64_t>(n); });
  EXPECT_EQ(Buckets(out->positive_spans(), out->positive_deltas()), want_positive);
  EXPECT_EQ(Buckets(out->negative_spans(), out->negative_deltas()), want_negative);
  EXPECT_EQ(want_positive.size(), 3u);  // 1, 3 and 100 in buckets of their own
}

TEST(RemoteWriteTest, AWindowOfManySeriesIsSplitIntoRequestsThatCountEveryWindowOnce) {
  std::vector<ClosedWindow> windows;
  for (int i = 0; i < 25; ++i) windows.push_back(Window("s", {{"rank", std::to_string(i)}}, 0, 1000, {1}));
  const std::vector<EncodedRequest> requests = EncodeRemoteWrite(windows, 10);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].windows, 10u);
  EXPECT_EQ(requests[1].windows, 10u);
  EXPECT_EQ(requests[2].windows, 5u);
  std::set<std::string> ranks;
  for (const EncodedRequest& r : requests) {
    const prometheus::WriteRequest request = DecodeRemoteWrite(r.body);
    for (const auto& ts : request.timeseries()) ranks.insert(LabelsOf(ts)["rank"]);
  }
  EXPECT_EQ(ranks.size(), 25u);
}

namespace otlp = opentelemetry::proto;

otlp::collector::metrics::v1::ExportMetricsServiceRequest DecodeOtlp(const std::string& body) {
  otlp::collector::metrics::v1::ExportMetricsServiceRequest request;
  EXPECT_TRUE(request.ParseFromString(testing::Gunzip(body)));
  return request;
}

std::map<std::string, std::string> AttributesOf(
    const google::protobuf::RepeatedPtrField<otlp::common::v1::KeyValue>& kvs) {
  std::map<std::string, std::string> out;
  for (const auto& kv : kvs) out[kv.key()] = kv.value().string_value();
  return out;
}

TEST(OtlpTest, IdentityLabelsWithAConventionAreResourceAttributesTheRestPointAttributes) {
  const ClosedWindow a = Window("loss", {{"host", "gpu1"}, {"pod_uid", "u-1"}, {"rank", "0"}, {"user", "ann"}},
                                0, 1000, {1});
  const ClosedWindow b = Window("loss", {{"host", "gpu2"}, {"rank", "1"}}, 0, 1000, {2});
  const auto request = DecodeOtlp(EncodeOtlp({a, b}, 10, "9.9")[0].body);
  ASSERT_EQ(request.resource_metrics_size(), 2);
  std::map<std::string, std::map<std::string, std::string>> resources;
  for (const auto& rm : request.resource_metrics()) {
    auto attributes = AttributesOf(rm.resource().attributes());
    resources[attributes["host.name"]] = attributes;
    ASSERT_EQ(rm.scope_metrics_size(), 1);
    EXPECT_EQ(rm.scope_metrics(0).scope().name(), "torchmond");
    EXPECT_EQ(rm.scope_metrics(0).scope().version(), "9.9");
    for (const auto& m : rm.scope_metrics(0).metrics()) {
      if (m.name() != "torchmon_stat") continue;
      for (const auto& p : m.gauge().data_points()) {
        auto point = AttributesOf(p.attributes());
        EXPECT_EQ(point["stat"], "loss");
        EXPECT_EQ(point.count("host"), 0u);
        EXPECT_EQ(point.count("user"), 0u);
        EXPECT_EQ(point["rank"], attributes["host.name"] == "gpu1" ? "0" : "1");
      }
    }
  }
  EXPECT_THAT(resources["gpu1"], ElementsAre(Pair("host.name", "gpu1"), Pair("k8s.pod.uid", "u-1"),
                                             Pair("process.owner", "ann")));
  EXPECT_THAT(resources["gpu2"], ElementsAre(Pair("host.name", "gpu2")));
}

TEST(OtlpTest, AggregatesAreGaugesAndCountersCumulativeSumsFromTheSeriesCreation) {
  ClosedWindow w = Window("loss", {{"rank", "0"}}, 10'000, 11'000, {1, 2, 6});
  w.counters_ms = 11'600;
  const auto request = DecodeOtlp(EncodeOtlp({w}, 10, "1")[0].body);
  ASSERT_EQ(request.resource_metrics_size(), 1);
  std::map<std::string, double> values;
  for (const auto& m : request.resource_metrics(0).scope_metrics(0).metrics()) {
    if (m.has_gauge()) {
      for (const auto& p : m.gauge().data_points()) {
        EXPECT_EQ(p.start_time_unix_nano(), 10'000'000'000u);
        EXPECT_EQ(p.time_unix_nano(), 11'000'000'000u);
        auto attributes = AttributesOf(p.attributes());
        values[m.name() + (attributes.count("agg") ? "/" + attributes["agg"] : "")] =
            p.has_as_double() ? p.as_double() : static_cast<double>(p.as_int());
      }
    } else {
      ASSERT_TRUE(m.has_sum()) << m.name();
      EXPECT_TRUE(m.sum().is_monotonic());
      EXPECT_EQ(m.sum().aggregation_temporality(),
                otlp::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE);
      for (const auto& p : m.sum().data_points()) {
        EXPECT_EQ(p.start_time_unix_nano(), 1'000'000'000u);
        EXPECT_EQ(p.time_unix_nano(), 11'600'000'000u);
        auto attributes = AttributesOf(p.attributes());
        values[m.name() + (attributes.count("reason") ? "/" + attributes["reason"] : "")] =
            static_cast<double>(p.as_int());
      }
    }
  }
  EXPECT_THAT(values, ElementsAre(Pair("torchmon_samples_accepted", 40),
                                  Pair("torchmon_samples_dropped/capped", 1),
                                  Pair("torchmon_samples_dropped/client", 4),
                                  Pair("torchmon_samples_dropped/late", 2),
                                  Pair("torchmon_samples_dropped/skewed", 3),
                                  Pair("torchmon_stat/count", 3), Pair("torchmon_stat/max", 6),
                                  Pair("torchmon_stat/mean", 3),
                                  Pair("torchmon_window_accepted_samples", 3),
                                  Pair("torchmon_window_capped_samples", 0)));
}

TEST(OtlpTest, TheHistogramIsAnExponentialHistogramOfTheSameScaleAndBucketsOneIndexLower) {
  ClosedWindow w = Window("lat", {}, 0, 2000, {1});
  auto h = std::make_shared<NativeHistogram>();
  for (double v : {1.0, 1.0, 3.0, 100.0, -2.0, 0.0, std::nan("")}) h->Add(v);
  w.histogram = h;
  const auto request = DecodeOtlp(EncodeOtlp({w}, 10, "1")[0].body);
  const otlp::metrics::v1::ExponentialHistogramDataPoint* p = nullptr;
  for (const auto& m : request.resource_metrics(0).scope_metrics(0).metrics()) {
    if (m.name() == "torchmon_stat_distribution") {
      ASSERT_TRUE(m.has_exponential_histogram());
      EXPECT_EQ(m.exponential_histogram().aggregation_temporality(),
                otlp::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE);
      p = &m.exponential_histogram().data_points(0);
    }
  }
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->scale(), h->schema());
  EXPECT_EQ(p->zero_count(), 1u);
  // The NaN is in no bucket: OpenTelemetry's count is the buckets' sum.
  EXPECT_EQ(p->count(), 6u);
  EXPECT_FALSE(p->has_sum());  // NaN
  EXPECT_EQ(p->start_time_unix_nano(), 1'000'000'000u);
  auto dense = [](const otlp::metrics::v1::ExponentialHistogramDataPoint::Buckets& b) {
    std::map<int32_t, uint64_t> out;
    for (int i = 0; i < b.bucket_counts_size(); ++i) {
      if (b.bucket_counts(i) != 0) out[b.offset() + i] = b.bucket_counts(i);
    }
    return out;
  };
  std::map<int32_t, uint64_t> want_positive, want_negative;
  h->ForEachBucket(true, [&](int32_t i, uint64_t n) { want_positive[i - 1] = n; });
  h->ForEachBucket(false, [&](int32_t i, uint64_t n) { want_negative[i - 1] = n; });
  EXPECT_EQ(dense(p->positive()), want_positive);
  EXPECT_EQ(dense(p->negative()), want_negative);
  // OpenTelemetry's bucket i is (base^i, base^(i+1)]: 3 lies in the one found.
  const double base = std::pow(2.0, std::pow(2.0, -p->scale()));
  for (const auto& [i, n] : dense(p->positive())) {
    if (n == 1 && std::pow(base, i) < 3.0 && 3.0 <= std::pow(base, i + 1)) return;
  }
  ADD_FAILURE() << "no bucket (base^i, base^(i+1)] holds 3";
}

}  // namespace
}  // namespace torchmon::server

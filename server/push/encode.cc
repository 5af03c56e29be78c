#include "server/push/encode.h"

#include <snappy-c.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"
#include "prometheus/prompb/remote.pb.h"
#include "server/core/native_histogram.h"
#include "server/core/protobuf_wire.h"

namespace torchmon::server {
namespace {

namespace otlp = opentelemetry::proto;

// The accounting counters' reasons, as /metrics labels them.
constexpr const char* kDropReasons[] = {"capped", "late", "skewed", "client"};
uint64_t DropCount(const SeriesCounters& c, size_t reason) {
  const uint64_t counts[] = {c.capped, c.late, c.skewed, c.client_dropped};
  return counts[reason];
}


void Append(std::string& out, absl::string_view bytes) { out.append(bytes.data(), bytes.size()); }

// `raw` gzipped at zlib's fastest level: an OTLP request of 2,000 series
// windows is ~2.4 MB of protobuf and ~0.1 MB gzipped. OTLP/HTTP receivers
// take Content-Encoding: gzip (the Collector's exporters send it by
// default).
std::string Gzip(const std::string& raw) {
  z_stream z{};
  // 15 + 16: a gzip header and trailer around the deflate stream.
  if (deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    std::abort();  // only when out of memory
  }
  std::string out(deflateBound(&z, raw.size()), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  if (rc != Z_STREAM_END) std::abort();  // deflateBound is enough, always
  return out;
}

// When a window's counters and histogram were read: as it closed, or (a
// window not read at a close) its end.
int64_t CountersMs(const ClosedWindow& w) { return w.counters_ms != 0 ? w.counters_ms : w.end_ms; }

namespace pw = ::prometheus;  // prompb's messages: their field numbers

// One remote-write request, written directly in the wire format (as
// /metrics' protobuf format is, prometheus_protobuf.cc): a window of 100k
// series is 1.3 million TimeSeries, and building them as message objects
// cost ten times the encoding itself. A series' labels are encoded once
// and copied into each of its TimeSeries.
class RemoteWriteRequest {
 public:
  // `windows`: how many the request will carry. About what they take
  // (13 series of 8 labels each) is reserved: one allocation per request
  // instead of a dozen doublings.
  explicit RemoteWriteRequest(size_t windows) { raw_.reserve(kBytesPerWindow * windows); }

  void Add(const ClosedWindow& w) {
    Prepare(*w.series);
    const int64_t t = w.end_ms;
    ForEachAggregate(w, [&](const AggregateRef& ref, double value) {
      Sample("torchmon_stat", agg_at_, "agg", AggregateName(ref), value, t);
    });
    Sample("torchmon_window_accepted_samples", 0, nullptr, "", static_cast<double>(w.stats.accepted), t);
    Sample("torchmon_window_capped_samples", 0, nullptr, "", static_cast<double>(w.stats.capped), t);
    // The series' counters and histogram as the window closed, stamped
    // when they were read: they may hold samples of the next window
    // already (its grace), so the window's end would misdate them.
    const int64_t read = CountersMs(w);
    Sample("torchmon_samples_accepted_total", 0, nullptr, "",
           static_cast<double>(w.counters.accepted), read);
    for (size_t r = 0; r < 4; ++r) {
      Sample("torchmon_samples_dropped_total", reason_at_, "reason", kDropReasons[r],
             static_cast<double>(DropCount(w.counters, r)), read);
    }
    if (w.histogram != nullptr) Histogram(*w.histogram, read);
  }

  EncodedRequest Finish(size_t windows) {
    EncodedRequest encoded;
    encoded.windows = windows;
    size_t size = snappy_max_compressed_length(raw_.size());
    encoded.body.resize(size);
    snappy_compress(raw_.data(), raw_.size(), encoded.body.data(), &size);
    encoded.body.resize(size);
    return encoded;
  }

 private:
  // The labels of `key` (stat among them) sorted by name, as remote-write
  // wants them, each encoded as a TimeSeries.labels field; and where
  // __name__, agg and reason go among them.
  void Prepare(const SeriesKey& key) {
    names_.clear();
    for (const auto& [k, v] : key.labels) names_.emplace_back(k, v);
    names_.emplace_back("stat", key.stat);
    std::sort(names_.begin(), names_.end());
    labels_.clear();
    label_end_.clear();
    for (const auto& [k, v] : names_) {
      PutLabel(labels_, k, v);
      label_end_.push_back(labels_.size());
    }
    name_at_ = Position("__name__");
    agg_at_ = Position("agg");
    reason_at_ = Position("reason");
  }
  // How many of the series' labels sort before `name`.
  size_t Position(absl::string_view name) const {
    return static_cast<size_t>(
        std::lower_bound(names_.begin(), names_.end(), name,
                         [](const auto& label, absl::string_view n) { return label.first < n; }) -
        names_.begin());
  }
  // The bytes of the series' labels [from, to).
  absl::string_view Labels(size_t from, size_t to) const {
    const size_t begin = from == 0 ? 0 : label_end_[from - 1];
    const size_t end = to == 0 ? 0 : label_end_[to - 1];
    return absl::string_view(labels_).substr(begin, end - begin);
  }
  static size_t LabelInner(absl::string_view name, absl::string_view value) {
    return 1 + wire::VarintSize(name.size()) + name.size() + 1 + wire::VarintSize(value.size()) +
           value.size();
  }
  static size_t LabelSize(absl::string_view name, absl::string_view value) {
    const size_t inner = LabelInner(name, value);
    return 1 + wire::VarintSize(inner) + inner;
  }
  static void PutLabel(std::string& out, absl::string_view name, absl::string_view value) {
    wire::PutVarint(out, wire::Tag(pw::TimeSeries::kLabelsFieldNumber, wire::kLengthDelimited));
    wire::PutVarint(out, LabelInner(name, value));
    wire::PutBytes(out, pw::Label::kNameFieldNumber, name);
    wire::PutBytes(out, pw::Label::kValueFieldNumber, value);
  }
  // One TimeSeries, appended to the request: the series' labels with
  // __name__ = `name` and, if `extra` is given, extra = `extra_value` at
  // `extra_at`; then `body`. Its length is known before it is written, so
  // it is written in place.
  void Series(absl::string_view name, size_t extra_at, const char* extra,
              absl::string_view extra_value, absl::string_view body) {
    const size_t n = label_end_.size();
    if (extra == nullptr) extra_at = n;
    const size_t size = labels_.size() + LabelSize("__name__", name) +
                        (extra != nullptr ? LabelSize(extra, extra_value) : 0) + body.size();
    wire::PutVarint(raw_, wire::Tag(pw::WriteRequest::kTimeseriesFieldNumber, wire::kLengthDelimited));
    wire::PutVarint(raw_, size);
    Append(raw_, Labels(0, name_at_));
    PutLabel(raw_, "__name__", name);
    Append(raw_, Labels(name_at_, extra_at));
    if (extra != nullptr) PutLabel(raw_, extra, extra_value);
    Append(raw_, Labels(extra_at, n));
    Append(raw_, body);
  }
  void Sample(absl::string_view name, size_t extra_at, const char* extra,
              absl::string_view extra_value, double value, int64_t ms) {
    sample_.clear();
    wire::PutDouble(sample_, pw::Sample::kValueFieldNumber, value);
    wire::PutUint(sample_, pw::Sample::kTimestampFieldNumber, static_cast<uint64_t>(ms));
    body_.clear();
    wire::PutBytes(body_, pw::TimeSeries::kSamplesFieldNumber, sample_);
    Series(name, extra_at, extra, extra_value, body_);
  }
  void Histogram(const NativeHistogram& h, int64_t ms) {
    sample_.clear();
    wire::PutUint(sample_, pw::Histogram::kCountIntFieldNumber, h.count());
    wire::PutDouble(sample_, pw::Histogram::kSumFieldNumber, h.sum());
    wire::PutUint(sample_, pw::Histogram::kSchemaFieldNumber,
                  wire::ZigZag(h.schema()) & 0xFFFFFFFFu);  // sint32
    wire::PutDouble(sample_, pw::Histogram::kZeroThresholdFieldNumber,
                    NativeHistogram::kZeroThreshold);
    wire::PutUint(sample_, pw::Histogram::kZeroCountIntFieldNumber, h.zero_count());
    h.ForEachBucket(false, [&](int32_t index, uint64_t count) { spans_.Add(index, count); });
    spans_.Finish(sample_, pw::Histogram::kNegativeSpansFieldNumber,
                  pw::Histogram::kNegativeDeltasFieldNumber);
    h.ForEachBucket(true, [&](int32_t index, uint64_t count) { spans_.Add(index, count); });
    spans_.Finish(sample_, pw::Histogram::kPositiveSpansFieldNumber,
                  pw::Histogram::kPositiveDeltasFieldNumber);
    wire::PutUint(sample_, pw::Histogram::kTimestampFieldNumber, static_cast<uint64_t>(ms));
    body_.clear();
    wire::PutBytes(body_, pw::TimeSeries::kHistogramsFieldNumber, sample_);
    Series("torchmon_stat_distribution", 0, nullptr, "", body_);
  }

  static constexpr size_t kBytesPerWindow = 1400;
  std::string raw_;  // the WriteRequest
  std::vector<std::pair<absl::string_view, absl::string_view>> names_;
  std::string labels_;              // the series' labels, encoded
  std::vector<size_t> label_end_;   // where each ends in labels_
  size_t name_at_ = 0, agg_at_ = 0, reason_at_ = 0;
  std::string sample_, body_;
  wire::BucketSpansWriter spans_;
};

// The resource attribute names of the identity labels with an OpenTelemetry
// convention.
constexpr std::pair<const char*, const char*> kResourceAttributes[] = {
    {"host", "host.name"},
    {"pod_uid", "k8s.pod.uid"},
    {"container_id", "container.id"},
    {"user", "process.owner"},
};

uint64_t Nanos(int64_t ms) { return static_cast<uint64_t>(std::max<int64_t>(ms, 0)) * 1'000'000u; }

namespace om = otlp::metrics::v1;  // the messages: their field numbers

// One OTLP request, written directly in the wire format, as remote-write's
// is: a ResourceMetrics per set of resource attributes, each with one scope
// and its metrics by name. Data points are appended to their metric's
// buffer as windows come; Finish nests them. Built as message objects
// (a KeyValue with an AnyValue per attribute of every point) the same
// window of 100k series took 638 ms before gzip.
class OtlpRequest {
 public:
  OtlpRequest(size_t /*windows*/, absl::string_view version) : version_(version) {}

  void Add(const ClosedWindow& w) {
    const SeriesKey& key = *w.series;
    Resource& resource = ResourceFor(key);
    // The point attributes: stat, then the labels without a resource
    // attribute, in label order; encoded once for the series.
    attributes_.clear();
    PutKeyValue(attributes_, kPointAttributes, "stat", key.stat);
    for (const auto& [k, v] : key.labels) {
      if (OtlpResourceAttribute(k) == nullptr) PutKeyValue(attributes_, kPointAttributes, k, v);
    }
    const uint64_t start = Nanos(w.start_ms), end = Nanos(w.end_ms),
                   created = Nanos(w.series_created_ms), read = Nanos(CountersMs(w));
    ForEachAggregate(w, [&](const AggregateRef& ref, double value) {
      NumberPoint(resource.points[kStat], "agg", AggregateName(ref), start, end, true, value, 0);
    });
    NumberPoint(resource.points[kAccepted], nullptr, "", start, end, false, 0,
                static_cast<int64_t>(w.stats.accepted));
    NumberPoint(resource.points[kCapped], nullptr, "", start, end, false, 0,
                static_cast<int64_t>(w.stats.capped));
    NumberPoint(resource.points[kAcceptedTotal], nullptr, "", created, read, false, 0,
                static_cast<int64_t>(w.counters.accepted));
    for (size_t r = 0; r < 4; ++r) {
      NumberPoint(resource.points[kDroppedTotal], "reason", kDropReasons[r], created, read, false, 0,
                  static_cast<int64_t>(DropCount(w.counters, r)));
    }
    if (w.histogram != nullptr) {
      HistogramPoint(resource.points[kDistribution], key, *w.histogram, created, read);
    }
  }

  EncodedRequest Finish(size_t windows) {
    std::string raw;
    std::string scope, resource, metric, data;
    for (const Resource& r : resources_) {
      scope.clear();
      std::string instrumentation;
      wire::PutBytes(instrumentation, otlp::common::v1::InstrumentationScope::kNameFieldNumber,
                     "torchmond");
      wire::PutBytes(instrumentation, otlp::common::v1::InstrumentationScope::kVersionFieldNumber,
                     version_);
      wire::PutBytes(scope, om::ScopeMetrics::kScopeFieldNumber, instrumentation);
      for (int i = 0; i < kMetrics; ++i) {
        if (r.points[i].empty()) continue;
        data.clear();
        Append(data, r.points[i]);
        const MetricInfo& info = kMetricInfo[i];
        int data_field = om::Metric::kGaugeFieldNumber;
        if (info.kind == kSum) {
          data_field = om::Metric::kSumFieldNumber;
          wire::PutUint(data, om::Sum::kAggregationTemporalityFieldNumber,
                        om::AGGREGATION_TEMPORALITY_CUMULATIVE);
          wire::PutUint(data, om::Sum::kIsMonotonicFieldNumber, 1);
        } else if (info.kind == kExponentialHistogram) {
          data_field = om::Metric::kExponentialHistogramFieldNumber;
          wire::PutUint(data, om::ExponentialHistogram::kAggregationTemporalityFieldNumber,
                        om::AGGREGATION_TEMPORALITY_CUMULATIVE);
        }
        metric.clear();
        wire::PutBytes(metric, om::Metric::kNameFieldNumber, info.name);
        wire::PutBytes(metric, om::Metric::kDescriptionFieldNumber, info.description);
        wire::PutBytes(metric, data_field, data);
        wire::PutBytes(scope, om::ScopeMetrics::kMetricsFieldNumber, metric);
      }
      resource.clear();
      wire::PutBytes(resource, om::ResourceMetrics::kResourceFieldNumber, r.attributes);
      wire::PutBytes(resource, om::ResourceMetrics::kScopeMetricsFieldNumber, scope);
      wire::PutBytes(raw, otlp::collector::metrics::v1::ExportMetricsServiceRequest::
                              kResourceMetricsFieldNumber,
                     resource);
    }
    EncodedRequest encoded;
    encoded.windows = windows;
    encoded.body = Gzip(raw);
    return encoded;
  }

 private:
  enum MetricIndex { kStat, kAccepted, kCapped, kAcceptedTotal, kDroppedTotal, kDistribution, kMetrics };
  enum MetricKind { kGauge, kSum, kExponentialHistogram };
  struct MetricInfo {
    const char* name;
    const char* description;
    MetricKind kind;
  };
  static constexpr MetricInfo kMetricInfo[kMetrics] = {
      {"torchmon_stat", "Aggregations of each closed window; agg names the aggregation.", kGauge},
      {"torchmon_window_accepted_samples", "Samples accepted in the window.", kGauge},
      {"torchmon_window_capped_samples", "Samples refused by max_samples in the window.", kGauge},
      {"torchmon_samples_accepted", "Samples aggregated into a window since the series was created.",
       kSum},
      {"torchmon_samples_dropped", "Samples not aggregated since the series was created, by reason.",
       kSum},
      {"torchmon_stat_distribution", "Every sample the series accepted since it was created.",
       kExponentialHistogram},
  };
  // The field number of a data point's attributes: NumberDataPoint's and
  // ExponentialHistogramDataPoint's differ.
  static constexpr int kPointAttributes = om::NumberDataPoint::kAttributesFieldNumber;
  static constexpr int kHistogramAttributes = om::ExponentialHistogramDataPoint::kAttributesFieldNumber;

  struct Resource {
    std::string attributes;  // the Resource message: its KeyValues
    std::string points[kMetrics];  // each metric's data_points fields
  };

  // A KeyValue with a string AnyValue, as field `field`.
  static void PutKeyValue(std::string& out, int field, absl::string_view key, absl::string_view value) {
    const size_t any = 1 + wire::VarintSize(value.size()) + value.size();
    const size_t inner = 1 + wire::VarintSize(key.size()) + key.size() + 1 + wire::VarintSize(any) + any;
    wire::PutVarint(out, wire::Tag(field, wire::kLengthDelimited));
    wire::PutVarint(out, inner);
    wire::PutBytes(out, otlp::common::v1::KeyValue::kKeyFieldNumber, key);
    wire::PutVarint(out, wire::Tag(otlp::common::v1::KeyValue::kValueFieldNumber, wire::kLengthDelimited));
    wire::PutVarint(out, any);
    wire::PutBytes(out, otlp::common::v1::AnyValue::kStringValueFieldNumber, value);
  }

  Resource& ResourceFor(const SeriesKey& key) {
    resource_key_.clear();
    for (const auto& [k, v] : key.labels) {
      if (const char* attribute = OtlpResourceAttribute(k)) {
        absl::StrAppend(&resource_key_, attribute, "=", v, "\n");
      }
    }
    auto [it, inserted] = index_.try_emplace(resource_key_, resources_.size());
    if (inserted) {
      Resource& r = resources_.emplace_back();
      for (const auto& [k, v] : key.labels) {
        if (const char* attribute = OtlpResourceAttribute(k)) {
          PutKeyValue(r.attributes, otlp::resource::v1::Resource::kAttributesFieldNumber, attribute, v);
        }
      }
    }
    return resources_[it->second];
  }

  // A NumberDataPoint with the series' attributes and `extra` (if given),
  // as a data_points field of its metric.
  void NumberPoint(std::string& out, const char* extra, absl::string_view extra_value,
                   uint64_t start, uint64_t time, bool as_double, double d, int64_t i) {
    point_.clear();
    Append(point_, attributes_);
    if (extra != nullptr) PutKeyValue(point_, kPointAttributes, extra, extra_value);
    wire::PutFixed64(point_, om::NumberDataPoint::kStartTimeUnixNanoFieldNumber, start);
    wire::PutFixed64(point_, om::NumberDataPoint::kTimeUnixNanoFieldNumber, time);
    if (as_double) {
      wire::PutDouble(point_, om::NumberDataPoint::kAsDoubleFieldNumber, d);
    } else {
      wire::PutFixed64(point_, om::NumberDataPoint::kAsIntFieldNumber, static_cast<uint64_t>(i));
    }
    wire::PutBytes(out, om::Gauge::kDataPointsFieldNumber, point_);
  }

  void HistogramPoint(std::string& out, const SeriesKey& key, const NativeHistogram& h,
                      uint64_t start, uint64_t time) {
    point_.clear();
    PutKeyValue(point_, kHistogramAttributes, "stat", key.stat);
    for (const auto& [k, v] : key.labels) {
      if (OtlpResourceAttribute(k) == nullptr) PutKeyValue(point_, kHistogramAttributes, k, v);
    }
    using P = om::ExponentialHistogramDataPoint;
    wire::PutFixed64(point_, P::kStartTimeUnixNanoFieldNumber, start);
    wire::PutFixed64(point_, P::kTimeUnixNanoFieldNumber, time);
    // Prometheus' bucket i is (base^(i-1), base^i]; OpenTelemetry's is
    // (base^i, base^(i+1)]: the same bucket is one index lower here.
    uint64_t in_buckets = h.zero_count();
    auto buckets = [&](bool positive, int field) {
      counts_.clear();
      bool first = true;
      int32_t offset = 0, next = 0;
      h.ForEachBucket(positive, [&](int32_t index, uint64_t count) {
        if (first) {
          offset = index - 1;
          next = offset;
          first = false;
        }
        for (; next < index - 1; ++next) wire::PutVarint(counts_, 0);
        wire::PutVarint(counts_, count);
        next = index;
        in_buckets += count;
      });
      if (first) return;
      bucket_.clear();
      wire::PutUint(bucket_, P::Buckets::kOffsetFieldNumber,
                    wire::ZigZag(offset) & 0xFFFFFFFFu);  // sint32
      wire::PutBytes(bucket_, P::Buckets::kBucketCountsFieldNumber, counts_);  // packed
      wire::PutBytes(histogram_, field, bucket_);
    };
    histogram_.clear();
    buckets(true, P::kPositiveFieldNumber);
    buckets(false, P::kNegativeFieldNumber);
    // NaN samples fall in no bucket: OpenTelemetry's count is the buckets'.
    wire::PutFixed64(point_, P::kCountFieldNumber, in_buckets);
    if (!std::isnan(h.sum())) wire::PutDouble(point_, P::kSumFieldNumber, h.sum());
    wire::PutUint(point_, P::kScaleFieldNumber, wire::ZigZag(h.schema()) & 0xFFFFFFFFu);  // sint32
    wire::PutFixed64(point_, P::kZeroCountFieldNumber, h.zero_count());
    Append(point_, histogram_);
    wire::PutDouble(point_, P::kZeroThresholdFieldNumber, NativeHistogram::kZeroThreshold);
    wire::PutBytes(out, om::ExponentialHistogram::kDataPointsFieldNumber, point_);
  }

  absl::string_view version_;
  std::vector<Resource> resources_;
  absl::flat_hash_map<std::string, size_t> index_;  // resource key -> resources_
  std::string resource_key_, attributes_, point_, histogram_, counts_, bucket_;
};

template <typename Request, typename... Args>
std::vector<EncodedRequest> Encode(absl::Span<const ClosedWindow> windows, size_t per_request,
                                   Args... args) {
  std::vector<EncodedRequest> out;
  per_request = std::max<size_t>(per_request, 1);
  for (size_t begin = 0; begin < windows.size(); begin += per_request) {
    const size_t end = std::min(windows.size(), begin + per_request);
    Request request(end - begin, args...);
    for (size_t i = begin; i < end; ++i) request.Add(windows[i]);
    out.push_back(request.Finish(end - begin));
  }
  return out;
}

}  // namespace

const char* OtlpResourceAttribute(absl::string_view label) {
  for (const auto& [from, to] : kResourceAttributes) {
    if (label == from) return to;
  }
  return nullptr;
}

std::vector<EncodedRequest> EncodeRemoteWrite(absl::Span<const ClosedWindow> windows,
                                              size_t windows_per_request) {
  return Encode<RemoteWriteRequest>(windows, windows_per_request);
}

std::vector<EncodedRequest> EncodeOtlp(absl::Span<const ClosedWindow> windows,
                                       size_t windows_per_request, absl::string_view version) {
  return Encode<OtlpRequest>(windows, windows_per_request, version);
}

}  // namespace torchmon::server

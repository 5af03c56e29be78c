#include "server/push/encode.h"

#include <snappy-c.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"
#include "prometheus/prompb/remote.pb.h"
#include "server/core/native_histogram.h"

namespace torchmon::server {
namespace {

namespace otlp = opentelemetry::proto;

// The accounting counters' reasons, as /metrics labels them.
constexpr const char* kDropReasons[] = {"capped", "late", "skewed", "client"};
uint64_t DropCount(const SeriesCounters& c, size_t reason) {
  const uint64_t counts[] = {c.capped, c.late, c.skewed, c.client_dropped};
  return counts[reason];
}


// When a window's counters and histogram were read: as it closed, or (a
// window not read at a close) its end.
int64_t CountersMs(const ClosedWindow& w) { return w.counters_ms != 0 ? w.counters_ms : w.end_ms; }

// A histogram's buckets of one sign as Prometheus spans and deltas: a new
// span at every gap.
void PrometheusBuckets(const NativeHistogram& h, bool positive,
                       google::protobuf::RepeatedPtrField<prometheus::BucketSpan>* spans,
                       google::protobuf::RepeatedField<int64_t>* deltas) {
  int32_t next = 0;  // the index after the last bucket written
  int64_t previous = 0;
  h.ForEachBucket(positive, [&](int32_t index, uint64_t count) {
    if (spans->empty() || index != next) {
      prometheus::BucketSpan* span = spans->Add();
      span->set_offset(spans->size() == 1 ? index : index - next);
    }
    prometheus::BucketSpan& span = (*spans)[spans->size() - 1];
    span.set_length(span.length() + 1);
    deltas->Add(static_cast<int64_t>(count) - previous);
    previous = static_cast<int64_t>(count);
    next = index + 1;
  });
}

// One remote-write series being filled: its labels, sorted by name as
// remote-write requires, come from the window's series and `extra`.
class RemoteWriteRequest {
 public:
  explicit RemoteWriteRequest(google::protobuf::Arena* arena)
      : request_(google::protobuf::Arena::CreateMessage<prometheus::WriteRequest>(arena)) {}

  prometheus::TimeSeries* Series(absl::string_view name, const SeriesKey& key,
                                 std::initializer_list<std::pair<const char*, absl::string_view>> extra) {
    labels_.clear();
    labels_.emplace_back("__name__", name);
    labels_.emplace_back("stat", key.stat);
    for (const auto& [k, v] : key.labels) labels_.emplace_back(k, v);
    for (const auto& [k, v] : extra) labels_.emplace_back(k, v);
    std::sort(labels_.begin(), labels_.end());
    prometheus::TimeSeries* series = request_->add_timeseries();
    for (const auto& [k, v] : labels_) {
      prometheus::Label* label = series->add_labels();
      label->set_name(k.data(), k.size());
      label->set_value(v.data(), v.size());
    }
    return series;
  }
  void Sample(absl::string_view name, const SeriesKey& key,
              std::initializer_list<std::pair<const char*, absl::string_view>> extra, double value,
              int64_t ms) {
    prometheus::Sample* sample = Series(name, key, extra)->add_samples();
    sample->set_value(value);
    sample->set_timestamp(ms);
  }

  void Add(const ClosedWindow& w) {
    const SeriesKey& key = *w.series;
    const int64_t t = w.end_ms;
    ForEachAggregate(w, [&](const AggregateRef& ref, double value) {
      const std::string agg = AggregateName(ref);
      Sample("torchmon_stat", key, {{"agg", agg}}, value, t);
    });
    Sample("torchmon_window_accepted_samples", key, {}, static_cast<double>(w.stats.accepted), t);
    Sample("torchmon_window_capped_samples", key, {}, static_cast<double>(w.stats.capped), t);
    // The series' counters and histogram as the window closed, stamped
    // when they were read: they may hold samples of the next window
    // already (its grace), so the window's end would misdate them.
    const int64_t read = CountersMs(w);
    Sample("torchmon_samples_accepted_total", key, {}, static_cast<double>(w.counters.accepted), read);
    for (size_t r = 0; r < 4; ++r) {
      Sample("torchmon_samples_dropped_total", key, {{"reason", kDropReasons[r]}},
             static_cast<double>(DropCount(w.counters, r)), read);
    }
    if (w.histogram != nullptr) {
      const NativeHistogram& h = *w.histogram;
      prometheus::Histogram* out =
          Series("torchmon_stat_distribution", key, {})->add_histograms();
      out->set_count_int(h.count());
      out->set_sum(h.sum());
      out->set_schema(h.schema());
      out->set_zero_threshold(NativeHistogram::kZeroThreshold);
      out->set_zero_count_int(h.zero_count());
      PrometheusBuckets(h, true, out->mutable_positive_spans(), out->mutable_positive_deltas());
      PrometheusBuckets(h, false, out->mutable_negative_spans(), out->mutable_negative_deltas());
      out->set_timestamp(read);
    }
  }

  EncodedRequest Finish(size_t windows) {
    const std::string raw = request_->SerializeAsString();
    EncodedRequest encoded;
    encoded.windows = windows;
    size_t size = snappy_max_compressed_length(raw.size());
    encoded.body.resize(size);
    snappy_compress(raw.data(), raw.size(), encoded.body.data(), &size);
    encoded.body.resize(size);
    return encoded;
  }

 private:
  prometheus::WriteRequest* request_;
  std::vector<std::pair<absl::string_view, absl::string_view>> labels_;
};

// The resource attribute names of the identity labels with an OpenTelemetry
// convention.
constexpr std::pair<const char*, const char*> kResourceAttributes[] = {
    {"host", "host.name"},
    {"pod_uid", "k8s.pod.uid"},
    {"container_id", "container.id"},
    {"user", "process.owner"},
};

void SetString(otlp::common::v1::KeyValue* kv, absl::string_view key, absl::string_view value) {
  kv->set_key(key.data(), key.size());
  kv->mutable_value()->set_string_value(value.data(), value.size());
}

uint64_t Nanos(int64_t ms) { return static_cast<uint64_t>(std::max<int64_t>(ms, 0)) * 1'000'000u; }

// One OTLP request being filled: a ResourceMetrics per set of resource
// attributes, each with one scope and its metrics by name.
class OtlpRequest {
 public:
  OtlpRequest(google::protobuf::Arena* arena, absl::string_view version)
      : request_(google::protobuf::Arena::CreateMessage<
                 otlp::collector::metrics::v1::ExportMetricsServiceRequest>(arena)),
        version_(version) {}

  void Add(const ClosedWindow& w) {
    const SeriesKey& key = *w.series;
    // The resource: the identity labels with a convention, in label order.
    resource_key_.clear();
    attributes_.clear();
    for (const auto& [k, v] : key.labels) {
      if (const char* attribute = OtlpResourceAttribute(k)) {
        absl::StrAppend(&resource_key_, attribute, "=", v, "\n");
      } else {
        attributes_.emplace_back(k, v);
      }
    }
    Resource& resource = ResourceFor(key);
    const uint64_t start = Nanos(w.start_ms), end = Nanos(w.end_ms),
                   created = Nanos(w.series_created_ms), read = Nanos(CountersMs(w));
    ForEachAggregate(w, [&](const AggregateRef& ref, double value) {
      const std::string agg = AggregateName(ref);
      Point(resource, kStat, key, {{"agg", agg}}, start, end)->set_as_double(value);
    });
    Point(resource, kAccepted, key, {}, start, end)->set_as_int(static_cast<int64_t>(w.stats.accepted));
    Point(resource, kCapped, key, {}, start, end)->set_as_int(static_cast<int64_t>(w.stats.capped));
    Point(resource, kAcceptedTotal, key, {}, created, read)
        ->set_as_int(static_cast<int64_t>(w.counters.accepted));
    for (size_t r = 0; r < 4; ++r) {
      Point(resource, kDroppedTotal, key, {{"reason", kDropReasons[r]}}, created, read)
          ->set_as_int(static_cast<int64_t>(DropCount(w.counters, r)));
    }
    if (w.histogram != nullptr) AddHistogram(resource, key, *w.histogram, created, read);
  }

  EncodedRequest Finish(size_t windows) {
    EncodedRequest encoded;
    encoded.windows = windows;
    encoded.body = request_->SerializeAsString();
    return encoded;
  }

 private:
  enum MetricIndex { kStat, kAccepted, kCapped, kAcceptedTotal, kDroppedTotal, kDistribution, kMetrics };
  struct Resource {
    otlp::metrics::v1::ScopeMetrics* scope = nullptr;
    otlp::metrics::v1::Metric* metrics[kMetrics] = {};
  };

  Resource& ResourceFor(const SeriesKey& key) {
    auto [it, inserted] = resources_.try_emplace(resource_key_);
    if (!inserted) return it->second;
    otlp::metrics::v1::ResourceMetrics* rm = request_->add_resource_metrics();
    for (const auto& [k, v] : key.labels) {
      if (const char* attribute = OtlpResourceAttribute(k)) {
        SetString(rm->mutable_resource()->add_attributes(), attribute, v);
      }
    }
    it->second.scope = rm->add_scope_metrics();
    it->second.scope->mutable_scope()->set_name("torchmond");
    it->second.scope->mutable_scope()->set_version(version_.data(), version_.size());
    return it->second;
  }

  otlp::metrics::v1::Metric* MetricOf(Resource& r, MetricIndex i) {
    if (r.metrics[i] != nullptr) return r.metrics[i];
    otlp::metrics::v1::Metric* m = r.scope->add_metrics();
    r.metrics[i] = m;
    switch (i) {
      case kStat:
        m->set_name("torchmon_stat");
        m->set_description("Aggregations of each closed window; agg names the aggregation.");
        m->mutable_gauge();
        break;
      case kAccepted:
        m->set_name("torchmon_window_accepted_samples");
        m->set_description("Samples accepted in the window.");
        m->mutable_gauge();
        break;
      case kCapped:
        m->set_name("torchmon_window_capped_samples");
        m->set_description("Samples refused by max_samples in the window.");
        m->mutable_gauge();
        break;
      case kAcceptedTotal:
      case kDroppedTotal: {
        m->set_name(i == kAcceptedTotal ? "torchmon_samples_accepted" : "torchmon_samples_dropped");
        m->set_description(i == kAcceptedTotal
                               ? "Samples aggregated into a window since the series was created."
                               : "Samples not aggregated since the series was created, by reason.");
        otlp::metrics::v1::Sum* sum = m->mutable_sum();
        sum->set_is_monotonic(true);
        sum->set_aggregation_temporality(otlp::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE);
        break;
      }
      case kDistribution:
        m->set_name("torchmon_stat_distribution");
        m->set_description("Every sample the series accepted since it was created.");
        m->mutable_exponential_histogram()->set_aggregation_temporality(
            otlp::metrics::v1::AGGREGATION_TEMPORALITY_CUMULATIVE);
        break;
      case kMetrics:
        break;
    }
    return m;
  }

  template <typename Point>
  void Attributes(Point* p, const SeriesKey& key,
                  std::initializer_list<std::pair<const char*, absl::string_view>> extra) {
    SetString(p->add_attributes(), "stat", key.stat);
    for (const auto& [k, v] : attributes_) SetString(p->add_attributes(), k, v);
    for (const auto& [k, v] : extra) SetString(p->add_attributes(), k, v);
  }

  otlp::metrics::v1::NumberDataPoint* Point(
      Resource& r, MetricIndex i, const SeriesKey& key,
      std::initializer_list<std::pair<const char*, absl::string_view>> extra, uint64_t start,
      uint64_t end) {
    otlp::metrics::v1::Metric* m = MetricOf(r, i);
    otlp::metrics::v1::NumberDataPoint* p =
        m->has_sum() ? m->mutable_sum()->add_data_points() : m->mutable_gauge()->add_data_points();
    Attributes(p, key, extra);
    p->set_start_time_unix_nano(start);
    p->set_time_unix_nano(end);
    return p;
  }

  void AddHistogram(Resource& r, const SeriesKey& key, const NativeHistogram& h, uint64_t start,
                    uint64_t end) {
    otlp::metrics::v1::ExponentialHistogramDataPoint* p =
        MetricOf(r, kDistribution)->mutable_exponential_histogram()->add_data_points();
    Attributes(p, key, {});
    p->set_start_time_unix_nano(start);
    p->set_time_unix_nano(end);
    p->set_scale(h.schema());
    p->set_zero_threshold(NativeHistogram::kZeroThreshold);
    p->set_zero_count(h.zero_count());
    uint64_t in_buckets = h.zero_count();
    // Prometheus' bucket i is (base^(i-1), base^i]; OpenTelemetry's is
    // (base^i, base^(i+1)]: the same bucket is one index lower here.
    auto fill = [&](bool positive, otlp::metrics::v1::ExponentialHistogramDataPoint::Buckets* b) {
      bool first = true;
      int32_t offset = 0;
      h.ForEachBucket(positive, [&](int32_t index, uint64_t count) {
        if (first) {
          offset = index - 1;
          b->set_offset(offset);
          first = false;
        }
        while (offset + b->bucket_counts_size() < index - 1) b->add_bucket_counts(0);
        b->add_bucket_counts(count);
        in_buckets += count;
      });
    };
    fill(true, p->mutable_positive());
    fill(false, p->mutable_negative());
    // NaN samples fall in no bucket: OpenTelemetry's count is the buckets'.
    p->set_count(in_buckets);
    if (!std::isnan(h.sum())) p->set_sum(h.sum());
  }

  otlp::collector::metrics::v1::ExportMetricsServiceRequest* request_;
  absl::string_view version_;
  std::map<std::string, Resource> resources_;
  std::string resource_key_;
  std::vector<std::pair<absl::string_view, absl::string_view>> attributes_;
};

template <typename Request, typename... Args>
std::vector<EncodedRequest> Encode(absl::Span<const ClosedWindow> windows, size_t per_request,
                                   Args... args) {
  std::vector<EncodedRequest> out;
  per_request = std::max<size_t>(per_request, 1);
  for (size_t begin = 0; begin < windows.size(); begin += per_request) {
    const size_t end = std::min(windows.size(), begin + per_request);
    google::protobuf::Arena arena;
    Request request(&arena, args...);
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

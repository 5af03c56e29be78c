#include "server/exposition/prometheus_protobuf.h"

#include <cstring>
#include <utility>
#include <vector>

#include "io/prometheus/client/metrics.pb.h"
#include "server/core/native_histogram.h"
#include "server/core/protobuf_wire.h"

namespace torchmon::server {
namespace {

namespace pb = ::io::prometheus::client;

using wire::kFixed64;
using wire::kLengthDelimited;
using wire::kVarint;
using wire::PutBytes;
using wire::PutDouble;
using wire::PutUint;
using wire::PutVarint;
using wire::Tag;
using wire::VarintSize;
using wire::WriteVarint;
using wire::ZigZag;

}  // namespace

// The buckets of one sign as spans and count deltas (wire::BucketSpansWriter).
void PrometheusProtobufWriter::PutBuckets(std::string& out, const HistogramSample::Sign& sign,
                                          int32_t schema, int span_field, int delta_field) {
  NativeHistogram::ForEachBucketIn(sign.offset, sign.counts.data(), sign.counts.size(),
                                   sign.infinities, schema,
                                   [&](int32_t index, uint64_t count) { spans_.Add(index, count); });
  spans_.Finish(out, span_field, delta_field);
}

PrometheusProtobufWriter::PrometheusProtobufWriter(Sink sink, size_t flush_bytes)
    : ExpositionWriter(std::move(sink), flush_bytes) {}

void PrometheusProtobufWriter::AppendLabel(std::string& out, absl::string_view key,
                                           absl::string_view value,
                                           bool /*leading_comma*/) const {
  std::string pair;
  PutBytes(pair, pb::LabelPair::kNameFieldNumber, key);
  PutBytes(pair, pb::LabelPair::kValueFieldNumber, value);
  PutBytes(out, pb::Metric::kLabelFieldNumber, pair);
}

void PrometheusProtobufWriter::Family(absl::string_view name, absl::string_view help,
                                      MetricKind kind, absl::FunctionRef<void()> samples) {
  kind_ = kind;
  sizing_ = true;
  family_bytes_ = 0;
  encoded_.clear();
  encoded_sizes_.clear();
  samples();
  sizing_ = false;
  next_encoded_ = 0;
  encoded_read_ = 0;
  if (family_bytes_ == 0) return;  // no samples
  std::string header;
  PutBytes(header, pb::MetricFamily::kNameFieldNumber, name);
  PutBytes(header, pb::MetricFamily::kHelpFieldNumber, help);
  PutUint(header, pb::MetricFamily::kTypeFieldNumber,
          kind == MetricKind::kGauge     ? pb::GAUGE
          : kind == MetricKind::kCounter ? pb::COUNTER
                                         : pb::HISTOGRAM);
  std::string prefix;
  PutVarint(prefix, header.size() + family_bytes_);
  Append(prefix);
  Append(header);
  samples();
  MaybeFlush();
}

void PrometheusProtobufWriter::Metric(std::initializer_list<absl::string_view> label_parts,
                                      absl::string_view body) {
  size_t size = body.size();
  for (absl::string_view part : label_parts) size += part.size();
  const uint32_t tag = Tag(pb::MetricFamily::kMetricFieldNumber, kLengthDelimited);
  if (sizing_) {
    family_bytes_ += VarintSize(tag) + VarintSize(size) + size;
    return;
  }
  char* const start = Reserve(10 + 10 + size);
  char* p = WriteVarint(start, tag);
  p = WriteVarint(p, size);
  for (absl::string_view part : label_parts) {
    std::memcpy(p, part.data(), part.size());
    p += part.size();
  }
  std::memcpy(p, body.data(), body.size());
  p += body.size();
  Commit(p);
  MaybeFlush();
}

void PrometheusProtobufWriter::Sample(absl::string_view /*name*/,
                                      std::initializer_list<absl::string_view> label_parts,
                                      double value, double /*created*/) {
  // Gauge{value} or Counter{value}: both have the value as field 1.
  static_assert(static_cast<int>(pb::Gauge::kValueFieldNumber) ==
                static_cast<int>(pb::Counter::kValueFieldNumber));
  std::string value_message;
  PutDouble(value_message, pb::Gauge::kValueFieldNumber, value);
  scratch_.clear();
  PutBytes(scratch_,
           kind_ == MetricKind::kCounter ? pb::Metric::kCounterFieldNumber
                                         : pb::Metric::kGaugeFieldNumber,
           value_message);
  Metric(label_parts, scratch_);
}

void PrometheusProtobufWriter::Histogram(absl::string_view /*name*/,
                                         std::initializer_list<absl::string_view> label_parts,
                                         const HistogramSample& h, double /*created*/) {
  if (!sizing_) {
    // Encoded by the sizing pass, in the same order.
    const size_t size = encoded_sizes_[next_encoded_++];
    Metric(label_parts, absl::string_view(encoded_).substr(encoded_read_, size));
    encoded_read_ += size;
    return;
  }
  message_.clear();
  PutUint(message_, pb::Histogram::kSampleCountFieldNumber, h.count);
  PutDouble(message_, pb::Histogram::kSampleSumFieldNumber, h.sum);
  PutUint(message_, pb::Histogram::kSchemaFieldNumber, ZigZag(h.schema) & 0xFFFFFFFFu);
  PutDouble(message_, pb::Histogram::kZeroThresholdFieldNumber, h.zero_threshold);
  PutUint(message_, pb::Histogram::kZeroCountFieldNumber, h.zero_count);
  PutBuckets(message_, h.negative, h.schema, pb::Histogram::kNegativeSpanFieldNumber,
             pb::Histogram::kNegativeDeltaFieldNumber);
  PutBuckets(message_, h.positive, h.schema, pb::Histogram::kPositiveSpanFieldNumber,
             pb::Histogram::kPositiveDeltaFieldNumber);
  const size_t before = encoded_.size();
  PutBytes(encoded_, pb::Metric::kHistogramFieldNumber, message_);
  encoded_sizes_.push_back(encoded_.size() - before);
  Metric(label_parts, absl::string_view(encoded_).substr(before));
}

}  // namespace torchmon::server

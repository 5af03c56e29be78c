// The Prometheus protobuf exposition format: length-delimited
// io.prometheus.client.MetricFamily messages (the schema of Debian's
// golang-github-prometheus-client-model-dev, compiled by our CMake; its
// field numbers are what this writer uses), the one format that carries
// native histograms. Encoded directly, as the text writer writes text: a
// scrape of 100k series builds no message objects.
#ifndef TORCHMON_SERVER_EXPOSITION_PROMETHEUS_PROTOBUF_H_
#define TORCHMON_SERVER_EXPOSITION_PROMETHEUS_PROTOBUF_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "server/core/protobuf_wire.h"
#include "server/exposition/prometheus_text.h"

namespace torchmon::server {

// Thread-compatible.
class PrometheusProtobufWriter final : public ExpositionWriter {
 public:
  explicit PrometheusProtobufWriter(Sink sink, size_t flush_bytes = kDefaultFlushBytes);

  // A LabelPair, as a Metric's label field.
  void AppendLabel(std::string& out, absl::string_view key, absl::string_view value,
                   bool leading_comma) const override;
  // Calls `samples` twice: once to size the family (the delimited format
  // puts its length first), once to write it.
  void Family(absl::string_view name, absl::string_view help, MetricKind kind,
              absl::FunctionRef<void()> samples) override;
  void Sample(absl::string_view name, std::initializer_list<absl::string_view> label_parts,
              double value, double created = kNoCreated) override;
  void Histogram(absl::string_view name, std::initializer_list<absl::string_view> label_parts,
                 const HistogramSample& histogram, double created = kNoCreated) override;

 private:
  // One Metric (labels, then `body`, already encoded with its tag): sized
  // or written depending on the pass.
  void Metric(std::initializer_list<absl::string_view> label_parts, absl::string_view body);

  // Appends one sign's buckets as spans and deltas to `out`.
  void PutBuckets(std::string& out, const HistogramSample::Sign& sign, int32_t schema,
                  int span_field, int delta_field);

  bool sizing_ = false;
  MetricKind kind_ = MetricKind::kGauge;
  size_t family_bytes_ = 0;  // the Metric fields of the family being sized
  std::string scratch_;      // a Metric's value message
  // The histograms of the family being written, encoded once by the sizing
  // pass and copied out by the writing pass (their encoding is most of a
  // histogram family's cost).
  std::string encoded_;
  std::vector<size_t> encoded_sizes_;
  size_t next_encoded_ = 0;
  size_t encoded_read_ = 0;
  // Reused buffers of PutBuckets and Histogram.
  wire::BucketSpansWriter spans_;
  std::string message_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_PROMETHEUS_PROTOBUF_H_

// The Prometheus exposition formats torchmond serves on /metrics, written
// directly: no metric objects, no ostream. Pure; no I/O of their own.
//   - text 0.0.4 (the fallback every Prometheus reads),
//   - OpenMetrics 1.0 text (counters named without _total on their TYPE
//     line, _created samples, "# EOF"),
//   - the protobuf format, length-delimited io.prometheus.client.MetricFamily
//     messages (prometheus_protobuf.h): the only one that carries native
//     histograms.
// Content negotiation is in content_negotiation.h.
#ifndef TORCHMON_SERVER_EXPOSITION_PROMETHEUS_TEXT_H_
#define TORCHMON_SERVER_EXPOSITION_PROMETHEUS_TEXT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace torchmon::server {

// Appends `key="value"` with the value escaped as the text formats require
// (backslash, double quote and newline).
void AppendPrometheusLabel(std::string& out, absl::string_view key, absl::string_view value);

// Appends a sample value: integers in [-1e15, 1e15] without exponent or
// fraction, other finite values in the shortest form that parses back to
// the same double, and NaN, +Inf, -Inf as the formats spell them.
void AppendPrometheusValue(std::string& out, double value);

namespace internal {

// Writes a finite `value` at `p` (room for 32 characters) as
// std::to_chars(p, p + 32, value) does (C++17 [charconv.to.chars]: the
// fewest significant digits that parse back to the same double, the nearest
// of those, in %f or %e style, whichever is shorter, %f on a tie) and
// returns the end. For a C++ runtime without floating-point to_chars: GCC
// 10's libstdc++, the portable build's (deploy/release/toolchain.sh).
// Exact integer arithmetic for every value a metric has in practice
// (printf and strtod for the rest): 83 ns a value where to_chars takes 44
// (tests/bench BM_ValueSpelling, Intel Xeon).
char* WriteShortestRoundTrip(char* p, double value);

}  // namespace internal

enum class ExpositionFormat {
  kText,         // text/plain; version=0.0.4
  kOpenMetrics,  // application/openmetrics-text; version=1.0.0
  kProtobuf,     // application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily;
                 // encoding=delimited
};

enum class MetricKind { kGauge, kCounter, kHistogram };

// One native histogram as a writer needs it (a copy of NativeHistogram).
struct HistogramSample {
  uint64_t count = 0;
  double sum = 0;
  int32_t schema = 0;
  double zero_threshold = 0;
  uint64_t zero_count = 0;
  // The buckets of one sign as NativeHistogram holds them: dense counts
  // from `offset`, and the sign's infinities (counted in bucket
  // NativeHistogram::InfiniteIndex(schema)).
  struct Sign {
    int32_t offset = 0;
    absl::Span<const uint64_t> counts;
    uint64_t infinities = 0;
  };
  Sign positive, negative;
};

// "No _created sample" for ExpositionWriter::Sample and Histogram.
inline constexpr double kNoCreated = std::numeric_limits<double>::quiet_NaN();

// Writes families and samples into a buffer and hands the bytes to `sink`
// in pieces of about `flush_bytes`, so a scrape of a million series streams
// instead of being built as one string. Label text is passed pre-encoded
// (AppendLabel, in the writer's own format), so a series' labels are
// encoded once and copied into each of its samples; label parts are
// concatenated as given.
//
// The sink returns false when the reader has gone away; the writer then
// discards the rest and ok() turns false.
//
// Thread-compatible.
class ExpositionWriter {
 public:
  using Sink = std::function<bool(absl::string_view)>;
  static constexpr size_t kDefaultFlushBytes = 256 * 1024;

  explicit ExpositionWriter(Sink sink, size_t flush_bytes = kDefaultFlushBytes);
  ExpositionWriter(const ExpositionWriter&) = delete;
  ExpositionWriter& operator=(const ExpositionWriter&) = delete;
  virtual ~ExpositionWriter() = default;

  // Appends one label, encoded for this format. The text formats separate
  // labels by commas: every label but a sample's first has leading_comma.
  virtual void AppendLabel(std::string& out, absl::string_view key, absl::string_view value,
                           bool leading_comma) const = 0;

  // One family: `samples` writes its samples (Sample or Histogram, per
  // `kind`) and may be called more than once (the protobuf writer measures
  // a family before writing it), so it must write the same each time. A
  // family without samples is left out. A counter's `name` is its samples'
  // name, ending in _total.
  virtual void Family(absl::string_view name, absl::string_view help, MetricKind kind,
                      absl::FunctionRef<void()> samples) = 0;

  // A gauge's or counter's sample. `created` (Unix seconds) is when the
  // counter started from 0; the formats that can say so do.
  virtual void Sample(absl::string_view name,
                      std::initializer_list<absl::string_view> label_parts, double value,
                      double created = kNoCreated) = 0;

  // A histogram's sample.
  virtual void Histogram(absl::string_view name,
                         std::initializer_list<absl::string_view> label_parts,
                         const HistogramSample& histogram, double created = kNoCreated) = 0;

  // Ends the exposition and hands what is buffered to the sink. Call once.
  virtual void Finish() { Flush(); }

  // False once the sink refused a piece.
  bool ok() const { return ok_; }
  // Bytes handed to the sink so far.
  size_t bytes_written() const { return written_; }

 protected:
  // Room for `n` more bytes at the end of the buffer (one check per line
  // instead of one per piece: appending to a std::string piecewise was
  // half the cost of a scrape). Commit(p) then marks the bytes up to p
  // written.
  char* Reserve(size_t n);
  void Commit(const char* end) { size_ = static_cast<size_t>(end - buffer_.get()); }
  void Append(absl::string_view text);
  void MaybeFlush() {
    if (size_ >= flush_bytes_) Flush();
  }
  void Flush();

 private:
  Sink sink_;
  const size_t flush_bytes_;
  std::unique_ptr<char[]> buffer_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  size_t written_ = 0;
  bool ok_ = true;
};

// Text 0.0.4, or OpenMetrics 1.0 text. A native histogram has no text form:
// a histogram family shows each series' count and sum (a +Inf bucket,
// _count and _sum), as Prometheus' client libraries do for histograms
// without classic buckets. OpenMetrics allows no NaN or negative _sum (it
// is a counter there): such a histogram shows its +Inf bucket only.
class PrometheusTextWriter final : public ExpositionWriter {
 public:
  // `format`: kText or kOpenMetrics.
  explicit PrometheusTextWriter(Sink sink, ExpositionFormat format = ExpositionFormat::kText,
                                size_t flush_bytes = kDefaultFlushBytes);

  void AppendLabel(std::string& out, absl::string_view key, absl::string_view value,
                   bool leading_comma) const override;
  void Family(absl::string_view name, absl::string_view help, MetricKind kind,
              absl::FunctionRef<void()> samples) override;
  void Sample(absl::string_view name, std::initializer_list<absl::string_view> label_parts,
              double value, double created = kNoCreated) override;
  void Histogram(absl::string_view name, std::initializer_list<absl::string_view> label_parts,
                 const HistogramSample& histogram, double created = kNoCreated) override;
  // OpenMetrics: "# EOF".
  void Finish() override;

 private:
  // Writes the pending family's HELP and TYPE lines, before its first sample.
  void WriteHeader();
  // name{parts...} value\n; `extra` is one more label part, after the rest.
  void Line(absl::string_view name, absl::string_view suffix,
            std::initializer_list<absl::string_view> label_parts, absl::string_view extra,
            double value);

  const bool openmetrics_;
  // The family whose header is due before its first sample.
  std::string header_;
  std::string family_;  // its name (OpenMetrics: a counter's without _total)
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_PROMETHEUS_TEXT_H_

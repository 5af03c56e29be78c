// The Prometheus text exposition format (version 0.0.4), written directly:
// no metric objects, no ostream. Pure; no I/O of its own.
#ifndef TORCHMON_SERVER_EXPOSITION_PROMETHEUS_TEXT_H_
#define TORCHMON_SERVER_EXPOSITION_PROMETHEUS_TEXT_H_

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"

namespace torchmon::server {

// Appends `key="value"` with the value escaped as the format requires
// (backslash, double quote and newline).
void AppendPrometheusLabel(std::string& out, absl::string_view key, absl::string_view value);

// Appends a sample value: integers in [-1e15, 1e15] without exponent or
// fraction, other finite values in the shortest form that parses back to
// the same double, and NaN, +Inf, -Inf as the format spells them.
void AppendPrometheusValue(std::string& out, double value);

// Writes families and samples into a buffer and hands the text to `sink`
// in pieces of about `flush_bytes`, so a scrape of a million series streams
// instead of being built as one string. Label text is passed pre-rendered
// (AppendPrometheusLabel), so a series' labels are escaped once and copied
// into each of its lines.
//
// The sink returns false when the reader has gone away; the writer then
// discards the rest and ok() turns false.
//
// Thread-compatible.
class PrometheusTextWriter {
 public:
  using Sink = std::function<bool(absl::string_view)>;
  static constexpr size_t kDefaultFlushBytes = 256 * 1024;

  explicit PrometheusTextWriter(Sink sink, size_t flush_bytes = kDefaultFlushBytes);
  PrometheusTextWriter(const PrometheusTextWriter&) = delete;
  PrometheusTextWriter& operator=(const PrometheusTextWriter&) = delete;

  // "# HELP name help" and "# TYPE name type" (type: gauge, counter, ...).
  void Family(absl::string_view name, absl::string_view help, absl::string_view type);

  // name{parts...} value — the parts are concatenated inside the braces
  // (each a rendered label list, the first without a leading comma, the
  // rest with one); no braces when every part is empty.
  void Sample(absl::string_view name, std::initializer_list<absl::string_view> label_parts,
              double value);

  // Hands what is buffered to the sink. Call once at the end.
  void Finish();

  // False once the sink refused a piece.
  bool ok() const { return ok_; }
  // Bytes handed to the sink so far.
  size_t bytes_written() const { return written_; }

 private:
  // Room for `n` more bytes at the end of the buffer (one check per line
  // instead of one per piece: appending to a std::string piecewise was
  // half the cost of a scrape).
  char* Reserve(size_t n);
  void Append(absl::string_view text);
  void MaybeFlush() {
    if (size_ >= flush_bytes_) Flush();
  }
  void Flush();

  Sink sink_;
  const size_t flush_bytes_;
  std::unique_ptr<char[]> buffer_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  size_t written_ = 0;
  bool ok_ = true;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_PROMETHEUS_TEXT_H_

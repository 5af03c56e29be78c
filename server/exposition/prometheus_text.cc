#include "server/exposition/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/strip.h"

namespace torchmon::server {
namespace {

// Integers up to here print exactly as integers (2^53 ≈ 9e15 is where
// doubles stop representing every integer).
constexpr double kMaxPlainInteger = 1e15;

bool NeedsEscape(char c) { return c == '\\' || c == '"' || c == '\n'; }

}  // namespace

void AppendPrometheusLabel(std::string& out, absl::string_view key, absl::string_view value) {
  out.append(key.data(), key.size());
  out.append("=\"", 2);
  size_t start = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    if (!NeedsEscape(value[i])) continue;
    out.append(value.data() + start, i - start);
    out.push_back('\\');
    out.push_back(value[i] == '\n' ? 'n' : value[i]);
    start = i + 1;
  }
  out.append(value.data() + start, value.size() - start);
  out.push_back('"');
}

namespace {

// Writes `value` at `p` (which has room for kMaxValueChars) and returns the
// end.
constexpr size_t kMaxValueChars = 32;
char* WriteValue(char* p, double value) {
  if (std::isnan(value)) {
    std::memcpy(p, "NaN", 3);
    return p + 3;
  }
  if (std::isinf(value)) {
    std::memcpy(p, value > 0 ? "+Inf" : "-Inf", 4);
    return p + 4;
  }
  if (std::fabs(value) <= kMaxPlainInteger && value == std::trunc(value)) {
    return std::to_chars(p, p + kMaxValueChars, static_cast<int64_t>(value)).ptr;
  }
  return std::to_chars(p, p + kMaxValueChars, value).ptr;  // shortest round trip
}

}  // namespace

void AppendPrometheusValue(std::string& out, double value) {
  char buf[kMaxValueChars];
  out.append(buf, static_cast<size_t>(WriteValue(buf, value) - buf));
}

ExpositionWriter::ExpositionWriter(Sink sink, size_t flush_bytes)
    : sink_(std::move(sink)), flush_bytes_(flush_bytes) {}

char* ExpositionWriter::Reserve(size_t n) {
  if (size_ + n > capacity_) {
    // A line is rarely longer than a few hundred bytes, so the flush size
    // plus some slack is enough for every line but a pathological one.
    const size_t capacity = std::max(size_ + n, flush_bytes_ + 4096);
    auto bigger = std::make_unique<char[]>(capacity);
    // Never memcpy from the null buffer of a fresh writer, even 0 bytes: UB.
    if (size_ > 0) std::memcpy(bigger.get(), buffer_.get(), size_);
    buffer_ = std::move(bigger);
    capacity_ = capacity;
  }
  return buffer_.get() + size_;
}

void ExpositionWriter::Append(absl::string_view text) {
  std::memcpy(Reserve(text.size()), text.data(), text.size());
  size_ += text.size();
}

void ExpositionWriter::Flush() {
  if (ok_ && size_ > 0) {
    ok_ = sink_(absl::string_view(buffer_.get(), size_));
    if (ok_) written_ += size_;
  }
  size_ = 0;
}

PrometheusTextWriter::PrometheusTextWriter(Sink sink, ExpositionFormat format, size_t flush_bytes)
    : ExpositionWriter(std::move(sink), flush_bytes),
      openmetrics_(format == ExpositionFormat::kOpenMetrics) {}

void PrometheusTextWriter::AppendLabel(std::string& out, absl::string_view key,
                                       absl::string_view value, bool leading_comma) const {
  if (leading_comma) out.push_back(',');
  AppendPrometheusLabel(out, key, value);
}

void PrometheusTextWriter::Family(absl::string_view name, absl::string_view help,
                                  MetricKind kind, absl::FunctionRef<void()> samples) {
  // OpenMetrics names a counter family without its samples' _total.
  absl::string_view family = name;
  if (openmetrics_ && kind == MetricKind::kCounter) absl::ConsumeSuffix(&family, "_total");
  family_.assign(family.data(), family.size());
  header_ = "# HELP ";
  header_.append(family.data(), family.size());
  header_.push_back(' ');
  for (char c : help) {
    // HELP text escapes backslash and newline; OpenMetrics also quotes.
    if (c == '\\') {
      header_.append("\\\\", 2);
    } else if (c == '\n') {
      header_.append("\\n", 2);
    } else if (c == '"' && openmetrics_) {
      header_.append("\\\"", 2);
    } else {
      header_.push_back(c);
    }
  }
  header_.append("\n# TYPE ", 8);
  header_.append(family.data(), family.size());
  header_.append(kind == MetricKind::kGauge     ? " gauge\n"
                 : kind == MetricKind::kCounter ? " counter\n"
                                                : " histogram\n");
  samples();
  header_.clear();  // a family without samples is left out
}

void PrometheusTextWriter::WriteHeader() {
  if (header_.empty()) return;
  Append(header_);
  header_.clear();
}

// Inlined: one call per sample line instead of three (a 100k-series scrape
// writes 1.2 million lines).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline void PrometheusTextWriter::Line(
    absl::string_view name, absl::string_view suffix,
    std::initializer_list<absl::string_view> label_parts, absl::string_view extra, double value) {
  size_t labels = extra.size();
  for (absl::string_view part : label_parts) labels += part.size();
  // name, suffix, braces, labels, space, value, newline.
  char* const start = Reserve(name.size() + suffix.size() + labels + 4 + kMaxValueChars);
  char* p = start;
  std::memcpy(p, name.data(), name.size());
  p += name.size();
  std::memcpy(p, suffix.data(), suffix.size());
  p += suffix.size();
  if (labels > 0) {
    *p++ = '{';
    for (absl::string_view part : label_parts) {
      std::memcpy(p, part.data(), part.size());
      p += part.size();
    }
    std::memcpy(p, extra.data(), extra.size());
    p += extra.size();
    *p++ = '}';
  }
  *p++ = ' ';
  p = WriteValue(p, value);
  *p++ = '\n';
  Commit(p);
}

void PrometheusTextWriter::Sample(absl::string_view name,
                                  std::initializer_list<absl::string_view> label_parts,
                                  double value, double created) {
  if (!header_.empty()) WriteHeader();
  Line(name, "", label_parts, "", value);
  if (openmetrics_ && !std::isnan(created)) Line(family_, "_created", label_parts, "", created);
  MaybeFlush();
}

void PrometheusTextWriter::Histogram(absl::string_view name,
                                     std::initializer_list<absl::string_view> label_parts,
                                     const HistogramSample& h, double created) {
  WriteHeader();
  bool any_label = false;
  for (absl::string_view part : label_parts) any_label = any_label || !part.empty();
  const double count = static_cast<double>(h.count);
  Line(name, "_bucket", label_parts, any_label ? ",le=\"+Inf\"" : "le=\"+Inf\"", count);
  // OpenMetrics: a histogram's _sum is a counter, never NaN or negative,
  // and _count goes with it; without them the +Inf bucket still counts.
  if (!openmetrics_ || h.sum >= 0) {
    Line(name, "_sum", label_parts, "", h.sum);
    Line(name, "_count", label_parts, "", count);
  }
  if (openmetrics_ && !std::isnan(created)) Line(name, "_created", label_parts, "", created);
  MaybeFlush();
}

void PrometheusTextWriter::Finish() {
  if (openmetrics_) Append("# EOF\n");
  Flush();
}

}  // namespace torchmon::server

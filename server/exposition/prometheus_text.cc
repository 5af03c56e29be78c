#include "server/exposition/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

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

PrometheusTextWriter::PrometheusTextWriter(Sink sink, size_t flush_bytes)
    : sink_(std::move(sink)), flush_bytes_(flush_bytes) {}

char* PrometheusTextWriter::Reserve(size_t n) {
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

void PrometheusTextWriter::Append(absl::string_view text) {
  std::memcpy(Reserve(text.size()), text.data(), text.size());
  size_ += text.size();
}

void PrometheusTextWriter::Family(absl::string_view name, absl::string_view help,
                                  absl::string_view type) {
  std::string line = "# HELP ";
  line.append(name.data(), name.size());
  line.push_back(' ');
  for (char c : help) {
    // HELP text escapes backslash and newline (not quotes).
    if (c == '\\') {
      line.append("\\\\", 2);
    } else if (c == '\n') {
      line.append("\\n", 2);
    } else {
      line.push_back(c);
    }
  }
  line.append("\n# TYPE ", 8);
  line.append(name.data(), name.size());
  line.push_back(' ');
  line.append(type.data(), type.size());
  line.push_back('\n');
  Append(line);
  MaybeFlush();
}

void PrometheusTextWriter::Sample(absl::string_view name,
                                  std::initializer_list<absl::string_view> label_parts,
                                  double value) {
  size_t labels = 0;
  for (absl::string_view part : label_parts) labels += part.size();
  // name, braces, labels, space, value, newline.
  char* const start = Reserve(name.size() + labels + 4 + kMaxValueChars);
  char* p = start;
  std::memcpy(p, name.data(), name.size());
  p += name.size();
  if (labels > 0) {
    *p++ = '{';
    for (absl::string_view part : label_parts) {
      std::memcpy(p, part.data(), part.size());
      p += part.size();
    }
    *p++ = '}';
  }
  *p++ = ' ';
  p = WriteValue(p, value);
  *p++ = '\n';
  size_ += static_cast<size_t>(p - start);
  MaybeFlush();
}

void PrometheusTextWriter::Finish() { Flush(); }

void PrometheusTextWriter::Flush() {
  if (ok_ && size_ > 0) {
    ok_ = sink_(absl::string_view(buffer_.get(), size_));
    if (ok_) written_ += size_;
  }
  size_ = 0;
}

}  // namespace torchmon::server

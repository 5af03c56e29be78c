#include "server/exposition/prometheus_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
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
#if defined(__cpp_lib_to_chars)
  return std::to_chars(p, p + kMaxValueChars, value).ptr;  // shortest round trip
#else
  return internal::WriteShortestRoundTrip(p, value);
#endif
}

}  // namespace

namespace internal {
namespace {

// The significant digits of a decimal and the exponent of its first:
// digits[0].digits[1..n-1] x 10^exponent.
struct Decimal {
  char digits[20];
  int n = 0;
  int exponent = 0;
};

// 10^0 to 10^22, each exactly a double.
constexpr double kPowersOf10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                  1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                  1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

bool ParsesBackTo(const Decimal& d, double value) {
  char text[32];
  char* p = text;
  *p++ = d.digits[0];
  *p++ = '.';
  std::memcpy(p, d.digits + 1, static_cast<size_t>(d.n - 1));
  p += d.n - 1;
  *p++ = 'e';
  p = std::to_chars(p, text + sizeof text - 1, d.exponent).ptr;
  *p = '\0';
  return std::strtod(text, nullptr) == value;
}

// The fewest digits that parse back to a positive `value`, and of those the
// nearest. Correctly rounded to 15, 16 and 17 digits, the first that parses
// back is it: any decimal of 15 digits or fewer survives a round trip
// through a double (DBL_DIG), so for a value whose shortest form is that
// short, its 15-digit rounding is that form and zeros; 17 always parse back.
// The rounding is done exactly, on the value's own decimal expansion, for
// a normal value in [2^-68, 2^63) (every value a metric has, in practice),
// where it fits 128-bit integers; else by printf's %.Ne, which is exact
// too and slower (a subnormal value, which may need fewer than 15 digits,
// takes every count there).
bool ShortestExact(double value, Decimal& out) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const int biased = static_cast<int>(bits >> 52);
  if (biased == 0) return false;  // subnormal
  const uint64_t m = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1} << 52);
  const int e2 = biased - 1075;  // value = m * 2^e2
  if (e2 > 10 || e2 < -120) return false;
  // value = integer + fraction / 2^s
  using u128 = unsigned __int128;
  const int s = e2 < 0 ? -e2 : 0;
  const uint64_t integer = e2 >= 0 ? m << e2 : s < 53 ? m >> s : 0;
  const u128 mask = (u128{1} << s) - 1;
  u128 fraction = e2 >= 0 ? 0 : s < 53 ? m & ((uint64_t{1} << s) - 1) : m;
  // The first kDigits significant digits, and whether any digit after them
  // is not zero (sticky).
  constexpr int kDigits = 24;
  char d[kDigits];
  int count = 0;
  int exponent;
  bool sticky = false;
  if (integer != 0) {
    char whole[20];
    const int length = static_cast<int>(std::to_chars(whole, whole + sizeof whole, integer).ptr - whole);
    exponent = length - 1;
    for (int i = 0; i < length; ++i) {
      if (count < kDigits) {
        d[count++] = whole[i];
      } else if (whole[i] != '0') {
        sticky = true;
      }
    }
  } else {
    exponent = -1;
    for (;;) {
      fraction *= 10;
      const int digit = static_cast<int>(fraction >> s);
      fraction &= mask;
      if (digit != 0) {
        d[count++] = static_cast<char>('0' + digit);
        break;
      }
      --exponent;
    }
  }
  while (count < kDigits) {
    fraction *= 10;
    d[count++] = static_cast<char>('0' + static_cast<int>(fraction >> s));
    fraction &= mask;
  }
  sticky = sticky || fraction != 0;
  // Half the gap to each neighbouring double: a decimal strictly nearer to
  // value than that parses back to it (at a power of two the gap below is
  // half the one above).
  const double half_above = std::ldexp(1.0, e2 - 1);
  const double half_below = m == (uint64_t{1} << 52) && biased > 1 ? std::ldexp(1.0, e2 - 2) : half_above;
  for (int k = 15; k <= 17; ++k) {
    // d rounded to k digits, half to even as printf rounds.
    out.n = k;
    out.exponent = exponent;
    std::memcpy(out.digits, d, static_cast<size_t>(k));
    bool rest = sticky;
    for (int i = k + 1; i < kDigits; ++i) rest = rest || d[i] != '0';
    const int next = d[k] - '0';
    const bool up = next > 5 || (next == 5 && (rest || (out.digits[k - 1] - '0') % 2 == 1));
    if (up) {
      int i = k - 1;
      for (; i >= 0 && out.digits[i] == '9'; --i) out.digits[i] = '0';
      if (i >= 0) {
        ++out.digits[i];
      } else {
        out.digits[0] = '1';
        ++out.exponent;
      }
    }
    // Whether that parses back: its distance from value, in units of its
    // last digit, is the dropped digits' fraction (or one less it, rounded
    // up), known to 10^-(kDigits-k) and exactly but for the sticky rest;
    // the half gap in the same unit is at least 0.01. Clearly inside or
    // outside decides at once; within 10^-6 of the edge strtod does.
    double tail = 0;
    for (int i = kDigits - 1; i >= k; --i) tail = (tail + (d[i] - '0')) * 0.1;
    const double tail_high = tail + (sticky ? 1 / kPowersOf10[kDigits - k] : 0.0);
    const double distance_low = up ? 1 - tail_high : tail;
    const double distance_high = up ? 1 - tail : tail_high;
    const int unit = exponent - k + 1;  // the last digit's is 10^unit
    double half_gap = up ? half_above : half_below;
    half_gap = unit >= 0 ? half_gap / kPowersOf10[unit]
               : -unit <= 22 ? half_gap * kPowersOf10[-unit]
                             : half_gap * kPowersOf10[22] * kPowersOf10[-unit - 22];
    if (distance_high < half_gap - 1e-6) return true;
    if (distance_low > half_gap + 1e-6) continue;
    if (ParsesBackTo(out, value)) return true;
  }
  return false;
}

void ShortestByPrintf(double value, Decimal& out) {
  char sci[32];
  const bool normal = value >= std::numeric_limits<double>::min();
  for (int precision = normal ? 14 : 0; precision <= 16; ++precision) {
    std::snprintf(sci, sizeof sci, "%.*e", precision, value);
    if (std::strtod(sci, nullptr) == value) break;
  }
  // sci is "d[.ddd]e[+-]XX".
  out.n = 0;
  const char* c = sci;
  for (; *c != 'e'; ++c) {
    if (*c != '.') out.digits[out.n++] = *c;
  }
  out.exponent = std::atoi(c + 1);
}

}  // namespace

char* WriteShortestRoundTrip(char* p, double value) {
  if (std::signbit(value)) {
    *p++ = '-';
    value = -value;
  }
  if (value == 0) {
    *p++ = '0';
    return p;
  }
  Decimal decimal;
  if (!ShortestExact(value, decimal)) ShortestByPrintf(value, decimal);
  const char* digits = decimal.digits;
  int n = decimal.n;
  while (n > 1 && digits[n - 1] == '0') --n;
  const int exponent = decimal.exponent;
  const int abs_exponent = std::abs(exponent);
  const int sci_length = n + (n > 1 ? 1 : 0) + 2 + (abs_exponent >= 100 ? 3 : 2);
  const int fixed_length = exponent >= 0 ? std::max(n, exponent + 1) + (n > exponent + 1 ? 1 : 0)
                                         : n + 1 - exponent;
  if (fixed_length <= sci_length) {
    if (exponent < 0) {
      *p++ = '0';
      *p++ = '.';
      for (int i = 0; i < -exponent - 1; ++i) *p++ = '0';
      std::memcpy(p, digits, static_cast<size_t>(n));
      return p + n;
    }
    if (n <= exponent + 1) {
      // An integer: to_chars (libstdc++'s and MSVC's alike) writes its
      // exact digits, which past 2^53 are not the shortest ones padded with
      // zeros.
      return p + std::snprintf(p, 32, "%.0f", value);
    }
    for (int i = 0; i < n; ++i) {
      if (i == exponent + 1) *p++ = '.';
      *p++ = digits[i];
    }
    return p;
  }
  *p++ = digits[0];
  if (n > 1) {
    *p++ = '.';
    std::memcpy(p, digits + 1, static_cast<size_t>(n - 1));
    p += n - 1;
  }
  *p++ = 'e';
  *p++ = exponent < 0 ? '-' : '+';
  if (abs_exponent >= 100) *p++ = static_cast<char>('0' + abs_exponent / 100);
  *p++ = static_cast<char>('0' + abs_exponent / 10 % 10);
  *p++ = static_cast<char>('0' + abs_exponent % 10);
  return p;
}

}  // namespace internal

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

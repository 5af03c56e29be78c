#include "server/exposition/content_negotiation.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::server {
namespace {

struct Offer {
  ExpositionFormat format;
  absl::string_view type;  // "application/openmetrics-text"
  // The format's own parameters: a range that names one of these must give
  // this value (compared case-insensitively).
  std::vector<std::pair<absl::string_view, absl::string_view>> params;
};

const std::vector<Offer>& Offers() {
  // In order of preference when everything else ties (a bare */*): text
  // first, which is what any scraper reads.
  static const std::vector<Offer> kOffers = {
      {ExpositionFormat::kText, "text/plain", {{"version", "0.0.4"}}},
      {ExpositionFormat::kOpenMetrics, "application/openmetrics-text", {{"version", "1.0.0"}}},
      {ExpositionFormat::kProtobuf,
       "application/vnd.google.protobuf",
       {{"proto", "io.prometheus.client.MetricFamily"}, {"encoding", "delimited"}}},
  };
  return kOffers;
}

struct Range {
  std::string type;     // lower case, "*/*", "text/*" or "text/plain"
  std::vector<std::pair<std::string, std::string>> params;  // lower-case keys, q excluded
  double q = 1;
};

// A q-value: 0 to 1, at most three decimals (RFC 9110 §12.4.2).
std::optional<double> ParseQ(absl::string_view text) {
  double q;
  if (text.empty() || text.size() > 5 || !absl::SimpleAtod(text, &q) || !(q >= 0 && q <= 1)) {
    return std::nullopt;
  }
  return q;
}

// The comma-separated elements of a header, each "token; k=v; ...": the
// token (lower case), its parameters and its q. Nullopt if malformed.
std::optional<std::vector<Range>> ParseList(absl::string_view header) {
  std::vector<Range> out;
  for (absl::string_view element : absl::StrSplit(header, ',')) {
    element = absl::StripAsciiWhitespace(element);
    if (element.empty()) continue;  // "a, ,b" is allowed
    std::vector<absl::string_view> parts = absl::StrSplit(element, ';');
    Range range;
    range.type = absl::AsciiStrToLower(absl::StripAsciiWhitespace(parts[0]));
    if (range.type.empty()) return std::nullopt;
    for (size_t i = 1; i < parts.size(); ++i) {
      absl::string_view param = absl::StripAsciiWhitespace(parts[i]);
      const size_t eq = param.find('=');
      if (eq == absl::string_view::npos || eq == 0) return std::nullopt;
      std::string key = absl::AsciiStrToLower(absl::StripAsciiWhitespace(param.substr(0, eq)));
      absl::string_view value = absl::StripAsciiWhitespace(param.substr(eq + 1));
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      if (key == "q") {
        std::optional<double> q = ParseQ(value);
        if (!q.has_value()) return std::nullopt;
        range.q = *q;
      } else {
        range.params.emplace_back(std::move(key), std::string(value));
      }
    }
    out.push_back(std::move(range));
  }
  return out;
}

// How specifically `range` matches `offer`: -1 no match, 0 */*, 1 type/*,
// 2 the type, 3 the type with parameters.
int Specificity(const Range& range, const Offer& offer) {
  int level;
  if (range.type == "*/*") {
    level = 0;
  } else if (absl::EndsWith(range.type, "/*")) {
    const absl::string_view major = absl::string_view(range.type).substr(0, range.type.size() - 1);
    if (!absl::StartsWith(offer.type, major)) return -1;
    level = 1;
  } else if (range.type == offer.type) {
    level = 2;
  } else {
    return -1;
  }
  for (const auto& [key, value] : range.params) {
    // We send UTF-8, which every scraper takes, and metric and label names
    // that every escaping scheme (Prometheus 3's escaping=) leaves alone.
    if (key == "charset" || key == "escaping") continue;
    bool ours = false;
    for (const auto& [offer_key, offer_value] : offer.params) {
      if (key == offer_key) {
        if (!absl::EqualsIgnoreCase(value, offer_value)) return -1;
        ours = true;
      }
    }
    if (!ours) return -1;  // a parameter this format does not have
    level = 3;
  }
  return level;
}

}  // namespace

absl::string_view ContentType(ExpositionFormat format) {
  switch (format) {
    case ExpositionFormat::kOpenMetrics:
      return "application/openmetrics-text; version=1.0.0; charset=utf-8";
    case ExpositionFormat::kProtobuf:
      return "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
             "encoding=delimited";
    case ExpositionFormat::kText:
      break;
  }
  return "text/plain; version=0.0.4; charset=utf-8";
}

ExpositionFormat NegotiateFormat(const char* accept) {
  if (accept == nullptr) return ExpositionFormat::kText;
  const std::optional<std::vector<Range>> ranges = ParseList(accept);
  if (!ranges.has_value() || ranges->empty()) return ExpositionFormat::kText;
  struct Score {
    double q = 0;
    int specificity = -1;
    size_t position = 0;
  };
  ExpositionFormat best = ExpositionFormat::kText;
  Score best_score;
  for (const Offer& offer : Offers()) {
    // The most specific range that matches gives this format its q.
    Score score;
    for (size_t i = 0; i < ranges->size(); ++i) {
      const int s = Specificity((*ranges)[i], offer);
      if (s > score.specificity) score = Score{(*ranges)[i].q, s, i};
    }
    if (score.specificity < 0 || score.q <= 0) continue;
    const bool better =
        best_score.specificity < 0 || score.q > best_score.q ||
        (score.q == best_score.q &&
         (score.specificity > best_score.specificity ||
          (score.specificity == best_score.specificity && score.position < best_score.position)));
    if (better) {
      best = offer.format;
      best_score = score;
    }
  }
  return best;
}

bool AcceptsGzip(const char* accept_encoding) {
  if (accept_encoding == nullptr) return false;
  const std::optional<std::vector<Range>> codings = ParseList(accept_encoding);
  if (!codings.has_value()) return false;
  std::optional<double> gzip, any;
  for (const Range& c : *codings) {
    if (c.type == "gzip" || c.type == "x-gzip") {
      gzip = c.q;
    } else if (c.type == "*") {
      any = c.q;
    }
  }
  if (gzip.has_value()) return *gzip > 0;
  return any.has_value() && *any > 0;
}

}  // namespace torchmon::server

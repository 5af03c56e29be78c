// Which exposition format and encoding a scrape gets, from its Accept and
// Accept-Encoding headers (RFC 9110 §12.5), as Prometheus negotiates them.
// Pure.
#ifndef TORCHMON_SERVER_EXPOSITION_CONTENT_NEGOTIATION_H_
#define TORCHMON_SERVER_EXPOSITION_CONTENT_NEGOTIATION_H_

#include "absl/strings/string_view.h"
#include "server/exposition/prometheus_text.h"

namespace torchmon::server {

// The Content-Type header naming exactly what `format` sends.
absl::string_view ContentType(ExpositionFormat format);

// The format the Accept header prefers: the highest q-value among the
// formats a media range matches (the most specific matching range gives a
// format its q; its parameters, but q, must be the format's own: a
// version, proto or encoding of another format matches nothing), ties
// going to the more specific range, then to the range listed first, then
// to text. Text 0.0.4 when nothing matches with q > 0, when the header is
// absent (null or empty) and when it is malformed (treated as absent).
ExpositionFormat NegotiateFormat(const char* accept);

// Whether Accept-Encoding accepts gzip (gzip or x-gzip, or * when gzip is
// not named, with q > 0). False when absent or malformed.
bool AcceptsGzip(const char* accept_encoding);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_CONTENT_NEGOTIATION_H_

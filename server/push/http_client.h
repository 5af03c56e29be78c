// One HTTP/1.1 POST to a push endpoint, over TCP or TLS (OpenSSL), with a
// deadline: what the exporters send their requests with. A connection per
// request (Connection: close): a window's requests go every few seconds at
// most, and a fresh connection picks up a rotated certificate or a moved
// endpoint without any state to invalidate.
//
// Thread-compatible: each exporter thread posts with its own calls; nothing
// is shared between calls.
#ifndef TORCHMON_SERVER_PUSH_HTTP_CLIENT_H_
#define TORCHMON_SERVER_PUSH_HTTP_CLIENT_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/push/push_options.h"

namespace torchmon::server {

struct HttpResponse {
  int status = 0;
  // The Retry-After header as sent, empty if none.
  std::string retry_after;
  // The start of the body (at most kMaxKeptBody bytes), for messages and
  // OTLP's partial-success answer.
  std::string body;
  static constexpr size_t kMaxKeptBody = 64 * 1024;
};

struct HttpRequest {
  absl::string_view content_type;
  // Extra headers ("Content-Encoding", "snappy").
  std::vector<std::pair<std::string, std::string>> headers;
  absl::string_view body;
  // Readable (an eventfd written, a pipe closed): the exchange ends at
  // once, Cancelled. -1: none.
  int cancel_fd = -1;
};

// POSTs `request` to `endpoint`, with its credentials (read from their
// files now) and TLS settings, within endpoint.timeout_ms for the whole
// exchange. An error status means no HTTP answer came; its message says
// what failed: resolving, connecting, the TLS handshake and why, a
// credential file that cannot be read, the timeout. The exporters retry
// all of them (an administrator may fix a file or a certificate).
absl::StatusOr<HttpResponse> HttpPost(const PushEndpoint& endpoint, const HttpRequest& request);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_HTTP_CLIENT_H_

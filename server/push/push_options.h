// Where torchmond pushes closed windows (--remote-write-url, --otlp-endpoint;
// docs/push.md), and how.
#ifndef TORCHMON_SERVER_PUSH_PUSH_OPTIONS_H_
#define TORCHMON_SERVER_PUSH_PUSH_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torchmon::server {

enum class PushProtocol {
  kRemoteWrite,  // Prometheus remote-write 1.0: prompb.WriteRequest, snappy
  kOtlp,         // OTLP/HTTP, binary protobuf: ExportMetricsServiceRequest
};
// "remote_write", "otlp": the `exporter` label of torchmon_export_*.
const char* PushProtocolName(PushProtocol protocol);

// An http:// or https:// URL, split.
struct HttpUrl {
  bool tls = false;
  std::string host;  // a name, an IPv4 address, or an IPv6 one without brackets
  int port = 0;
  std::string path;  // "/api/v1/write", with any query; "/" at least
  // scheme://host:port/path, as given but for the port made explicit.
  std::string text;
};
// Parses `text`; the error names what is wrong with it. Credentials in the
// URL (user:password@) are refused: they would show on /metrics and in the
// process list; the endpoint's options read them from files.
absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view text);

// One endpoint: a URL and, after it on the same line, its options as
// KEY=VALUE words (docs/push.md):
//   bearer_token_file=PATH      Authorization: Bearer <the file's first line>
//   basic_auth_username=NAME    with basic_auth_password_file=PATH
//   ca_file=PATH                CAs to verify the server by (default: the system's)
//   cert_file=PATH key_file=PATH  a client certificate (mutual TLS)
//   server_name=NAME            the name to verify (default: the URL's host)
//   timeout=DURATION            per request (default 10s)
// The files are read at each request, so a rotated token or password is
// used from the next one on.
struct PushEndpoint {
  PushProtocol protocol = PushProtocol::kRemoteWrite;
  HttpUrl url;
  std::string bearer_token_file;
  std::string basic_auth_username;
  std::string basic_auth_password_file;
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
  std::string server_name;
  int64_t timeout_ms = 10'000;
};
// Parses an endpoint's line; `flag` ("--remote-write-url") names it in
// errors. An OTLP URL without a path (or with "/") gets /v1/metrics, as
// OTEL_EXPORTER_OTLP_ENDPOINT does.
absl::StatusOr<PushEndpoint> ParsePushEndpoint(PushProtocol protocol, absl::string_view flag,
                                               absl::string_view text);

struct PushOptions {
  std::vector<PushEndpoint> endpoints;
  // Window ends each endpoint queues while it cannot send (--push-queue);
  // past it the oldest are dropped, whole, and counted.
  size_t queue_windows = 120;
  // The same bound in bytes of encoded requests (--push-queue-bytes).
  size_t queue_bytes = 256u << 20;
  // Series windows per request: a window of 100,000 series goes as 50
  // requests of 2,000, as Prometheus' own senders split theirs.
  size_t windows_per_request = 2000;
  // At shutdown, how long the exporters may keep sending what is queued
  // (--push-flush-timeout); what is left then is dropped and counted.
  int64_t flush_timeout_ms = 5000;
  // Backoff between attempts at a request that failed recoverably, from
  // min to max, doubling; a Retry-After longer than max is capped at
  // max_retry_after_ms.
  int64_t min_backoff_ms = 250;
  int64_t max_backoff_ms = 30'000;
  int64_t max_retry_after_ms = 300'000;

  bool any() const { return !endpoints.empty(); }
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_PUSH_OPTIONS_H_

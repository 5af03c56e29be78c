// HTTP/1.1 POSTs to a push endpoint, over TCP or TLS: what the exporters
// send their requests with. Built on libcurl (Debian's libcurl4 in a
// build from source; bookworm's curl sources, static, in the release
// build), which speaks HTTP as receivers expect: 1xx answers skipped, a
// final answer that comes while the body is still going honoured, every
// address of a name tried within the deadline (IPv6 and IPv4 raced), name
// lookups bounded by the deadline and cut short on cancel, the
// HTTPS_PROXY / HTTP_PROXY / NO_PROXY of the daemon's environment, and the
// connection and its TLS session kept between requests.
//
// The system's CA certificates are found where each distribution keeps
// them (SystemCaFiles), unless SSL_CERT_FILE / SSL_CERT_DIR say otherwise
// or the endpoint names a ca_file.
//
// Thread-compatible: an HttpSession is one exporter thread's.
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
  // The final answer's Retry-After header as sent, empty if none.
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

// The proxy a request to `url` goes through, from the environment as Go's
// net/http and curl read it: HTTPS_PROXY (https_proxy) for https:// URLs,
// HTTP_PROXY (http_proxy) for http:// ones, none for a host NO_PROXY
// (no_proxy) names ("*", a host, a domain suffix with or without a leading
// dot, an IP address, "host:port"). "" for none. `getenv` is the lookup
// (tests give their own).
std::string ProxyFor(const HttpUrl& url, const char* (*getenv)(const char*));

// Where the system keeps its CA certificates: SSL_CERT_FILE (as given) and
// the first directory of SSL_CERT_DIR (':'-separated) that exists, if
// either is set; else the first bundle file and the first hashed directory
// that exist of the known places (Debian and Ubuntu, RHEL, Fedora, Rocky
// and Alma, SUSE, Alpine, Arch). Either may be empty. `root` is prefixed to
// each known place looked at (tests: a directory laid out as a system's /).
struct CaLocations {
  std::string file;
  std::string dir;
};
CaLocations SystemCaFiles(absl::string_view root = "");

class HttpSession {
 public:
  HttpSession();
  ~HttpSession();
  HttpSession(const HttpSession&) = delete;
  HttpSession& operator=(const HttpSession&) = delete;

  // POSTs `request` to `endpoint`, with its credentials (read from their
  // files now) and TLS settings, within endpoint.timeout_ms for the whole
  // exchange, on the connection of the previous request if it is still
  // open. An error status means no HTTP answer came; its message says what
  // failed: resolving, connecting, the proxy, the TLS handshake and why, a
  // credential file that cannot be read, the timeout. The exporters retry
  // all of them (an administrator may fix a file or a certificate).
  absl::StatusOr<HttpResponse> Post(const PushEndpoint& endpoint, const HttpRequest& request);

  // Connections opened so far (each a TCP connect, and for https a full
  // TLS handshake): one per endpoint while it keeps the connection alive.
  int64_t connections() const { return connections_; }

 private:
  void* curl_ = nullptr;   // CURL*
  void* multi_ = nullptr;  // CURLM*
  int64_t connections_ = 0;
};

// One POST on a session of its own (tests, one-off requests).
absl::StatusOr<HttpResponse> HttpPost(const PushEndpoint& endpoint, const HttpRequest& request);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_HTTP_CLIENT_H_

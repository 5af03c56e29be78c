// The HTTP/1.1 server of /metrics, /healthz and the live page: GET and
// HEAD, keep-alive, pipelining, chunked responses, TLS.
//
// Why its own: what a scrape must survive is the peers that connect and
// say nothing, or say it slowly. A server with a thread per connection
// (CivetWeb, which this replaced) is blocked by as many idle connections as
// it has threads: two, and every scrape timed out. Here one event loop
// thread holds every connection while it is slow (the TLS handshake, the
// request's head and body, keep-alive between requests), without a thread
// each, and hands a request to a worker only once it has all of it. So a
// worker only ever renders and sends.
//
// Bounds, each counted (HttpCounters):
//   - a request must arrive whole within `request_timeout` of its first
//     byte (of the connection's accept, for the first request, TLS
//     handshake included); a keep-alive connection may idle for
//     `idle_timeout` between requests. Past either it is closed.
//   - at most `max_connections` held open, and `max_per_address` from one
//     address (IPv6: one /64). A connection past a bound does not push out
//     a scrape: the oldest connection that is waiting (not being answered)
//     is closed to make room, from the same address for the per-address
//     bound; a new one is refused only when every held one is being
//     answered.
//   - a request head of at most `max_head_bytes`; a body of at most
//     kMaxBodyBytes, read and discarded (GET and HEAD need none).
//   - a response send that makes no progress for `write_timeout` ends the
//     connection.
//
// Thread-safe: the handler is called concurrently from the workers.
#ifndef TORCHMON_SERVER_EXPOSITION_HTTP_SERVER_H_
#define TORCHMON_SERVER_EXPOSITION_HTTP_SERVER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/auth/failure_throttle.h"
#include "server/core/daemon_stats.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace torchmon::server {

struct IncomingHttpRequest {
  std::string method;  // "GET", "HEAD"
  std::string path;    // percent-decoded, without the query: "/api/series"
  std::string query;   // as sent, after '?': "stat=a%2Ab&limit=5"
  int minor_version = 1;  // HTTP/1.<minor>
  // Header names in lowercase, values without surrounding blanks, in order.
  std::vector<std::pair<std::string, std::string>> headers;
  // The peer's address: "127.0.0.1", "::1".
  std::string remote_address;

  // The first header `name` (any case), or null.
  const std::string* Header(absl::string_view name) const;
  // The `occurrence`th (from 0) value of `name` in the query, decoded
  // ('+' is a space, %XX a byte); "" when absent or longer than 4096 bytes.
  std::string Query(absl::string_view name, int occurrence = 0) const;
};

class HttpResponseWriter {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  // The status line and `headers`. With `content_length` >= 0 the body is
  // that long; -1 streams it: chunked over HTTP/1.1, to the connection's
  // end over HTTP/1.0. False once the peer is gone (then stop writing).
  bool Start(int status, const Headers& headers, int64_t content_length);
  // Part of the body (nothing is sent for HEAD). False once the peer is gone.
  bool Write(absl::string_view data);
  // A whole response of known length, with Content-Type and
  // Cache-Control: no-store.
  bool Send(int status, absl::string_view content_type, absl::string_view body,
            Headers extra = {});

  // The request is HEAD: headers only.
  bool head_only() const { return head_only_; }

 private:
  friend class HttpServer;
  struct Sink;
  HttpResponseWriter(Sink* sink, bool head_only, bool http10, bool close_requested)
      : sink_(sink), head_only_(head_only), http10_(http10), keep_alive_(!close_requested) {}
  bool Flush();
  bool Finish();  // the last chunk, and whatever is buffered

  Sink* sink_;
  bool head_only_;
  bool http10_;
  bool keep_alive_;
  bool started_ = false;
  bool chunked_ = false;
  bool failed_ = false;
  std::string out_;  // to send
  size_t chunk_start_ = std::string::npos;  // where the open chunk's data begins in out_
};

struct HttpLimits {
  size_t max_connections = 1024;
  size_t max_per_address = 128;
  absl::Duration request_timeout = absl::Seconds(10);
  absl::Duration idle_timeout = absl::Seconds(120);
  absl::Duration write_timeout = absl::Seconds(10);
  size_t max_head_bytes = 16 * 1024;
  int workers = 4;
};

class HttpServer {
 public:
  using Handler = std::function<void(const IncomingHttpRequest&, HttpResponseWriter&)>;
  // The SSL_CTX for each new connection, or null for plain HTTP; called on
  // the event loop's thread.
  using TlsContext = std::function<SSL_CTX*()>;

  // Listens on `address` (HOST:PORT, [IPv6]:PORT, a literal address; port
  // 0 picks a free one). Unavailable naming the address if it cannot be
  // bound. `counters` must outlive the server.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           Handler handler, TlsContext tls,
                                                           HttpLimits limits,
                                                           HttpCounters* counters);

  // Stops accepting, closes every waiting connection, waits for the
  // requests being answered.
  ~HttpServer();

  int port() const { return port_; }

 private:
  friend class HttpResponseWriter;
  struct Connection;
  class Loop;
  HttpServer() = default;

  int port_ = 0;
  std::unique_ptr<Loop> loop_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_HTTP_SERVER_H_

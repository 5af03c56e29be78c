// The HTTP endpoint Prometheus scrapes: GET /metrics, streamed from a
// MetricsExposition, GET /healthz for liveness and readiness probes, and
// the live page. Served by HttpServer (http_server.h), which no idle or
// slow peer can block.
#ifndef TORCHMON_SERVER_EXPOSITION_METRICS_HTTP_SERVER_H_
#define TORCHMON_SERVER_EXPOSITION_METRICS_HTTP_SERVER_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/auth/auth.h"
#include "server/core/daemon_stats.h"
#include "server/exposition/http_server.h"
#include "server/exposition/https_context.h"
#include "server/exposition/live_page.h"
#include "server/exposition/metrics_exposition.h"

namespace torchmon::server {

// What GET /healthz answers (docs/grpc-tooling.md).
enum class ServingState {
  kStarting,      // 503 "starting\n": listeners are being set up
  kServing,       // 200 "ok\n"
  kShuttingDown,  // 503 "shutting down\n": SIGTERM came, streams drain
};

// With a LivePage, GET / serves it and /api/series, /api/windows,
// /api/events its data, behind the same basic auth as /metrics.
//
// Thread-safe: scrapes run concurrently on the server's worker threads.
// Its connections are counted in DaemonStats::http.
// /metrics responses use chunked transfer encoding over HTTP/1.1; HTTP/1.0
// ones end when the connection closes. Every other path is 404. With an auth
// checker, a request for /metrics without credentials it accepts gets 401
// and a Basic challenge; /healthz never asks for credentials: a probe carries
// none, and the answer tells nothing a port scan would not (docs/security.md).
class MetricsHttpServer {
 public:
  // Serves on `address` (HOST:PORT, [IPv6]:PORT; port 0 picks a free one).
  // UnavailableError naming the address if it cannot be bound. `exposition`
  // and `stats` must outlive the server; each scrape, and each request
  // refused by `auth` (null: none is), is counted in `stats`. With `https`
  // (null: plain HTTP) every connection speaks TLS only, with the
  // certificate and client policy in force when it starts.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(
      const std::string& address, const MetricsExposition& exposition, DaemonStats& stats,
      std::shared_ptr<const BasicAuthChecker> auth = nullptr, const LivePage* page = nullptr,
      std::shared_ptr<HttpsContext> https = nullptr);

  // Stops serving; waits for scrapes in progress.
  ~MetricsHttpServer();

  // The bound address, with the real port ("127.0.0.1:9464").
  const std::string& address() const { return address_; }

  // What /healthz answers from now on; kStarting until the first call.
  // Thread-safe.
  void SetServingState(ServingState state);

 private:
  class Handler;
  class HealthHandler;
  class PageHandler;
  MetricsHttpServer() = default;

  std::string address_;
  std::unique_ptr<Handler> handler_;
  std::unique_ptr<HealthHandler> health_handler_;
  std::unique_ptr<PageHandler> page_handler_;
  std::shared_ptr<HttpsContext> https_;  // outlives server_, which uses it
  std::unique_ptr<HttpServer> server_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_METRICS_HTTP_SERVER_H_

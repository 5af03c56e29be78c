#include "server/service/metrics_http_server.h"

#include <chrono>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/str_cat.h"

namespace torchmon::server {

class MetricsHttpServer::Handler final : public CivetHandler {
 public:
  Handler(const MetricsExposition& exposition, DaemonStats& stats,
          std::shared_ptr<const BasicAuthChecker> auth)
      : exposition_(exposition), stats_(stats), auth_(std::move(auth)) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
    if (auth_ != nullptr) {
      const char* authorization = mg_get_header(conn, "Authorization");
      if (authorization == nullptr || !auth_->Accepts(authorization)) {
        stats_.scrapes_unauthorized.fetch_add(1, std::memory_order_relaxed);
        SendUnauthorized(conn, authorization != nullptr);
        return true;
      }
    }
    const auto start = std::chrono::steady_clock::now();
    const mg_request_info* request = mg_get_request_info(conn);
    // HTTP/1.0 has no chunked encoding: the body ends with the connection.
    const bool chunked =
        request->http_version != nullptr && std::strcmp(request->http_version, "1.0") != 0;
    mg_response_header_start(conn, 200);
    mg_response_header_add(conn, "Content-Type", "text/plain; version=0.0.4; charset=utf-8", -1);
    mg_response_header_add(conn, "Cache-Control", "no-store", -1);
    if (chunked) {
      mg_response_header_add(conn, "Transfer-Encoding", "chunked", -1);
    } else {
      mg_disable_connection_keep_alive(conn);
    }
    if (mg_response_header_send(conn) != 0) return true;

    const size_t bytes = exposition_.Render([&](absl::string_view piece) {
      const int n = chunked ? mg_send_chunk(conn, piece.data(), static_cast<unsigned>(piece.size()))
                            : mg_write(conn, piece.data(), piece.size());
      return n > 0;  // the scraper went away: stop rendering
    });
    if (chunked) mg_send_chunk(conn, "", 0);

    const auto elapsed = std::chrono::steady_clock::now() - start;
    stats_.scrapes.fetch_add(1, std::memory_order_relaxed);
    stats_.scrape_bytes.fetch_add(bytes, std::memory_order_relaxed);
    stats_.last_scrape_duration_us.store(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count(),
        std::memory_order_relaxed);
    return true;
  }

 private:
  static void SendUnauthorized(mg_connection* conn, bool credentials_sent) {
    const std::string body =
        credentials_sent ? "torchmond: these credentials are not accepted for /metrics\n"
                         : "torchmond: /metrics needs HTTP basic auth (--metrics-auth-file)\n";
    mg_response_header_start(conn, 401);
    mg_response_header_add(conn, "WWW-Authenticate", BasicAuthChecker::kChallenge.data(),
                           static_cast<int>(BasicAuthChecker::kChallenge.size()));
    mg_response_header_add(conn, "Content-Type", "text/plain; charset=utf-8", -1);
    mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
    if (mg_response_header_send(conn) == 0) mg_write(conn, body.data(), body.size());
  }

  const MetricsExposition& exposition_;
  DaemonStats& stats_;
  const std::shared_ptr<const BasicAuthChecker> auth_;
};

// GET /healthz. No credentials asked, whatever --metrics-auth-file says.
class MetricsHttpServer::HealthHandler final : public CivetHandler {
 public:
  bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
    int status = 503;
    absl::string_view body;
    switch (state_.load(std::memory_order_acquire)) {
      case ServingState::kStarting:
        body = "starting\n";
        break;
      case ServingState::kServing:
        status = 200;
        body = "ok\n";
        break;
      case ServingState::kShuttingDown:
        body = "shutting down\n";
        break;
    }
    mg_response_header_start(conn, status);
    mg_response_header_add(conn, "Content-Type", "text/plain; charset=utf-8", -1);
    mg_response_header_add(conn, "Cache-Control", "no-store", -1);
    mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
    if (mg_response_header_send(conn) == 0) mg_write(conn, body.data(), body.size());
    return true;
  }

  void Set(ServingState state) { state_.store(state, std::memory_order_release); }

 private:
  std::atomic<ServingState> state_{ServingState::kStarting};
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, const MetricsExposition& exposition, DaemonStats& stats,
    std::shared_ptr<const BasicAuthChecker> auth) {
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->handler_ = std::make_unique<Handler>(exposition, stats, std::move(auth));
  server->health_handler_ = std::make_unique<HealthHandler>();
  // Two workers: a scrape of a large daemon takes a while, and a second
  // scraper (or a health check) should not queue behind it.
  const std::vector<std::string> options = {"listening_ports", address, "num_threads", "2"};
  try {
    server->server_ = std::make_unique<CivetServer>(options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", e.what()));
  }
  const std::vector<int> ports = server->server_->getListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", address));
  }
  // "$": exactly /metrics, not every path that starts with it.
  server->server_->addHandler("/metrics$", server->handler_.get());
  server->server_->addHandler("/healthz$", server->health_handler_.get());
  server->address_ = absl::StrCat(address.substr(0, address.rfind(':')), ":", ports.front());
  return server;
}

void MetricsHttpServer::SetServingState(ServingState state) { health_handler_->Set(state); }

MetricsHttpServer::~MetricsHttpServer() {
  // The server's threads use the handler: stop them first.
  if (server_ != nullptr) server_->close();
}

}  // namespace torchmon::server

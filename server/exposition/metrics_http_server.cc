#include "server/exposition/metrics_http_server.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "CivetServer.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/rank_comparison.h"
#include "server/exposition/content_negotiation.h"
#include "server/exposition/gzip_stream.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

// A whole response of known length, never cached.
void SendText(mg_connection* conn, int status, const char* type, absl::string_view body) {
  mg_response_header_start(conn, status);
  mg_response_header_add(conn, "Content-Type", type, -1);
  mg_response_header_add(conn, "Cache-Control", "no-store", -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
  if (mg_response_header_send(conn) == 0) mg_write(conn, body.data(), body.size());
}

// 401 with the Basic challenge.
void SendUnauthorized(mg_connection* conn, absl::string_view body) {
  mg_response_header_start(conn, 401);
  mg_response_header_add(conn, "WWW-Authenticate", BasicAuthChecker::kChallenge.data(),
                         static_cast<int>(BasicAuthChecker::kChallenge.size()));
  mg_response_header_add(conn, "Content-Type", "text/plain; charset=utf-8", -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
  if (mg_response_header_send(conn) == 0) mg_write(conn, body.data(), body.size());
}

// With `auth`, a request without credentials it accepts is counted, answered
// 401 (`no_credentials` or `wrong_credentials` as the body) and true is
// returned; the caller then stops. A peer that failed too often lately is
// answered 429 with Retry-After, its credentials unchecked (throttled).
bool Refused(mg_connection* conn, const BasicAuthChecker* auth, DaemonStats& stats,
             absl::string_view no_credentials, absl::string_view wrong_credentials) {
  if (auth == nullptr) return false;
  const char* authorization = mg_get_header(conn, "Authorization");
  if (authorization == nullptr) {
    // A browser's first request: the challenge, no guess to slow down.
    stats.scrapes_unauthorized.fetch_add(1, std::memory_order_relaxed);
    SendUnauthorized(conn, no_credentials);
    return true;
  }
  const std::string peer = mg_get_request_info(conn)->remote_addr;
  const BasicAuthChecker::Admission admission = auth->Admit(peer, authorization, absl::Now());
  switch (admission.kind) {
    case BasicAuthChecker::Admission::Kind::kAccepted:
      return false;
    case BasicAuthChecker::Admission::Kind::kRefused:
      stats.scrapes_unauthorized.fetch_add(1, std::memory_order_relaxed);
      SendUnauthorized(conn, wrong_credentials);
      return true;
    case BasicAuthChecker::Admission::Kind::kWait:
      break;
  }
  stats.scrapes_throttled.fetch_add(1, std::memory_order_relaxed);
  const int64_t seconds = absl::ToInt64Seconds(absl::Ceil(admission.wait, absl::Seconds(1)));
  const std::string body =
      absl::StrCat("torchmond: too many failed attempts from ", peer, "; retry in ", seconds,
                   " s (credentials are not checked until then)\n");
  mg_response_header_start(conn, 429);
  mg_response_header_add(conn, "Retry-After", std::to_string(seconds).c_str(), -1);
  mg_response_header_add(conn, "Content-Type", "text/plain; charset=utf-8", -1);
  mg_response_header_add(conn, "Content-Length", std::to_string(body.size()).c_str(), -1);
  if (mg_response_header_send(conn) == 0) mg_write(conn, body.data(), body.size());
  return true;
}

}  // namespace

class MetricsHttpServer::Handler final : public CivetHandler {
 public:
  Handler(const MetricsExposition& exposition, DaemonStats& stats,
          std::shared_ptr<const BasicAuthChecker> auth)
      : exposition_(exposition), stats_(stats), auth_(std::move(auth)) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
    if (Refused(conn, auth_.get(), stats_,
                "torchmond: /metrics needs HTTP basic auth (--metrics-auth-file)\n",
                "torchmond: these credentials are not accepted for /metrics\n")) {
      return true;
    }
    const auto start = std::chrono::steady_clock::now();
    const Negotiated what = Negotiate(conn);
    bool chunked = false;
    if (!SendHeaders(conn, what, chunked)) return true;

    size_t sent = 0;  // bytes on the wire, compressed or not
    auto send = [&](absl::string_view piece) {
      const int n = chunked ? mg_send_chunk(conn, piece.data(), static_cast<unsigned>(piece.size()))
                            : mg_write(conn, piece.data(), piece.size());
      if (n <= 0) return false;  // the scraper went away: stop rendering
      sent += piece.size();
      return true;
    };
    if (what.gzip) {
      GzipStream gzip(send);
      exposition_.Render(what.format, [&](absl::string_view piece) { return gzip.Write(piece); });
      gzip.Finish();
    } else {
      exposition_.Render(what.format, send);
    }
    if (chunked) mg_send_chunk(conn, "", 0);
    const size_t bytes = sent;

    const auto elapsed = std::chrono::steady_clock::now() - start;
    stats_.scrapes.fetch_add(1, std::memory_order_relaxed);
    stats_.scrape_bytes.fetch_add(bytes, std::memory_order_relaxed);
    stats_.last_scrape_duration_us.store(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count(),
        std::memory_order_relaxed);
    return true;
  }

  // The headers a GET would get, and no body (monitoring checks, curl -I).
  bool handleHead(CivetServer* /*server*/, mg_connection* conn) override {
    if (Refused(conn, auth_.get(), stats_, "", "")) return true;
    bool chunked = false;
    SendHeaders(conn, Negotiate(conn), chunked);
    return true;
  }

 private:
  struct Negotiated {
    ExpositionFormat format;
    bool gzip;
  };
  // What the scraper's Accept and Accept-Encoding ask for.
  static Negotiated Negotiate(mg_connection* conn) {
    return Negotiated{NegotiateFormat(mg_get_header(conn, "Accept")),
                      AcceptsGzip(mg_get_header(conn, "Accept-Encoding"))};
  }

  // The 200 response's headers; false if the scraper went away.
  static bool SendHeaders(mg_connection* conn, const Negotiated& what, bool& chunked) {
    const mg_request_info* request = mg_get_request_info(conn);
    // HTTP/1.0 has no chunked encoding: the body ends with the connection.
    chunked = request->http_version != nullptr && std::strcmp(request->http_version, "1.0") != 0;
    mg_response_header_start(conn, 200);
    const absl::string_view type = ContentType(what.format);
    mg_response_header_add(conn, "Content-Type", type.data(), static_cast<int>(type.size()));
    if (what.gzip) mg_response_header_add(conn, "Content-Encoding", "gzip", -1);
    // A cache between scraper and daemon must not answer one format for another.
    mg_response_header_add(conn, "Vary", "Accept, Accept-Encoding", -1);
    mg_response_header_add(conn, "Cache-Control", "no-store", -1);
    if (chunked) {
      mg_response_header_add(conn, "Transfer-Encoding", "chunked", -1);
    } else {
      mg_disable_connection_keep_alive(conn);
    }
    return mg_response_header_send(conn) == 0;
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
    SendText(conn, status, "text/plain; charset=utf-8", body);
    return true;
  }

  void Set(ServingState state) { state_.store(state, std::memory_order_release); }

 private:
  std::atomic<ServingState> state_{ServingState::kStarting};
};

// GET / and /api/*: the live page (live_page.h).
class MetricsHttpServer::PageHandler final : public CivetHandler {
 public:
  PageHandler(const LivePage& page, DaemonStats& stats,
              std::shared_ptr<const BasicAuthChecker> auth)
      : page_(page), stats_(stats), auth_(std::move(auth)) {}

  bool handleGet(CivetServer* /*server*/, mg_connection* conn) override {
    if (Refused(conn, auth_.get(), stats_, "torchmond: the page needs HTTP basic auth\n",
                "torchmond: these credentials are not accepted for the page\n")) {
      return true;
    }
    const mg_request_info* request = mg_get_request_info(conn);
    const std::string uri = request->local_uri != nullptr ? request->local_uri : "/";
    if (uri == "/") {
      SendText(conn, 200, "text/html; charset=utf-8", LivePage::Html());
    } else if (uri == "/api/series") {
      Selector selector;
      if (!ParseSelector(conn, request, &selector)) return true;
      const Aggregator::SeriesOrder order = Query(request, "sort") == "recent"
                                                ? Aggregator::SeriesOrder::kMostRecentFirst
                                                : Aggregator::SeriesOrder::kMostDropsFirst;
      SendText(conn, 200, kJson,
               page_.SeriesJson(selector, Number(request, "limit", 100, LivePage::kMaxSeries),
                                order));
    } else if (uri == "/api/accounting") {
      Selector selector;
      if (!ParseSelector(conn, request, &selector)) return true;
      SendText(conn, 200, kJson,
               page_.AccountingJson(selector, Number(request, "limit", 20, LivePage::kMaxSeries)));
    } else if (uri == "/api/ranks") {
      Selector shared;
      if (!ParseSelector(conn, request, &shared)) return true;
      // stat= may repeat: the page asks for the stats it charts at once.
      std::vector<Selector> selectors;
      for (int i = 0; i < kMaxRankStats; ++i) {
        std::string stat = Query(request, "stat", i);
        if (stat.empty()) break;
        selectors.push_back(shared);
        selectors.back().name = std::move(stat);
      }
      if (selectors.empty()) selectors.push_back(shared);
      RankComparisonOptions options;
      if (const std::string agg = Query(request, "agg"); !agg.empty()) {
        absl::StatusOr<protocol::NamedAggregation> parsed = protocol::ParseAggregation(agg);
        if (!parsed.ok()) {
          SendText(conn, 400, "text/plain; charset=utf-8",
                   absl::StrCat("torchmond: /api/ranks?agg=: ", parsed.status().message(), "\n"));
          return true;
        }
        options.aggregate = AggregateRef{protocol::AggregationAs<Aggregation>(parsed->aggregation),
                                         parsed->quantile};
      }
      if (std::string key = Query(request, "rank_label"); !key.empty()) {
        options.rank_label = std::move(key);
      }
      if (!UnixMs(conn, request, "window_start", &options.window_start_ms)) return true;
      SendText(conn, 200, kJson, page_.RanksJson(selectors, options));
    } else if (uri == "/api/windows") {
      Selector selector;
      if (!ParseSelector(conn, request, &selector)) return true;
      if (selector.name.empty()) {
        SendText(conn, 400, "text/plain; charset=utf-8",
                 "torchmond: /api/windows needs ?stat=NAME\n");
      } else {
        int64_t start_ms = 0;
        if (!UnixMs(conn, request, "start", &start_ms)) return true;
        SendText(conn, 200, kJson,
                 page_.WindowsJson(selector, Number(request, "last", 60, 1000),
                                   Number(request, "series", 16, LivePage::kMaxChartSeries),
                                   start_ms));
      }
    } else if (uri == "/api/events") {
      SendText(conn, 200, kJson, page_.EventsJson(Number(request, "last", 50, 1000)));
    } else {
      SendText(conn, 404, "text/plain; charset=utf-8", "torchmond: not found\n");
    }
    return true;
  }

 private:
  static constexpr const char* kJson = "application/json";

  // At most this many stat= in one /api/ranks.
  static constexpr int kMaxRankStats = 32;
  // At most this many label= in one request.
  static constexpr int kMaxLabelMatchers = 8;

  // The `occurrence`th ?name= (from 0), decoded; "" when absent.
  static std::string Query(const mg_request_info* request, const char* name,
                           int occurrence = 0) {
    if (request->query_string == nullptr) return "";
    std::string value(4096, '\0');
    const int n = mg_get_var2(request->query_string, std::strlen(request->query_string), name,
                              value.data(), value.size(), occurrence);
    if (n < 0) return "";
    value.resize(static_cast<size_t>(n));
    return value;
  }
  // ?name=MS, Unix milliseconds, into *ms when given; false after answering
  // 400 for one that is not a positive integer.
  static bool UnixMs(mg_connection* conn, const mg_request_info* request, const char* name,
                     int64_t* ms) {
    const std::string text = Query(request, name);
    if (text.empty()) return true;
    if (!absl::SimpleAtoi(text, ms) || *ms <= 0) {
      SendText(conn, 400, "text/plain; charset=utf-8",
               absl::StrCat("torchmond: ", request->local_uri, "?", name, "=", text,
                            " is not a positive number of Unix milliseconds\n"));
      return false;
    }
    return true;
  }
  // ?stat=GLOB&label=k=v&label=... (every label equal) into `selector`;
  // false after answering 400 for a label without "=".
  static bool ParseSelector(mg_connection* conn, const mg_request_info* request,
                            Selector* selector) {
    selector->name = Query(request, "stat");
    for (int i = 0; i < kMaxLabelMatchers; ++i) {
      const std::string label = Query(request, "label", i);
      if (label.empty()) break;
      const size_t eq = label.find('=');
      if (eq == std::string::npos) {
        SendText(conn, 400, "text/plain; charset=utf-8",
                 absl::StrCat("torchmond: ", request->local_uri, "?label= needs key=value\n"));
        return false;
      }
      selector->labels.push_back(
          LabelMatcher{label.substr(0, eq), label.substr(eq + 1), LabelMatcher::Op::kEqual});
    }
    return true;
  }
  // ?name=N, 1 to `max`; `fallback` when absent or not a number.
  static size_t Number(const mg_request_info* request, const char* name, size_t fallback,
                       size_t max) {
    const std::string text = Query(request, name);
    char* end = nullptr;
    const long n = text.empty() ? 0 : std::strtol(text.c_str(), &end, 10);
    if (n < 1 || (end != nullptr && *end != '\0')) return fallback;
    return std::min(static_cast<size_t>(n), max);
  }
  const LivePage& page_;
  DaemonStats& stats_;
  const std::shared_ptr<const BasicAuthChecker> auth_;
};

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const std::string& address, const MetricsExposition& exposition, DaemonStats& stats,
    std::shared_ptr<const BasicAuthChecker> auth, const LivePage* page,
    std::shared_ptr<HttpsContext> https) {
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer());
  server->https_ = std::move(https);
  if (page != nullptr) server->page_handler_ = std::make_unique<PageHandler>(*page, stats, auth);
  server->handler_ = std::make_unique<Handler>(exposition, stats, std::move(auth));
  server->health_handler_ = std::make_unique<HealthHandler>();
  // Two workers: a scrape of a large daemon takes a while, and a second
  // scraper (or a health check) should not queue behind it.
  // An 's' after the port: TLS on it, with the context HttpsContext
  // builds (CivetWeb neither changes nor frees one a callback supplies).
  const std::vector<std::string> options = {
      "listening_ports", server->https_ != nullptr ? address + "s" : address, "num_threads", "2"};
  CivetCallbacks callbacks;
  callbacks.external_ssl_ctx = [](void** ssl_ctx, void* civet_server) {
    const auto* https = static_cast<const HttpsContext*>(
        static_cast<CivetServer*>(civet_server)->getUserContext());
    if (https == nullptr) return 0;
    *ssl_ctx = https->listening_context();
    return 1;
  };
  try {
    server->server_ =
        std::make_unique<CivetServer>(options, &callbacks, server->https_.get());
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
  if (server->page_handler_ != nullptr) {
    server->server_->addHandler("/$", server->page_handler_.get());
    server->server_->addHandler("/api/", server->page_handler_.get());
  }
  server->address_ = absl::StrCat(address.substr(0, address.rfind(':')), ":", ports.front());
  return server;
}

absl::Status MetricsHttpServer::CheckTlsAvailable() {
  // Initializes CivetWeb with TLS, which loads OpenSSL if it is loaded at
  // run time; a failure leaves the bit out of what it reports as done.
  static const unsigned initialized = mg_init_library(MG_FEATURES_TLS);
  if ((initialized & MG_FEATURES_TLS) != 0) return absl::OkStatus();
  return absl::FailedPreconditionError(
      "this torchmond's CivetWeb cannot serve TLS: Debian bookworm's libcivetweb1 1.15 loads "
      "OpenSSL at run time by OpenSSL 1.1's function names, which OpenSSL 3 lacks. "
      "tls_server_config needs a torchmond of the release build (its .deb, .rpm or tarball: "
      "docs/install.md), which links its own; or keep /metrics on loopback behind a TLS proxy");
}

void MetricsHttpServer::SetServingState(ServingState state) { health_handler_->Set(state); }

MetricsHttpServer::~MetricsHttpServer() {
  // The server's threads use the handler: stop them first.
  if (server_ != nullptr) server_->close();
}

}  // namespace torchmon::server

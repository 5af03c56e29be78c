#include "server/exposition/metrics_http_server.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/rank_comparison.h"
#include "server/exposition/content_negotiation.h"
#include "server/exposition/gzip_stream.h"
#include "server/exposition/http_server.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

// A whole response of known length, never cached.
void SendText(HttpResponseWriter& response, int status, const char* type, absl::string_view body) {
  response.Send(status, type, body);
}

// 401 with the Basic challenge.
void SendUnauthorized(HttpResponseWriter& response, absl::string_view body) {
  response.Send(401, "text/plain; charset=utf-8", body,
                {{"WWW-Authenticate", std::string(BasicAuthChecker::kChallenge)}});
}

// With `auth`, a request without credentials it accepts is counted, answered
// 401 (`no_credentials` or `wrong_credentials` as the body) and true is
// returned; the caller then stops. A peer that failed too often lately is
// answered 429 with Retry-After, its credentials unchecked (throttled).
bool Refused(const IncomingHttpRequest& request, HttpResponseWriter& response, const BasicAuthChecker* auth,
             DaemonStats& stats, absl::string_view no_credentials,
             absl::string_view wrong_credentials) {
  if (auth == nullptr) return false;
  const std::string* authorization = request.Header("authorization");
  if (authorization == nullptr) {
    // A browser's first request: the challenge, no guess to slow down.
    stats.scrapes_unauthorized.fetch_add(1, std::memory_order_relaxed);
    SendUnauthorized(response, no_credentials);
    return true;
  }
  const std::string& peer = request.remote_address;
  const BasicAuthChecker::Admission admission = auth->Admit(peer, *authorization, absl::Now());
  switch (admission.kind) {
    case BasicAuthChecker::Admission::Kind::kAccepted:
      return false;
    case BasicAuthChecker::Admission::Kind::kRefused:
      stats.scrapes_unauthorized.fetch_add(1, std::memory_order_relaxed);
      SendUnauthorized(response, wrong_credentials);
      return true;
    case BasicAuthChecker::Admission::Kind::kWait:
      break;
  }
  stats.scrapes_throttled.fetch_add(1, std::memory_order_relaxed);
  const int64_t seconds = absl::ToInt64Seconds(absl::Ceil(admission.wait, absl::Seconds(1)));
  const std::string body =
      absl::StrCat("torchmond: too many failed attempts from ", peer, "; retry in ", seconds,
                   " s (credentials are not checked until then)\n");
  response.Send(429, "text/plain; charset=utf-8", body,
                {{"Retry-After", std::to_string(seconds)}});
  return true;
}

}  // namespace

class MetricsHttpServer::Handler {
 public:
  Handler(const MetricsExposition& exposition, DaemonStats& stats,
          std::shared_ptr<const BasicAuthChecker> auth)
      : exposition_(exposition), stats_(stats), auth_(std::move(auth)) {}

  // GET /metrics; HEAD: the headers a GET would get, and no body
  // (monitoring checks, curl -I).
  void Serve(const IncomingHttpRequest& request, HttpResponseWriter& response) {
    const bool head = response.head_only();
    if (Refused(request, response, auth_.get(), stats_,
                head ? "" : "torchmond: /metrics needs HTTP basic auth (--metrics-auth-file)\n",
                head ? "" : "torchmond: these credentials are not accepted for /metrics\n")) {
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    const Negotiated what = Negotiate(request);
    if (!SendHeaders(response, what) || head) return;

    size_t sent = 0;  // bytes on the wire, compressed or not
    auto send = [&](absl::string_view piece) {
      if (!response.Write(piece)) return false;  // the scraper went away: stop rendering
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
    const size_t bytes = sent;

    const auto elapsed = std::chrono::steady_clock::now() - start;
    stats_.scrapes.fetch_add(1, std::memory_order_relaxed);
    stats_.scrape_bytes.fetch_add(bytes, std::memory_order_relaxed);
    stats_.last_scrape_duration_us.store(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count(),
        std::memory_order_relaxed);
  }

 private:
  struct Negotiated {
    ExpositionFormat format;
    bool gzip;
  };
  // What the scraper's Accept and Accept-Encoding ask for.
  static Negotiated Negotiate(const IncomingHttpRequest& request) {
    const std::string* accept = request.Header("accept");
    const std::string* encoding = request.Header("accept-encoding");
    return Negotiated{NegotiateFormat(accept != nullptr ? accept->c_str() : nullptr),
                      AcceptsGzip(encoding != nullptr ? encoding->c_str() : nullptr)};
  }

  // The 200 response's headers, the body streamed (chunked over HTTP/1.1);
  // false if the scraper went away.
  static bool SendHeaders(HttpResponseWriter& response, const Negotiated& what) {
    HttpResponseWriter::Headers headers = {{"Content-Type", std::string(ContentType(what.format))}};
    if (what.gzip) headers.emplace_back("Content-Encoding", "gzip");
    // A cache between scraper and daemon must not answer one format for another.
    headers.emplace_back("Vary", "Accept, Accept-Encoding");
    headers.emplace_back("Cache-Control", "no-store");
    return response.Start(200, headers, -1);
  }

  const MetricsExposition& exposition_;
  DaemonStats& stats_;
  const std::shared_ptr<const BasicAuthChecker> auth_;
};

// GET /healthz. No credentials asked, whatever --metrics-auth-file says.
class MetricsHttpServer::HealthHandler {
 public:
  void Serve(HttpResponseWriter& response) {
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
    SendText(response, status, "text/plain; charset=utf-8", body);
  }

  void Set(ServingState state) { state_.store(state, std::memory_order_release); }

 private:
  std::atomic<ServingState> state_{ServingState::kStarting};
};

// GET / and /api/*: the live page (live_page.h).
class MetricsHttpServer::PageHandler {
 public:
  PageHandler(const LivePage& page, DaemonStats& stats,
              std::shared_ptr<const BasicAuthChecker> auth)
      : page_(page), stats_(stats), auth_(std::move(auth)) {}

  void Serve(const IncomingHttpRequest& req, HttpResponseWriter& conn) {
    if (Refused(req, conn, auth_.get(), stats_, "torchmond: the page needs HTTP basic auth\n",
                "torchmond: these credentials are not accepted for the page\n")) {
      return;
    }
    const IncomingHttpRequest* request = &req;
    const std::string& uri = request->path;
    if (uri == "/") {
      SendText(conn, 200, "text/html; charset=utf-8", LivePage::Html());
    } else if (uri == "/api/series") {
      Selector selector;
      if (!ParseSelector(conn, request, &selector)) return;
      const Aggregator::SeriesOrder order = Query(request, "sort") == "recent"
                                                ? Aggregator::SeriesOrder::kMostRecentFirst
                                                : Aggregator::SeriesOrder::kMostDropsFirst;
      SendText(conn, 200, kJson,
               page_.SeriesJson(selector, Number(request, "limit", 100, LivePage::kMaxSeries),
                                order));
    } else if (uri == "/api/accounting") {
      Selector selector;
      if (!ParseSelector(conn, request, &selector)) return;
      SendText(conn, 200, kJson,
               page_.AccountingJson(selector, Number(request, "limit", 20, LivePage::kMaxSeries)));
    } else if (uri == "/api/ranks") {
      Selector shared;
      if (!ParseSelector(conn, request, &shared)) return;
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
          return;
        }
        options.aggregate = AggregateRef{protocol::AggregationAs<Aggregation>(parsed->aggregation),
                                         parsed->quantile};
      }
      if (std::string key = Query(request, "rank_label"); !key.empty()) {
        options.rank_label = std::move(key);
      }
      if (!UnixMs(conn, request, "window_start", &options.window_start_ms)) return;
      SendText(conn, 200, kJson, page_.RanksJson(selectors, options));
    } else if (uri == "/api/windows") {
      Selector selector;
      if (!ParseSelector(conn, request, &selector)) return;
      if (selector.name.empty()) {
        SendText(conn, 400, "text/plain; charset=utf-8",
                 "torchmond: /api/windows needs ?stat=NAME\n");
      } else {
        int64_t start_ms = 0;
        if (!UnixMs(conn, request, "start", &start_ms)) return;
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
  }

 private:
  static constexpr const char* kJson = "application/json";

  // At most this many stat= in one /api/ranks.
  static constexpr int kMaxRankStats = 32;
  // At most this many label= in one request.
  static constexpr int kMaxLabelMatchers = 8;

  // The `occurrence`th ?name= (from 0), decoded; "" when absent.
  static std::string Query(const IncomingHttpRequest* request, const char* name, int occurrence = 0) {
    return request->Query(name, occurrence);
  }
  // ?name=MS, Unix milliseconds, into *ms when given; false after answering
  // 400 for one that is not a positive integer.
  static bool UnixMs(HttpResponseWriter& conn, const IncomingHttpRequest* request, const char* name,
                     int64_t* ms) {
    const std::string text = Query(request, name);
    if (text.empty()) return true;
    if (!absl::SimpleAtoi(text, ms) || *ms <= 0) {
      SendText(conn, 400, "text/plain; charset=utf-8",
               absl::StrCat("torchmond: ", request->path, "?", name, "=", text,
                            " is not a positive number of Unix milliseconds\n"));
      return false;
    }
    return true;
  }
  // ?stat=GLOB&label=k=v&label=... (every label equal) into `selector`;
  // false after answering 400 for a label without "=".
  static bool ParseSelector(HttpResponseWriter& conn, const IncomingHttpRequest* request,
                            Selector* selector) {
    selector->name = Query(request, "stat");
    for (int i = 0; i < kMaxLabelMatchers; ++i) {
      const std::string label = Query(request, "label", i);
      if (label.empty()) break;
      const size_t eq = label.find('=');
      if (eq == std::string::npos) {
        SendText(conn, 400, "text/plain; charset=utf-8",
                 absl::StrCat("torchmond: ", request->path, "?label= needs key=value\n"));
        return false;
      }
      selector->labels.push_back(
          LabelMatcher{label.substr(0, eq), label.substr(eq + 1), LabelMatcher::Op::kEqual});
    }
    return true;
  }
  // ?name=N, 1 to `max`; `fallback` when absent or not a number.
  static size_t Number(const IncomingHttpRequest* request, const char* name, size_t fallback,
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
  MetricsHttpServer* self = server.get();
  // Exactly these paths, not every path that starts with one.
  auto route = [self](const IncomingHttpRequest& request, HttpResponseWriter& response) {
    if (request.path == "/metrics") {
      self->handler_->Serve(request, response);
    } else if (request.path == "/healthz") {
      self->health_handler_->Serve(response);
    } else if (self->page_handler_ != nullptr &&
               (request.path == "/" || absl::StartsWith(request.path, "/api/"))) {
      self->page_handler_->Serve(request, response);
    } else {
      SendText(response, 404, "text/plain; charset=utf-8", "torchmond: not found\n");
    }
  };
  // TLS on every connection, with the context HttpsContext builds.
  HttpServer::TlsContext tls;
  if (server->https_ != nullptr) {
    tls = [https = server->https_.get()] { return https->listening_context(); };
  }
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      HttpServer::Start(address, route, std::move(tls), HttpLimits(), &stats.http);
  if (!http.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", address, ": ", http.status().message()));
  }
  server->server_ = *std::move(http);
  server->address_ =
      absl::StrCat(address.substr(0, address.rfind(':')), ":", server->server_->port());
  return server;
}

void MetricsHttpServer::SetServingState(ServingState state) { health_handler_->Set(state); }

MetricsHttpServer::~MetricsHttpServer() {
  // The server's threads use the handlers: stop them first.
  server_.reset();
}

}  // namespace torchmon::server

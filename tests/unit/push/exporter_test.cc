// An exporter against a real HTTP server on loopback that answers as
// scripted: what it does with 2xx, 400, 429 (Retry-After), 500 and no
// answer at all, how its queue drops whole windows when the receiver is
// away, and what a shutdown leaves. Its counters are read as /metrics
// shows them (DaemonStats::Exporter).
#include "server/push/exporter.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scripted_http_server.h"
#include "server/core/clock.h"
#include "support/test_pki.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using testing::ScriptedAnswer;
using testing::ScriptedHttpServer;

// A window end of `requests` requests carrying `windows_each` windows.
std::shared_ptr<const EncodedWindow> Window(int64_t end_ms, size_t requests = 1,
                                            size_t windows_each = 10) {
  auto w = std::make_shared<EncodedWindow>();
  w->end_ms = end_ms;
  for (size_t i = 0; i < requests; ++i) {
    w->requests.push_back(EncodedRequest{"body-" + std::to_string(end_ms) + "-" + std::to_string(i),
                                         windows_each});
    w->bytes += w->requests.back().body.size();
    w->windows += windows_each;
  }
  return w;
}

PushOptions FastOptions() {
  PushOptions options;
  options.min_backoff_ms = 10;
  options.max_backoff_ms = 40;
  options.max_retry_after_ms = 5000;
  return options;
}

PushEndpoint EndpointAt(const std::string& url, PushProtocol protocol = PushProtocol::kRemoteWrite) {
  auto e = ParsePushEndpoint(protocol, "--remote-write-url", url + " timeout=2s");
  EXPECT_TRUE(e.ok()) << e.status();
  return *e;
}

class ExporterTest : public ::testing::Test {
 protected:
  void Start(const std::string& url, PushOptions options = FastOptions()) {
    exporter_ = std::make_unique<Exporter>(EndpointAt(url), options, stats_, clock_,
                                           [this](const std::string& line) {
                                             absl::MutexLock lock(&log_mu_);
                                             log_.push_back(line);
                                           });
  }
  std::string Log() {
    absl::MutexLock lock(&log_mu_);
    std::string all;
    for (const auto& l : log_) all += l + "\n";
    return all;
  }
  uint64_t Dropped(DaemonStats::ExportDropReason r) { return stats_.dropped[r].load(); }

  SystemClock clock_;
  DaemonStats::Exporter stats_;
  absl::Mutex log_mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(log_mu_);
  std::unique_ptr<Exporter> exporter_;
};

TEST_F(ExporterTest, ARemoteWriteRequestCarriesTheProtocolsHeadersAndItsBody) {
  ScriptedHttpServer server({{204, "", ""}});
  Start(server.url());
  exporter_->Enqueue(Window(1000, 2, 7));
  ASSERT_TRUE(server.AwaitRequests(2));
  exporter_->Finish(absl::Now() + absl::Seconds(5));
  const auto requests = server.requests();
  EXPECT_THAT(requests[0].head, HasSubstr("POST /api/v1/write HTTP/1.1"));
  EXPECT_EQ(requests[0].Header("Content-Encoding"), "snappy");
  EXPECT_EQ(requests[0].Header("Content-Type"), "application/x-protobuf");
  EXPECT_EQ(requests[0].Header("X-Prometheus-Remote-Write-Version"), "0.1.0");
  EXPECT_THAT(requests[0].Header("User-Agent"), HasSubstr("torchmond/"));
  EXPECT_EQ(requests[0].body, "body-1000-0");
  EXPECT_EQ(requests[1].body, "body-1000-1");
  EXPECT_EQ(stats_.sent_windows.load(), 14u);
  EXPECT_EQ(stats_.sent_requests.load(), 2u);
  EXPECT_EQ(stats_.sent_bytes.load(), 2 * std::string("body-1000-0").size());
  EXPECT_EQ(stats_.retried.load(), 0u);
  EXPECT_EQ(stats_.queued.load(), 0);
}

TEST_F(ExporterTest, A400DropsThatRequestAtOnceAndTheNextGoes) {
  ScriptedHttpServer server({{400, "", "out of order sample"}, {200, "", ""}});
  Start(server.url());
  exporter_->Enqueue(Window(1000));
  exporter_->Enqueue(Window(2000));
  ASSERT_TRUE(server.AwaitRequests(2));
  exporter_->Finish(absl::Now() + absl::Seconds(5));
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 2u);  // never sent again
  EXPECT_EQ(requests[0].body, "body-1000-0");
  EXPECT_EQ(requests[1].body, "body-2000-0");
  EXPECT_EQ(Dropped(DaemonStats::kExportRejected), 10u);
  EXPECT_EQ(stats_.sent_windows.load(), 10u);
  EXPECT_EQ(stats_.retried.load(), 0u);
  EXPECT_THAT(Log(), HasSubstr("HTTP 400: out of order sample"));
}

TEST_F(ExporterTest, A500IsRetriedWithBackoffUntilItIsTaken) {
  ScriptedHttpServer server({{500, "", "busy"}, {503, "", ""}, {200, "", ""}});
  Start(server.url());
  exporter_->Enqueue(Window(1000));
  ASSERT_TRUE(server.AwaitRequests(3));
  exporter_->Finish(absl::Now() + absl::Seconds(5));
  for (const auto& r : server.requests()) EXPECT_EQ(r.body, "body-1000-0");
  EXPECT_EQ(stats_.retried.load(), 2u);
  EXPECT_EQ(stats_.sent_windows.load(), 10u);
  EXPECT_EQ(Dropped(DaemonStats::kExportRejected), 0u);
  EXPECT_THAT(Log(), HasSubstr("sending again after 2 failed attempt(s)"));
}

TEST_F(ExporterTest, A429WaitsTheRetryAfterItGives) {
  ScriptedHttpServer server({{429, "1", "slow down"}, {200, "", ""}});
  Start(server.url());
  const absl::Time start = absl::Now();
  exporter_->Enqueue(Window(1000));
  ASSERT_TRUE(server.AwaitRequests(2));
  // Not a timing test of the wait (RetryDelayMs is tested alone): the
  // second attempt did not come at the 10 ms backoff.
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(900));
  exporter_->Finish(absl::Now() + absl::Seconds(5));
  EXPECT_EQ(stats_.retried.load(), 1u);
  EXPECT_EQ(stats_.sent_windows.load(), 10u);
}

// A port nothing listens on.
std::string DeadUrl() {
  ScriptedHttpServer server({{200, "", ""}});
  return server.url();
}

TEST_F(ExporterTest, AReceiverAwayLongerThanTheQueueHoldsLosesTheOldestWholeWindowsCounted) {
  PushOptions options = FastOptions();
  options.queue_windows = 3;
  Start(DeadUrl(), options);
  // Five window ends of 2 requests × 10 windows: the three newest fit.
  for (int i = 1; i <= 5; ++i) exporter_->Enqueue(Window(i * 1000, 2, 10));
  EXPECT_EQ(Dropped(DaemonStats::kExportQueueFull), 40u);
  EXPECT_EQ(stats_.queued.load(), 3);
  EXPECT_GT(stats_.oldest_queued_ms.load(), 0);
  EXPECT_THAT(Log(), HasSubstr("the queue is full"));
  exporter_->Finish(absl::Now());
  EXPECT_EQ(Dropped(DaemonStats::kExportShutdown), 60u);
  EXPECT_EQ(stats_.sent_windows.load(), 0u);
  EXPECT_EQ(stats_.queued.load(), 0);
  EXPECT_THAT(Log(), HasSubstr("stopping with 3 window end(s) unsent; dropped 60 series windows"));
}

TEST_F(ExporterTest, AQueueBoundInBytesDropsAsTheBoundInWindowsDoes) {
  PushOptions options = FastOptions();
  options.queue_bytes = 3 * std::string("body-1000-0").size();
  Start(DeadUrl(), options);
  for (int i = 1; i <= 4; ++i) exporter_->Enqueue(Window(i * 1000));
  EXPECT_EQ(Dropped(DaemonStats::kExportQueueFull), 10u);
  EXPECT_EQ(stats_.queued.load(), 3);
  exporter_->Finish(absl::Now());
}

TEST_F(ExporterTest, WhatIsQueuedAtShutdownIsSentWithinTheFlushTime) {
  ScriptedHttpServer server({{200, "", ""}});
  Start(server.url());
  for (int i = 1; i <= 4; ++i) exporter_->Enqueue(Window(i * 1000));
  exporter_->Finish(absl::Now() + absl::Seconds(10));
  EXPECT_EQ(server.requests().size(), 4u);
  EXPECT_EQ(stats_.sent_windows.load(), 40u);
  EXPECT_EQ(Dropped(DaemonStats::kExportShutdown), 0u);
}

TEST_F(ExporterTest, ARequestOnTheWireAtTheFlushDeadlineIsCutThere) {
  // A socket that takes connections into its backlog and never answers.
  const int hole = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(hole, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(hole, 8), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(hole, reinterpret_cast<sockaddr*>(&addr), &len);
  auto endpoint = ParsePushEndpoint(
      PushProtocol::kRemoteWrite, "--remote-write-url",
      absl::StrCat("http://127.0.0.1:", ntohs(addr.sin_port), "/api/v1/write timeout=60s"));
  ASSERT_TRUE(endpoint.ok());
  exporter_ = std::make_unique<Exporter>(*endpoint, FastOptions(), stats_, clock_,
                                         [](const std::string&) {});
  exporter_->Enqueue(Window(1000));
  exporter_->Enqueue(Window(2000));
  // The first request is on the wire (its answer 60 s away) once the
  // queue says so; give it a moment to be sent.
  absl::SleepFor(absl::Milliseconds(200));
  const absl::Time start = absl::Now();
  exporter_->Finish(start + absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));  // not the request's 60 s
  EXPECT_EQ(Dropped(DaemonStats::kExportShutdown), 20u);
  EXPECT_EQ(stats_.sent_windows.load(), 0u);
  ::close(hole);
}

TEST_F(ExporterTest, BearerTokenAndBasicAuthAreReadFromTheirFilesAtEachRequest) {
  ScriptedHttpServer server({{200, "", ""}});
  const std::string dir = ::testing::TempDir();
  const std::string token = dir + "/push_token";
  {
    std::FILE* f = std::fopen(token.c_str(), "w");
    std::fputs("first-token\n", f);
    std::fclose(f);
  }
  auto e = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                             server.url() + " bearer_token_file=" + token);
  ASSERT_TRUE(e.ok()) << e.status();
  auto request = HttpRequest{"application/x-protobuf", {}, "x"};
  ASSERT_EQ(HttpPost(*e, request)->status, 200);
  {
    std::FILE* f = std::fopen(token.c_str(), "w");
    std::fputs("rotated\n", f);
    std::fclose(f);
  }
  ASSERT_EQ(HttpPost(*e, request)->status, 200);
  const std::string password = dir + "/push_password";
  {
    std::FILE* f = std::fopen(password.c_str(), "w");
    std::fputs("s3cret\n", f);
    std::fclose(f);
  }
  auto basic = ParsePushEndpoint(PushProtocol::kOtlp, "--otlp-endpoint",
                                 server.url("/v1/metrics") + " basic_auth_username=ann basic_auth_password_file=" +
                                     password);
  ASSERT_TRUE(basic.ok()) << basic.status();
  ASSERT_EQ(HttpPost(*basic, request)->status, 200);
  const auto requests = server.requests();
  EXPECT_EQ(requests[0].Header("Authorization"), "Bearer first-token");
  EXPECT_EQ(requests[1].Header("Authorization"), "Bearer rotated");
  EXPECT_EQ(requests[2].Header("Authorization"), "Basic YW5uOnMzY3JldA==");  // ann:s3cret
  std::remove(token.c_str());
  auto missing = HttpPost(*e, request);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.status().message(), HasSubstr("cannot read the bearer token file " + token));
}

// A TLS server of the test PKI, asking for a client certificate of its CA.
SSL_CTX* ServerContext(const testing::TestPki& pki) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  SSL_CTX_use_certificate_chain_file(ctx, pki.server_cert.c_str());
  SSL_CTX_use_PrivateKey_file(ctx, pki.server_key.c_str(), SSL_FILETYPE_PEM);
  SSL_CTX_load_verify_locations(ctx, pki.ca_cert.c_str(), nullptr);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  return ctx;
}

TEST(HttpPostTest, OverTlsTheServerIsVerifiedByTheCaFileAndShownTheClientCertificate) {
  const std::string dir = ::testing::TempDir() + "/push_pki";
  std::filesystem::create_directories(dir);
  auto pki = testing::MakeTestPki(dir);
  ASSERT_TRUE(pki.ok()) << pki.status();
  SSL_CTX* ctx = ServerContext(*pki);
  ScriptedHttpServer server({{200, "", ""}}, ctx);
  SSL_CTX_free(ctx);
  const HttpRequest request{"application/x-protobuf", {}, "x"};
  // The server's certificate names localhost and 127.0.0.1.
  auto good = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                                server.url() + " ca_file=" + pki->ca_cert + " cert_file=" +
                                    pki->client_cert + " key_file=" + pki->client_key);
  ASSERT_TRUE(good.ok()) << good.status();
  auto answer = HttpPost(*good, request);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 200);

  // Another CA: the server is not believed.
  auto untrusted = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                                     server.url() + " ca_file=" + pki->other_ca_cert +
                                         " cert_file=" + pki->client_cert + " key_file=" +
                                         pki->client_key);
  ASSERT_TRUE(untrusted.ok());
  auto refused = HttpPost(*untrusted, request);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("does not verify"));

  // A name the certificate does not hold.
  auto wrong_name = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                                      server.url() + " ca_file=" + pki->ca_cert +
                                          " server_name=elsewhere.example cert_file=" +
                                          pki->client_cert + " key_file=" + pki->client_key);
  ASSERT_TRUE(wrong_name.ok());
  EXPECT_FALSE(HttpPost(*wrong_name, request).ok());

  // No client certificate: the server ends the handshake.
  auto anonymous = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                                     server.url() + " ca_file=" + pki->ca_cert);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_FALSE(HttpPost(*anonymous, request).ok());
  EXPECT_EQ(server.requests().size(), 1u);
}

TEST(RetryDelayTest, BackoffDoublesFromTheMinimumToTheMaximum) {
  PushOptions o;
  o.min_backoff_ms = 250;
  o.max_backoff_ms = 2000;
  EXPECT_EQ(RetryDelayMs(1, "", 0, o), 250);
  EXPECT_EQ(RetryDelayMs(2, "", 0, o), 500);
  EXPECT_EQ(RetryDelayMs(4, "", 0, o), 2000);
  EXPECT_EQ(RetryDelayMs(50, "", 0, o), 2000);
}

TEST(RetryDelayTest, RetryAfterInSecondsOrAsADateIsHonouredUpToItsCap) {
  PushOptions o;
  o.max_retry_after_ms = 60'000;
  EXPECT_EQ(RetryDelayMs(1, "7", 0, o), 7000);
  EXPECT_EQ(RetryDelayMs(9, " 0 ", 0, o), 0);
  EXPECT_EQ(RetryDelayMs(1, "3600", 0, o), 60'000);
  // 784111777 s is Sun, 06 Nov 1994 08:49:37 GMT.
  EXPECT_EQ(RetryDelayMs(1, "Sun, 06 Nov 1994 08:49:37 GMT", 784111777'000 - 12'000, o), 12'000);
  EXPECT_EQ(RetryDelayMs(1, "Sun, 06 Nov 1994 08:49:37 GMT", 784111777'000 + 5'000, o), 0);
  // Not a Retry-After: the backoff.
  EXPECT_EQ(RetryDelayMs(1, "soon", 0, o), o.min_backoff_ms);
}

// Waits longer than the cap are the cap, not a signed overflow of seconds
// times 1000 (which UBSan, in build-asan-ubsan/, reports and aborts on).
TEST(RetryDelayTest, AHugeRetryAfterIsTheCapNotAnOverflow) {
  PushOptions o;
  o.max_retry_after_ms = 60'000;
  EXPECT_EQ(RetryDelayMs(1, "9223372036854775807", 0, o), 60'000);  // INT64_MAX
  EXPECT_EQ(RetryDelayMs(1, "9223372036854776", 0, o), 60'000);  // the least that overflowed
  EXPECT_EQ(RetryDelayMs(1, "9223372036854775", 0, o), 60'000);
  EXPECT_EQ(RetryDelayMs(1, "60", 0, o), 60'000);
  EXPECT_EQ(RetryDelayMs(1, "59", 0, o), 59'000);
  // Past int64: not a number of seconds, nor a date: the backoff.
  EXPECT_EQ(RetryDelayMs(1, "92233720368547758070", 0, o), o.min_backoff_ms);
  const int64_t now_ms = 784111777'000;  // Sun, 06 Nov 1994 08:49:37 GMT
  EXPECT_EQ(RetryDelayMs(1, "Fri, 31 Dec 9999 23:59:59 GMT", now_ms, o), 60'000);
  EXPECT_EQ(RetryDelayMs(1, "Sun, 06 Nov 1994 08:50:36 GMT", now_ms, o), 59'000);
  EXPECT_EQ(RetryDelayMs(1, "Sun, 06 Nov 1994 08:50:37 GMT", now_ms, o), 60'000);
  EXPECT_EQ(RetryDelayMs(1, "Sat, 01 Jan 0000 00:00:00 GMT", now_ms, o), 0);
}

TEST(OutcomeTest, TwoHundredsAreSent429And5xxAndNoAnswerRetriedOther4xxRejected) {
  EXPECT_EQ(OutcomeOf(200), PushOutcome::kSent);
  EXPECT_EQ(OutcomeOf(204), PushOutcome::kSent);
  EXPECT_EQ(OutcomeOf(0), PushOutcome::kRetry);
  EXPECT_EQ(OutcomeOf(429), PushOutcome::kRetry);
  EXPECT_EQ(OutcomeOf(500), PushOutcome::kRetry);
  EXPECT_EQ(OutcomeOf(503), PushOutcome::kRetry);
  EXPECT_EQ(OutcomeOf(400), PushOutcome::kRejected);
  EXPECT_EQ(OutcomeOf(401), PushOutcome::kRejected);
  EXPECT_EQ(OutcomeOf(413), PushOutcome::kRejected);
  EXPECT_EQ(OutcomeOf(301), PushOutcome::kRejected);
}

}  // namespace
}  // namespace torchmon::server

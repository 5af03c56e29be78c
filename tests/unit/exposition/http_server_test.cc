// The metrics port's HTTP server over real loopback TCP: the protocol as
// scrapers and browsers speak it, and the bounds that keep slow and idle
// peers from blocking a scrape (server/exposition/http_server.h).
#include "server/exposition/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// One client connection; every wait is bounded.
class Client {
 public:
  explicit Client(int port, const char* from = "127.0.0.1") {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, from, &local.sin_addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0;
  }
  ~Client() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return connected_; }

  bool Send(const std::string& text) {
    return send(fd_, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
  }

  // Reads until `done(text)` or the peer closes or `timeout` passes.
  template <typename Done>
  std::string ReadUntil(Done done, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!done(in_)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          end - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
      char buffer[65536];
      const ssize_t n = recv(fd_, buffer, sizeof(buffer), 0);
      if (n <= 0) {
        closed_ = true;
        break;
      }
      in_.append(buffer, static_cast<size_t>(n));
    }
    return in_;
  }

  // One whole response (Content-Length, chunked, or to the close).
  std::string Response() {
    std::string out;
    ReadUntil([&](const std::string& in) {
      const size_t head = in.find("\r\n\r\n");
      if (head == std::string::npos) return false;
      const std::string headers = in.substr(0, head);
      size_t end = std::string::npos;
      if (const size_t at = headers.find("Content-Length: "); at != std::string::npos) {
        end = head + 4 + std::stoul(headers.substr(at + 16));
        if (in.size() < end) return false;
      } else if (absl::StrContains(headers, "Transfer-Encoding: chunked")) {
        const size_t last = in.find("\r\n0\r\n\r\n", head);
        if (last == std::string::npos) return false;
        end = last + 7;
      } else {
        return false;  // to the close
      }
      out = in.substr(0, end);
      return true;
    });
    if (out.empty() && closed_) out = in_;
    in_.erase(0, out.size());
    return out;
  }

  // True if the server closed the connection within `timeout`.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    ReadUntil([](const std::string&) { return false; }, timeout);
    return closed_;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool closed_ = false;
  std::string in_;
};

// Polls `condition` for up to 10 s: for what the server's own thread does
// (closing, counting) after the client saw its effect.
template <typename Condition>
bool Eventually(Condition condition) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServer::Handler handler, HttpLimits limits = HttpLimits()) {
    auto server = HttpServer::Start("127.0.0.1:0", std::move(handler), nullptr, limits, &counters_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  // Answers "<method> <path>?<query>" with a text body.
  void StartEcho(HttpLimits limits = HttpLimits()) {
    Start(
        [](const IncomingHttpRequest& request, HttpResponseWriter& response) {
          response.Send(200, "text/plain", absl::StrCat(request.method, " ", request.path, "?",
                                                        request.query));
        },
        limits);
  }
  int port() const { return server_->port(); }

  HttpCounters counters_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(HttpServerTest, AnswersAGetAndKeepsTheConnectionForTheNext) {
  StartEcho();
  Client c(port());
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  std::string first = c.Response();
  EXPECT_THAT(first, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(first, HasSubstr("Content-Length: 13\r\n"));
  EXPECT_THAT(first, HasSubstr("Cache-Control: no-store\r\n"));
  EXPECT_TRUE(absl::EndsWith(first, "\r\n\r\nGET /metrics?"));
  ASSERT_TRUE(c.Send("GET /healthz?a=1 HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_TRUE(absl::EndsWith(c.Response(), "GET /healthz?a=1"));
  EXPECT_EQ(counters_.accepted.load(), 1u);
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartEcho();
  Client c(port());
  ASSERT_TRUE(c.Send("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"
                     "GET /c HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  EXPECT_TRUE(absl::EndsWith(c.Response(), "GET /a?"));
  EXPECT_TRUE(absl::EndsWith(c.Response(), "GET /b?"));
  const std::string last = c.Response();
  EXPECT_THAT(last, HasSubstr("Connection: close\r\n"));
  EXPECT_TRUE(absl::EndsWith(last, "GET /c?"));
  EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
}

TEST_F(HttpServerTest, HeadGetsTheHeadersOnly) {
  StartEcho();
  Client c(port());
  ASSERT_TRUE(c.Send("HEAD /x HTTP/1.1\r\nHost: x\r\n\r\nGET /y HTTP/1.1\r\nHost: x\r\n\r\n"));
  // The HEAD's Content-Length is the GET's, with no body: the next bytes
  // are the second response.
  std::string both = c.ReadUntil([](const std::string& in) { return absl::EndsWith(in, "GET /y?"); });
  EXPECT_THAT(both, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(both, HasSubstr("Content-Length: 8\r\n\r\nHTTP/1.1 200 OK\r\n"));
}

TEST_F(HttpServerTest, AStreamedBodyIsChunkedOverHttp11AndEndsWithTheConnectionOverHttp10) {
  const std::string piece(40000, 'x');
  Start([&](const IncomingHttpRequest&, HttpResponseWriter& response) {
    response.Start(200, {{"Content-Type", "text/plain"}}, -1);
    for (int i = 0; i < 5; ++i) response.Write(piece);
  });
  Client c11(port());
  ASSERT_TRUE(c11.Send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  const std::string chunked = c11.Response();
  ASSERT_THAT(chunked, HasSubstr("Transfer-Encoding: chunked\r\n"));
  // Decode the chunks: all 200000 bytes, nothing else.
  std::string body;
  size_t at = chunked.find("\r\n\r\n") + 4;
  while (true) {
    const size_t eol = chunked.find("\r\n", at);
    ASSERT_NE(eol, std::string::npos);
    const size_t size = std::stoul(chunked.substr(at, eol - at), nullptr, 16);
    if (size == 0) break;
    body += chunked.substr(eol + 2, size);
    ASSERT_EQ(chunked.substr(eol + 2 + size, 2), "\r\n");
    at = eol + 2 + size + 2;
  }
  EXPECT_EQ(body, std::string(200000, 'x'));

  Client c10(port());
  ASSERT_TRUE(c10.Send("GET / HTTP/1.0\r\n\r\n"));
  const std::string plain = c10.Response();
  EXPECT_THAT(plain, StartsWith("HTTP/1.0 200 OK\r\n"));
  EXPECT_THAT(plain, HasSubstr("Connection: close\r\n"));
  EXPECT_TRUE(absl::EndsWith(plain, "\r\n\r\n" + std::string(200000, 'x')));
}

TEST_F(HttpServerTest, WhatIsNotAGetOrHeadIsRefusedNamingWhy) {
  StartEcho();
  struct Case {
    std::string request;
    std::string status_line;
    std::string says;
  };
  const Case cases[] = {
      {"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n",
       "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\n", "POST is not served"},
      {"GET /metrics HTTP/2.0\r\n\r\n", "HTTP/1.1 505 ", "HTTP/1.0 and HTTP/1.1 only"},
      // A TLS ClientHello's first bytes: refused without waiting for more.
      {std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11), "HTTP/1.1 400 ",
       "not an HTTP request line"},
      {"GET\t/ HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "not an HTTP request line"},
      {"GET metrics HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "not a path"},
      {"GET /a%zz HTTP/1.1\r\n\r\n", "HTTP/1.1 400 ", "%-escape"},
      {"GET / HTTP/1.1\r\nHost x\r\n\r\n", "HTTP/1.1 400 ", "malformed header"},
      {"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", "HTTP/1.1 400 ", "malformed header"},
      {"GET / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "HTTP/1.1 400 ",
       "Content-Length"},
      {"GET / HTTP/1.1\r\nContent-Length: 999999\r\n\r\n", "HTTP/1.1 413 ", "body this large"},
      {"GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", "HTTP/1.1 501 ",
       "Transfer-Encoding"},
      {"GET / HTTP/1.1\r\nX: " + std::string(20000, 'a') + "\r\n\r\n", "HTTP/1.1 431 ",
       "over 16384 bytes"},
  };
  for (const Case& test : cases) {
    Client c(port());
    ASSERT_TRUE(c.Send(test.request));
    const std::string response = c.Response();
    EXPECT_THAT(response, StartsWith(test.status_line)) << test.request.substr(0, 60);
    EXPECT_THAT(response, HasSubstr(test.says)) << test.request.substr(0, 60);
    EXPECT_TRUE(c.ClosedWithin(std::chrono::seconds(10)));
  }
  EXPECT_TRUE(Eventually([&] { return counters_.bad_requests.load() == std::size(cases); }));
}

TEST_F(HttpServerTest, ABodyIsReadAndDroppedBeforeTheAnswer) {
  StartEcho();
  Client c(port());
  ASSERT_TRUE(c.Send("GET /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel"));
  ASSERT_TRUE(c.Send("loGET /b HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(absl::EndsWith(c.Response(), "GET /a?"));
  EXPECT_TRUE(absl::EndsWith(c.Response(), "GET /b?"));
}

TEST_F(HttpServerTest, QueryValuesAreDecodedInOrder) {
  IncomingHttpRequest request;
  request.query = "stat=train.%2A&label=rank%3D0&label=job=a+b&empty=&long=" + std::string(5000, 'x');
  EXPECT_EQ(request.Query("stat"), "train.*");
  EXPECT_EQ(request.Query("label"), "rank=0");
  EXPECT_EQ(request.Query("label", 1), "job=a b");
  EXPECT_EQ(request.Query("label", 2), "");
  EXPECT_EQ(request.Query("empty"), "");
  EXPECT_EQ(request.Query("missing"), "");
  EXPECT_EQ(request.Query("long"), "");
  request.headers = {{"accept", "text/plain"}};
  ASSERT_NE(request.Header("Accept"), nullptr);
  EXPECT_EQ(*request.Header("ACCEPT"), "text/plain");
  EXPECT_EQ(request.Header("Accept-Encoding"), nullptr);
}

TEST_F(HttpServerTest, HundredsOfIdleAndHalfSentConnectionsDoNotDelayARequest) {
  StartEcho();
  std::vector<std::unique_ptr<Client>> idle;
  for (int i = 0; i < 300; ++i) {
    // From 127.0.0.2..4: three addresses, 100 each, under every bound.
    idle.push_back(std::make_unique<Client>(port(), i % 3 == 0   ? "127.0.0.2"
                                                    : i % 3 == 1 ? "127.0.0.3"
                                                                 : "127.0.0.4"));
    ASSERT_TRUE(idle.back()->connected());
    if (i % 2 == 0) {
      ASSERT_TRUE(idle.back()->Send("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
    }
  }
  ASSERT_TRUE(Eventually([&] { return counters_.open.load() == 300; }));
  for (int i = 0; i < 20; ++i) {
    Client c(port());
    ASSERT_TRUE(c.Send("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
    EXPECT_TRUE(absl::EndsWith(c.Response(), "GET /metrics?")) << i;
  }
  EXPECT_EQ(counters_.evicted.load(), 0u);
  EXPECT_EQ(counters_.timed_out.load(), 0u);
}

TEST_F(HttpServerTest, ARequestNotWholeInTimeAndAnIdleKeepAliveAreClosed) {
  HttpLimits limits;
  limits.request_timeout = absl::Milliseconds(300);
  limits.idle_timeout = absl::Milliseconds(600);
  StartEcho(limits);
  Client silent(port());
  Client half(port());
  ASSERT_TRUE(half.Send("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  Client kept(port());
  ASSERT_TRUE(kept.Send("GET /a HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(absl::EndsWith(kept.Response(), "GET /a?"));
  EXPECT_TRUE(silent.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(half.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(kept.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_TRUE(Eventually([&] { return counters_.timed_out.load() == 3; }));
  EXPECT_TRUE(Eventually([&] { return counters_.open.load() == 0; }));
}

TEST_F(HttpServerTest, AByteASecondDoesNotKeepARequestAlive) {
  HttpLimits limits;
  limits.request_timeout = absl::Milliseconds(500);
  StartEcho(limits);
  Client drip(port());
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\n\r\n";
  bool closed = false;
  // One byte every 100 ms: each arrives well within any per-read timeout.
  for (size_t i = 0; i < request.size() + 50 && !closed; ++i) {
    drip.Send(i < request.size() ? request.substr(i, 1) : "x");
    closed = drip.ClosedWithin(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(closed);
  EXPECT_TRUE(Eventually([&] { return counters_.timed_out.load() == 1; }));
}

TEST_F(HttpServerTest, PastTheBoundPerAddressTheOldestWaitingConnectionMakesRoom) {
  HttpLimits limits;
  limits.max_per_address = 4;
  StartEcho(limits);
  std::vector<std::unique_ptr<Client>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<Client>(port(), "127.0.0.5"));
    ASSERT_TRUE(Eventually([&] { return counters_.open.load() == i + 1; }));
  }
  // Another address is not affected.
  Client other(port(), "127.0.0.6");
  ASSERT_TRUE(Eventually([&] { return counters_.open.load() == 5; }));
  Client scrape(port(), "127.0.0.5");
  ASSERT_TRUE(scrape.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(absl::EndsWith(scrape.Response(), "GET /metrics?"));
  EXPECT_TRUE(held[0]->ClosedWithin(std::chrono::seconds(10)));
  EXPECT_FALSE(held[1]->ClosedWithin(std::chrono::milliseconds(50)));
  EXPECT_FALSE(other.ClosedWithin(std::chrono::milliseconds(50)));
  EXPECT_EQ(counters_.evicted.load(), 1u);
}

TEST_F(HttpServerTest, PastTheTotalBoundTheOldestWaitingConnectionMakesRoom) {
  HttpLimits limits;
  limits.max_connections = 3;
  StartEcho(limits);
  Client a(port(), "127.0.0.7");
  ASSERT_TRUE(Eventually([&] { return counters_.open.load() == 1; }));
  Client b(port(), "127.0.0.8");
  Client c(port(), "127.0.0.9");
  ASSERT_TRUE(Eventually([&] { return counters_.open.load() == 3; }));
  Client scrape(port());
  ASSERT_TRUE(scrape.Send("GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_TRUE(absl::EndsWith(scrape.Response(), "GET /metrics?"));
  EXPECT_TRUE(a.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(counters_.evicted.load(), 1u);
  EXPECT_EQ(counters_.open.load(), 3);
}

TEST_F(HttpServerTest, WhenEveryHeldConnectionIsBeingAnsweredANewOneIsRefused) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> answering{0};
  HttpLimits limits;
  limits.max_connections = 1;
  Start(
      [&](const IncomingHttpRequest&, HttpResponseWriter& response) {
        answering.fetch_add(1);
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return release; });
        response.Send(200, "text/plain", "done");
      },
      limits);
  Client busy(port());
  ASSERT_TRUE(busy.Send("GET / HTTP/1.1\r\n\r\n"));
  ASSERT_TRUE(Eventually([&] { return answering.load() == 1; }));
  Client turned_away(port());
  EXPECT_TRUE(turned_away.ClosedWithin(std::chrono::seconds(10)));
  EXPECT_EQ(counters_.refused.load(), 1u);
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  EXPECT_TRUE(absl::EndsWith(busy.Response(), "done"));
}

TEST_F(HttpServerTest, AReaderThatStopsReadingIsCutOffAfterTheWriteTimeout) {
  HttpLimits limits;
  limits.write_timeout = absl::Milliseconds(200);
  std::atomic<bool> gave_up{false};
  Start(
      [&](const IncomingHttpRequest&, HttpResponseWriter& response) {
        response.Start(200, {}, -1);
        const std::string piece(1 << 20, 'x');
        for (int i = 0; i < 256; ++i) {
          if (!response.Write(piece)) {
            gave_up = true;
            return;
          }
        }
      },
      limits);
  Client reader(port());
  ASSERT_TRUE(reader.Send("GET / HTTP/1.1\r\n\r\n"));  // and never reads
  EXPECT_TRUE(Eventually([&] { return gave_up.load(); }));
  EXPECT_TRUE(Eventually([&] { return counters_.timed_out.load() == 1; }));
  EXPECT_TRUE(Eventually([&] { return counters_.open.load() == 0; }));
}

}  // namespace
}  // namespace torchmon::server

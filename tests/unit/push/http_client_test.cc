// The push client's choices that do not need a receiver: which proxy a URL
// goes through (the environment, as Go and curl read it) and where the
// system's CA certificates are (each distribution's layout, made here under
// a scratch root). The exchanges themselves are in exporter_test.cc and
// tests/python/test_push_http.py, against real receivers.
#include "server/push/http_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

std::map<std::string, std::string>* environment = nullptr;

const char* FakeEnv(const char* name) {
  auto it = environment->find(name);
  return it == environment->end() ? nullptr : it->second.c_str();
}

HttpUrl Url(const std::string& text) {
  absl::StatusOr<HttpUrl> url = ParseHttpUrl(text);
  EXPECT_TRUE(url.ok()) << url.status();
  return url.ok() ? *url : HttpUrl();
}

class ProxyForTest : public ::testing::Test {
 protected:
  void SetUp() override { environment = &env_; }
  void TearDown() override { environment = nullptr; }
  std::string For(const std::string& url) { return ProxyFor(Url(url), FakeEnv); }
  std::map<std::string, std::string> env_;
};

TEST_F(ProxyForTest, EachSchemeHasItsOwnVariableUpperCaseFirst) {
  EXPECT_EQ(For("https://prom.example:9090/api/v1/write"), "");
  env_["HTTPS_PROXY"] = "http://proxy.example:3128";
  env_["http_proxy"] = "plain.example:8080";
  EXPECT_EQ(For("https://prom.example:9090/api/v1/write"), "http://proxy.example:3128");
  // A proxy without a scheme is an HTTP proxy, as curl and Go take it.
  EXPECT_EQ(For("http://prom.example:9090/api/v1/write"), "http://plain.example:8080");
  env_["https_proxy"] = "http://lower.example:1";
  EXPECT_EQ(For("https://prom.example/"), "http://proxy.example:3128");
  env_.erase("HTTPS_PROXY");
  EXPECT_EQ(For("https://prom.example/"), "http://lower.example:1");
  // HTTP_PROXY counts (torchmond is no CGI program, where it would be a
  // request's header).
  env_["HTTP_PROXY"] = "http://upper.example:2";
  EXPECT_EQ(For("http://prom.example/"), "http://upper.example:2");
}

TEST_F(ProxyForTest, NoProxyAndLoopbackGoDirect) {
  env_["HTTPS_PROXY"] = "http://proxy.example:3128";
  env_["NO_PROXY"] = "internal.example, .corp.example,10.0.0.0/8, [fd00::1]:9090, other:443";
  EXPECT_EQ(For("https://internal.example/"), "");
  EXPECT_EQ(For("https://a.internal.example/"), "");  // a domain covers its subdomains
  EXPECT_EQ(For("https://corp.example/"), "");
  EXPECT_EQ(For("https://x.corp.example/"), "");
  EXPECT_EQ(For("https://notcorp.example/"), "http://proxy.example:3128");
  EXPECT_EQ(For("https://10.2.3.4:9090/"), "");
  EXPECT_EQ(For("https://11.2.3.4:9090/"), "http://proxy.example:3128");
  EXPECT_EQ(For("https://[fd00::1]:9090/"), "");
  EXPECT_EQ(For("https://[fd00::1]:9091/"), "http://proxy.example:3128");
  EXPECT_EQ(For("https://other:443/"), "");
  EXPECT_EQ(For("https://other:8443/"), "http://proxy.example:3128");
  EXPECT_EQ(For("https://localhost:9090/"), "");
  EXPECT_EQ(For("https://127.0.0.1:9090/"), "");
  EXPECT_EQ(For("https://[::1]:9090/"), "");
  env_["no_proxy"] = "*";
  env_.erase("NO_PROXY");
  EXPECT_EQ(For("https://anything.example/"), "");
}

class SystemCaFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("torchmon-cas-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_);
    ::unsetenv("SSL_CERT_FILE");
    ::unsetenv("SSL_CERT_DIR");
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  void Make(const std::string& path) {
    std::filesystem::create_directories((root_ / path.substr(1)).parent_path());
    std::ofstream(root_ / path.substr(1)) << "-----BEGIN CERTIFICATE-----\n";
  }
  void MakeDir(const std::string& path) { std::filesystem::create_directories(root_ / path.substr(1)); }
  std::string At(const std::string& path) { return root_.string() + path; }
  std::filesystem::path root_;
};

TEST_F(SystemCaFilesTest, DebianAndUbuntuKeepABundleAndAHashedDirectory) {
  Make("/etc/ssl/certs/ca-certificates.crt");
  const CaLocations found = SystemCaFiles(root_.string());
  EXPECT_EQ(found.file, At("/etc/ssl/certs/ca-certificates.crt"));
  EXPECT_EQ(found.dir, At("/etc/ssl/certs"));
}

TEST_F(SystemCaFilesTest, RhelRockyAndAlmaKeepTheirsUnderPki) {
  // RHEL 8's layout: no /etc/ssl/cert.pem, no hashed /etc/ssl/certs.
  Make("/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem");
  MakeDir("/etc/pki/tls/certs");
  Make("/etc/pki/tls/certs/ca-bundle.crt");
  const CaLocations found = SystemCaFiles(root_.string());
  EXPECT_EQ(found.file, At("/etc/pki/tls/certs/ca-bundle.crt"));
  EXPECT_EQ(found.dir, At("/etc/pki/tls/certs"));
}

TEST_F(SystemCaFilesTest, SuseAndAlpineToo) {
  Make("/etc/ssl/ca-bundle.pem");
  EXPECT_EQ(SystemCaFiles(root_.string()).file, At("/etc/ssl/ca-bundle.pem"));
  std::filesystem::remove_all(root_ / "etc");
  Make("/etc/ssl/cert.pem");
  EXPECT_EQ(SystemCaFiles(root_.string()).file, At("/etc/ssl/cert.pem"));
}

TEST_F(SystemCaFilesTest, SslCertFileAndDirOverrideTheSearch) {
  Make("/etc/ssl/certs/ca-certificates.crt");
  ::setenv("SSL_CERT_FILE", "/opt/site/ca.pem", 1);
  EXPECT_EQ(SystemCaFiles(root_.string()).file, "/opt/site/ca.pem");
  ::unsetenv("SSL_CERT_FILE");
  MakeDir("/opt/certs");
  ::setenv("SSL_CERT_DIR", ("/missing-torchmon:" + At("/opt/certs")).c_str(), 1);
  const CaLocations found = SystemCaFiles(root_.string());
  EXPECT_EQ(found.dir, At("/opt/certs"));
  EXPECT_EQ(found.file, "");
  ::unsetenv("SSL_CERT_DIR");
}

TEST_F(SystemCaFilesTest, NothingFoundIsNothing) {
  const CaLocations found = SystemCaFiles(root_.string());
  EXPECT_EQ(found.file, "");
  EXPECT_EQ(found.dir, "");
}

// --- Exchanges with receivers that speak HTTP as real ones do ---------------

// A receiver on 127.0.0.1 whose every connection is handed, in turn, to
// `serve` (on the receiver's thread); counts the connections it accepted.
class RawReceiver {
 public:
  explicit RawReceiver(std::function<void(int)> serve) : serve_(std::move(serve)) {
    std::signal(SIGPIPE, SIG_IGN);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    ::listen(fd_, 16);
    socklen_t len = sizeof(sa);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] {
      while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 50) <= 0) continue;
        const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (conn < 0) continue;
        accepted_.fetch_add(1);
        serve_(conn);
        ::close(conn);
      }
    });
  }
  ~RawReceiver() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
  }
  PushEndpoint Endpoint(const std::string& options = "") const {
    auto endpoint = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                                      absl::StrCat("http://127.0.0.1:", port_, "/write ", options));
    EXPECT_TRUE(endpoint.ok()) << endpoint.status();
    return *endpoint;
  }
  int accepted() const { return accepted_.load(); }

 private:
  std::function<void(int)> serve_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::thread thread_;
};

// Reads up to the end of a request head; false if the peer closed first.
// `rest` gets what came after it.
bool ReadHead(int fd, std::string* head, std::string* rest) {
  std::string in = *rest;
  rest->clear();
  while (in.find("\r\n\r\n") == std::string::npos) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) return false;
    char buffer[65536];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return false;
    in.append(buffer, static_cast<size_t>(n));
  }
  const size_t end = in.find("\r\n\r\n") + 4;
  *head = in.substr(0, end);
  *rest = in.substr(end);
  return true;
}

size_t ContentLength(const std::string& head) {
  const size_t at = head.find("Content-Length: ");
  size_t n = 0;
  if (at != std::string::npos) {
    (void)absl::SimpleAtoi(head.substr(at + 16, head.find("\r\n", at) - at - 16), &n);
  }
  return n;
}

// Reads and drops `n` body bytes, `rest` first; at most `limit`.
void Drain(int fd, std::string* rest, size_t n, size_t limit = SIZE_MAX) {
  size_t taken = std::min(rest->size(), n);
  rest->erase(0, taken);
  while (taken < std::min(n, limit)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 10'000) <= 0) return;
    char buffer[65536];
    const ssize_t got = ::recv(fd, buffer, std::min(sizeof(buffer), n - taken), 0);
    if (got <= 0) return;
    taken += static_cast<size_t>(got);
  }
}

void Send(int fd, const std::string& text) {
  (void)::send(fd, text.data(), text.size(), MSG_NOSIGNAL);
}

const HttpRequest kSmall{"application/x-protobuf", {}, "body", -1};

TEST(HttpSessionTest, A100ContinueIsSkippedAndTheFinalAnswerCounts) {
  RawReceiver receiver([](int fd) {
    std::string head, rest;
    if (!ReadHead(fd, &head, &rest)) return;
    // A 1xx with a header of its own, which must not be taken as the answer's.
    Send(fd, "HTTP/1.1 100 Continue\r\nRetry-After: 99\r\n\r\n");
    Drain(fd, &rest, ContentLength(head));
    Send(fd, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 3\r\nContent-Length: 0\r\n\r\n");
  });
  HttpSession session;
  auto answer = session.Post(receiver.Endpoint(), kSmall);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 429);
  EXPECT_EQ(answer->retry_after, "3");
}

// A receiver that refuses a request by its headers answers before the body
// is in, reads a little of it, and closes as Go's net/http does past 256
// KiB: a FIN, then half a second for the client to read the answer
// (closeWriteAndWait's rstAvoidanceDelay) before the close, which resets a
// connection whose upload is still coming. The answer is what counts, not
// the broken upload. (Closed at once, the reset can reach the client before
// it has read the answer, which the kernel then discards: one CI run on a
// loaded machine saw "Send failure: Broken pipe".)
TEST(HttpSessionTest, AnEarlyFinalAnswerDuringTheUploadIsHonoured) {
  RawReceiver receiver([](int fd) {
    std::string head, rest;
    if (!ReadHead(fd, &head, &rest)) return;
    Send(fd, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 9\r\nConnection: close\r\n\r\n"
             "too big\r\n");
    Drain(fd, &rest, ContentLength(head), 256 * 1024);
    ::shutdown(fd, SHUT_WR);
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  });
  const std::string big(64 << 20, 'x');
  HttpSession session;
  auto answer = session.Post(receiver.Endpoint(), HttpRequest{"application/x-protobuf", {}, big, -1});
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->status, 413);
  EXPECT_EQ(answer->body, "too big\r\n");
}

TEST(HttpSessionTest, OneConnectionCarriesEveryRequestWhileTheReceiverKeepsIt) {
  std::atomic<int> served{0};
  RawReceiver receiver([&](int fd) {
    std::string head, rest;
    while (ReadHead(fd, &head, &rest)) {
      Drain(fd, &rest, ContentLength(head));
      served.fetch_add(1);
      Send(fd, "HTTP/1.1 204 No Content\r\n\r\n");
    }
  });
  HttpSession session;
  for (int i = 0; i < 5; ++i) {
    auto answer = session.Post(receiver.Endpoint(), kSmall);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 204);
  }
  EXPECT_EQ(served.load(), 5);
  EXPECT_EQ(receiver.accepted(), 1);
  EXPECT_EQ(session.connections(), 1);
}

TEST(HttpSessionTest, AConnectionTheReceiverClosedIsOpenedAgain) {
  RawReceiver receiver([](int fd) {
    std::string head, rest;
    if (!ReadHead(fd, &head, &rest)) return;
    Drain(fd, &rest, ContentLength(head));
    Send(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    // Closed right after, as a receiver's idle timeout would.
  });
  HttpSession session;
  for (int i = 0; i < 3; ++i) {
    auto answer = session.Post(receiver.Endpoint(), kSmall);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->status, 200);
  }
  EXPECT_EQ(receiver.accepted(), 3);
  EXPECT_EQ(session.connections(), 3);
}

// A receiver that reads a request and never answers, until released.
class SilentReceiver {
 public:
  SilentReceiver()
      : receiver_([this](int fd) {
          std::string head, rest;
          (void)ReadHead(fd, &head, &rest);
          while (!release_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }) {}
  ~SilentReceiver() { release_ = true; }
  PushEndpoint Endpoint(const std::string& options) const { return receiver_.Endpoint(options); }

 private:
  std::atomic<bool> release_{false};
  RawReceiver receiver_;
};

TEST(HttpSessionTest, ACancelEndsAnExchangeAtOnce) {
  SilentReceiver receiver;
  const int cancel = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  std::thread canceller([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const uint64_t one = 1;
    (void)::write(cancel, &one, sizeof(one));
  });
  HttpSession session;
  // A minute to answer: only the cancel can end it in time for the test.
  auto answer = session.Post(receiver.Endpoint("timeout=60s"),
                             HttpRequest{"application/x-protobuf", {}, "body", cancel});
  canceller.join();
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(std::string(answer.status().message()), ::testing::HasSubstr("stopping"));
  ::close(cancel);
}

TEST(HttpSessionTest, NoAnswerWithinTheTimeoutSaysSo) {
  SilentReceiver receiver;
  HttpSession session;
  auto answer = session.Post(receiver.Endpoint("timeout=300ms"), kSmall);
  ASSERT_FALSE(answer.ok());
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(answer.status().message()), ::testing::HasSubstr("timed out after 300 ms"));
}

}  // namespace
}  // namespace torchmon::server

// A real HTTP/1.1 server on 127.0.0.1 (port 0), plain or TLS, that answers
// each request with the next of a script of answers (the last one repeats)
// and keeps every request it read: what the push tests send to, in place of
// a receiver that misbehaves on cue (400, 429 with Retry-After, 500). One
// connection at a time, on a thread of its own; stops in its destructor.
#ifndef TORCHMON_TESTS_UNIT_PUSH_SCRIPTED_HTTP_SERVER_H_
#define TORCHMON_TESTS_UNIT_PUSH_SCRIPTED_HTTP_SERVER_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/ssl.h>

#include <atomic>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torchmon::testing {

struct ScriptedAnswer {
  int status = 200;
  std::string retry_after;  // sent as Retry-After when not empty
  std::string body;
};

struct ReceivedRequest {
  std::string head;  // request line and headers
  std::string body;
  // The value of header `name` (case-insensitive), "" if absent.
  std::string Header(absl::string_view name) const {
    for (absl::string_view line : absl::StrSplit(head, "\r\n")) {
      const size_t colon = line.find(':');
      if (colon != absl::string_view::npos &&
          absl::EqualsIgnoreCase(line.substr(0, colon), name)) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
    return "";
  }
};

class ScriptedHttpServer {
 public:
  // `tls`: an SSL_CTX with the server's certificate (and client
  // verification, if wanted); the server takes a reference.
  // `port` 0: one the kernel picks; another: that one (a receiver that
  // comes back where it was).
  explicit ScriptedHttpServer(std::vector<ScriptedAnswer> script, SSL_CTX* tls = nullptr,
                              int port = 0)
      : script_(std::move(script)), tls_(tls) {
    // A client that gives up mid-handshake makes a write fail (EPIPE), not
    // the test process end.
    std::signal(SIGPIPE, SIG_IGN);
    if (tls_ != nullptr) SSL_CTX_up_ref(tls_);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    const int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(fd_, 16);
    socklen_t len = sizeof(addr);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedHttpServer() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
    if (tls_ != nullptr) SSL_CTX_free(tls_);
  }

  int port() const { return port_; }
  std::string url(absl::string_view path = "/api/v1/write") const {
    return absl::StrCat(tls_ != nullptr ? "https" : "http", "://127.0.0.1:", port_, path);
  }

  std::vector<ReceivedRequest> requests() const {
    absl::MutexLock lock(&mu_);
    return requests_;
  }
  // Waits (up to `timeout`) until `n` requests were read (each is kept
  // before it is answered).
  bool AwaitRequests(size_t n, absl::Duration timeout = absl::Seconds(20)) const {
    absl::MutexLock lock(&mu_);
    auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return requests_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), timeout);
  }

 private:
  void Serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) <= 0) continue;
      const int conn = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (conn < 0) continue;
      timeval tv{5, 0};
      ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      SSL* ssl = nullptr;
      if (tls_ != nullptr) {
        ssl = SSL_new(tls_);
        SSL_set_fd(ssl, conn);
        if (SSL_accept(ssl) != 1) {
          SSL_free(ssl);
          ::close(conn);
          absl::MutexLock lock(&mu_);
          ++handshakes_failed_;
          continue;
        }
      }
      auto read = [&](char* buf, size_t n) -> ssize_t {
        return ssl != nullptr ? SSL_read(ssl, buf, static_cast<int>(n)) : ::recv(conn, buf, n, 0);
      };
      auto write = [&](const std::string& s) {
        if (ssl != nullptr) {
          SSL_write(ssl, s.data(), static_cast<int>(s.size()));
        } else {
          ::send(conn, s.data(), s.size(), MSG_NOSIGNAL);
        }
      };
      std::string raw;
      char buf[65536];
      size_t head_end = std::string::npos;
      size_t length = 0;
      for (;;) {
        const ssize_t n = read(buf, sizeof(buf));
        if (n <= 0) break;
        raw.append(buf, static_cast<size_t>(n));
        if (head_end == std::string::npos) {
          head_end = raw.find("\r\n\r\n");
          if (head_end == std::string::npos) continue;
          ReceivedRequest probe{raw.substr(0, head_end), ""};
          if (!absl::SimpleAtoi(probe.Header("Content-Length"), &length)) length = 0;
        }
        if (raw.size() >= head_end + 4 + length) break;
      }
      if (head_end != std::string::npos) {
        // Kept before it is answered: once its sender has the answer, a
        // test may look, and must find it.
        ScriptedAnswer answer;
        {
          absl::MutexLock lock(&mu_);
          answer = script_[std::min(requests_.size(), script_.size() - 1)];
          requests_.push_back(ReceivedRequest{raw.substr(0, head_end), raw.substr(head_end + 4)});
        }
        std::string out = absl::StrCat("HTTP/1.1 ", answer.status, " Scripted\r\nContent-Length: ",
                                       answer.body.size(), "\r\nConnection: close\r\n");
        if (!answer.retry_after.empty()) absl::StrAppend(&out, "Retry-After: ", answer.retry_after, "\r\n");
        absl::StrAppend(&out, "\r\n", answer.body);
        write(out);
      }
      if (ssl != nullptr) {
        SSL_shutdown(ssl);
        SSL_free(ssl);
      }
      ::close(conn);
    }
  }

  const std::vector<ScriptedAnswer> script_;
  SSL_CTX* tls_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::vector<ReceivedRequest> requests_ ABSL_GUARDED_BY(mu_);
  int handshakes_failed_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_UNIT_PUSH_SCRIPTED_HTTP_SERVER_H_

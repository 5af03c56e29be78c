#include "server/push/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

#ifndef TORCHMON_VERSION
#define TORCHMON_VERSION "dev"
#endif

namespace torchmon::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string OpenSslErrors() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

// The first line of a credential file, without its line end.
absl::StatusOr<std::string> ReadSecret(const std::string& path, absl::string_view what) {
  std::ifstream in(path);
  if (!in) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot read the ", what, " file ", path, ": ", std::strerror(errno)));
  }
  std::string line;
  std::getline(in, line);
  line = std::string(absl::StripTrailingAsciiWhitespace(line));
  if (line.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("the ", what, " file ", path, " is empty"));
  }
  return line;
}

struct FdCloser {
  void operator()(int* fd) const {
    if (*fd >= 0) ::close(*fd);
    delete fd;
  }
};
struct SslCtxFree {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
struct SslFree {
  void operator()(SSL* s) const { SSL_free(s); }
};

// When an exchange must end: at `at`, or as soon as `cancel_fd` (if ≥ 0)
// is readable.
struct Deadline {
  Clock::time_point at;
  int cancel_fd = -1;
};

int MsLeft(const Deadline& deadline) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline.at - Clock::now()).count();
  return left <= 0 ? 0 : static_cast<int>(left);
}

// Waits until `fd` is ready for `events`, the deadline passes or the
// exchange is cancelled.
absl::Status WaitFor(int fd, short events, const Deadline& deadline, absl::string_view doing) {
  for (;;) {
    pollfd p[2] = {{fd, events, 0}, {deadline.cancel_fd, POLLIN, 0}};
    const int left = MsLeft(deadline);
    if (left == 0) return absl::DeadlineExceededError(absl::StrCat("timed out ", doing));
    const int n = ::poll(p, deadline.cancel_fd >= 0 ? 2 : 1, left);
    if (n > 0 && deadline.cancel_fd >= 0 && p[1].revents != 0) {
      return absl::CancelledError(absl::StrCat("cut short ", doing, ": the daemon is stopping"));
    }
    if (n > 0) return absl::OkStatus();
    if (n == 0) return absl::DeadlineExceededError(absl::StrCat("timed out ", doing));
    if (errno != EINTR) return absl::UnavailableError(absl::StrCat(doing, ": ", std::strerror(errno)));
  }
}

// A connected, non-blocking TCP socket to url.host:url.port.
absl::StatusOr<int> Connect(const HttpUrl& url, const Deadline& deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = absl::StrCat(url.port);
  if (int rc = ::getaddrinfo(url.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", url.host, ": ", ::gai_strerror(rc)));
  }
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> list(found, ::freeaddrinfo);
  std::string errors;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    std::unique_ptr<int, FdCloser> owned(new int(fd));
    int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      absl::Status waited = WaitFor(fd, POLLOUT, deadline, "connecting");
      if (!waited.ok()) return waited;
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      *owned = -1;
      return fd;
    }
    absl::StrAppend(&errors, errors.empty() ? "" : "; ", std::strerror(errno));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot connect to ", url.host, ":", url.port, ": ", errors));
}

// Bytes in and out of one connection, plain or TLS, within a deadline.
class Connection {
 public:
  Connection(int fd, SSL* ssl) : fd_(fd), ssl_(ssl) {}

  absl::Status WriteAll(absl::string_view data, const Deadline& deadline) {
    while (!data.empty()) {
      ssize_t n;
      if (ssl_ != nullptr) {
        ERR_clear_error();
        const int r = SSL_write(ssl_, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
        if (r <= 0) {
          absl::Status s = Retry(SSL_get_error(ssl_, r), deadline, "sending");
          if (!s.ok()) return s;
          continue;
        }
        n = r;
      } else {
        n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return absl::UnavailableError(absl::StrCat("sending: ", std::strerror(errno)));
          }
          absl::Status s = WaitFor(fd_, POLLOUT, deadline, "sending");
          if (!s.ok()) return s;
          continue;
        }
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  // Up to `size` bytes into `buf`; 0 at the end of the stream.
  absl::StatusOr<size_t> Read(char* buf, size_t size, const Deadline& deadline) {
    for (;;) {
      if (ssl_ != nullptr) {
        ERR_clear_error();
        const int r = SSL_read(ssl_, buf, static_cast<int>(size));
        if (r > 0) return static_cast<size_t>(r);
        const int err = SSL_get_error(ssl_, r);
        if (err == SSL_ERROR_ZERO_RETURN) return 0;
        // A peer that closes without close_notify: the body ends there
        // (HTTP/1.1 with Connection: close).
        if (err == SSL_ERROR_SYSCALL || (err == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_error()) ==
                                                                     SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
          return 0;
        }
        absl::Status s = Retry(err, deadline, "reading the answer");
        if (!s.ok()) return s;
        continue;
      }
      const ssize_t n = ::recv(fd_, buf, size, 0);
      if (n >= 0) return static_cast<size_t>(n);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return absl::UnavailableError(absl::StrCat("reading the answer: ", std::strerror(errno)));
      }
      absl::Status s = WaitFor(fd_, POLLIN, deadline, "waiting for the answer");
      if (!s.ok()) return s;
    }
  }

  // After an SSL call returned `err`: waits for the socket if that is what
  // it needs, or says what failed.
  absl::Status Retry(int err, const Deadline& deadline, absl::string_view doing) {
    if (err == SSL_ERROR_WANT_READ) return WaitFor(fd_, POLLIN, deadline, doing);
    if (err == SSL_ERROR_WANT_WRITE) return WaitFor(fd_, POLLOUT, deadline, doing);
    if (err == SSL_ERROR_SYSCALL && errno != 0) {
      return absl::UnavailableError(absl::StrCat(doing, ": ", std::strerror(errno)));
    }
    return absl::UnavailableError(absl::StrCat(doing, ": ", OpenSslErrors()));
  }

 private:
  int fd_;
  SSL* ssl_;
};

// A TLS client context for `e`: its CA (or the system's), its client
// certificate, TLS 1.2 at least.
absl::StatusOr<std::unique_ptr<SSL_CTX, SslCtxFree>> ClientContext(const PushEndpoint& e) {
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(SSL_CTX_new(TLS_client_method()));
  if (ctx == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslErrors());
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_2_VERSION);
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  const int loaded = e.ca_file.empty()
                         ? SSL_CTX_set_default_verify_paths(ctx.get())
                         : SSL_CTX_load_verify_locations(ctx.get(), e.ca_file.c_str(), nullptr);
  if (loaded != 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load the CA certificates ", e.ca_file.empty() ? "of the system" : e.ca_file, ": ",
        OpenSslErrors()));
  }
  if (!e.cert_file.empty()) {
    if (SSL_CTX_use_certificate_chain_file(ctx.get(), e.cert_file.c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx.get(), e.key_file.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(ctx.get()) != 1) {
      return absl::FailedPreconditionError(absl::StrCat("cannot use the client certificate ",
                                                        e.cert_file, " with key ", e.key_file,
                                                        ": ", OpenSslErrors()));
    }
  }
  return ctx;
}

absl::StatusOr<std::unique_ptr<SSL, SslFree>> Handshake(SSL_CTX* ctx, int fd, const PushEndpoint& e,
                                                        const Deadline& deadline) {
  std::unique_ptr<SSL, SslFree> ssl(SSL_new(ctx));
  if (ssl == nullptr) return absl::InternalError("SSL_new: " + OpenSslErrors());
  SSL_set_fd(ssl.get(), fd);
  const std::string& name = e.server_name.empty() ? e.url.host : e.server_name;
  // An address is verified against the certificate's IP entries, a name
  // against its DNS entries (and sent as SNI).
  unsigned char ip[16];
  const bool is_ip = inet_pton(AF_INET, name.c_str(), ip) == 1 || inet_pton(AF_INET6, name.c_str(), ip) == 1;
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl.get());
  if (is_ip) {
    X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str());
  } else {
    SSL_set_tlsext_host_name(ssl.get(), name.c_str());
    X509_VERIFY_PARAM_set1_host(param, name.c_str(), 0);
  }
  Connection conn(fd, ssl.get());
  for (;;) {
    ERR_clear_error();
    const int r = SSL_connect(ssl.get());
    if (r == 1) return ssl;
    const int err = SSL_get_error(ssl.get(), r);
    if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) {
      absl::Status s = conn.Retry(err, deadline, "in the TLS handshake");
      if (!s.ok()) return s;
      continue;
    }
    const long verify = SSL_get_verify_result(ssl.get());
    if (verify != X509_V_OK) {
      return absl::UnavailableError(absl::StrCat("TLS handshake: the server's certificate for ", name,
                                                 " does not verify: ",
                                                 X509_verify_cert_error_string(verify)));
    }
    return conn.Retry(err, deadline, "in the TLS handshake");
  }
}

// Parses the status line and headers of `head` (up to the blank line).
absl::Status ParseHead(absl::string_view head, HttpResponse& response, int64_t& content_length,
                       bool& chunked) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  std::vector<absl::string_view> status = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status.size() < 2 || !absl::StartsWith(status[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status[1], &response.status) || response.status < 100 ||
      response.status > 599) {
    return absl::UnavailableError(absl::StrCat("the answer is not HTTP/1.x: \"",
                                               absl::CEscape(lines[0].substr(0, 80)), "\""));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    const std::string name = absl::AsciiStrToLower(lines[i].substr(0, colon));
    const absl::string_view value = absl::StripAsciiWhitespace(lines[i].substr(colon + 1));
    if (name == "retry-after") response.retry_after = std::string(value);
    if (name == "content-length" && !absl::SimpleAtoi(value, &content_length)) content_length = -1;
    if (name == "transfer-encoding" && absl::StrContains(absl::AsciiStrToLower(value), "chunked")) chunked = true;
  }
  return absl::OkStatus();
}

// The body of a chunked answer, as far as it is complete in `raw`.
std::string Dechunk(absl::string_view raw) {
  std::string out;
  for (;;) {
    const size_t eol = raw.find("\r\n");
    if (eol == absl::string_view::npos) break;
    uint64_t size = 0;
    const absl::string_view size_text = raw.substr(0, raw.substr(0, eol).find(';'));
    if (!absl::SimpleHexAtoi(absl::StripAsciiWhitespace(size_text), &size) || size == 0) break;
    raw.remove_prefix(eol + 2);
    if (raw.size() < size) {
      out.append(raw.data(), raw.size());
      break;
    }
    out.append(raw.data(), size);
    raw.remove_prefix(std::min<size_t>(raw.size(), size + 2));
  }
  return out;
}

}  // namespace

absl::StatusOr<HttpResponse> HttpPost(const PushEndpoint& endpoint, const HttpRequest& request) {
  const Deadline deadline{Clock::now() + std::chrono::milliseconds(endpoint.timeout_ms),
                          request.cancel_fd};
  const HttpUrl& url = endpoint.url;
  std::string authorization;
  if (!endpoint.bearer_token_file.empty()) {
    auto token = ReadSecret(endpoint.bearer_token_file, "bearer token");
    if (!token.ok()) return token.status();
    authorization = "Bearer " + *token;
  } else if (!endpoint.basic_auth_username.empty()) {
    auto password = ReadSecret(endpoint.basic_auth_password_file, "basic auth password");
    if (!password.ok()) return password.status();
    authorization =
        "Basic " + absl::Base64Escape(absl::StrCat(endpoint.basic_auth_username, ":", *password));
  }
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx;
  if (url.tls) {
    auto made = ClientContext(endpoint);
    if (!made.ok()) return made.status();
    ctx = *std::move(made);
  }

  auto fd = Connect(url, deadline);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<int, FdCloser> owned(new int(*fd));
  std::unique_ptr<SSL, SslFree> ssl;
  if (url.tls) {
    auto shaken = Handshake(ctx.get(), *fd, endpoint, deadline);
    if (!shaken.ok()) return shaken.status();
    ssl = *std::move(shaken);
  }
  Connection conn(*fd, ssl.get());

  const bool v6 = url.host.find(':') != std::string::npos;
  const bool default_port = url.port == (url.tls ? 443 : 80);
  std::string head = absl::StrCat("POST ", url.path, " HTTP/1.1\r\nHost: ", v6 ? "[" : "", url.host,
                                  v6 ? "]" : "", default_port ? "" : absl::StrCat(":", url.port),
                                  "\r\nUser-Agent: torchmond/", TORCHMON_VERSION,
                                  "\r\nContent-Type: ", request.content_type,
                                  "\r\nContent-Length: ", request.body.size(),
                                  "\r\nConnection: close\r\n");
  if (!authorization.empty()) absl::StrAppend(&head, "Authorization: ", authorization, "\r\n");
  for (const auto& [name, value] : request.headers) absl::StrAppend(&head, name, ": ", value, "\r\n");
  head += "\r\n";
  if (absl::Status s = conn.WriteAll(head, deadline); !s.ok()) return s;
  if (absl::Status s = conn.WriteAll(request.body, deadline); !s.ok()) return s;

  // The answer: its head, then as much of its body as is kept.
  std::string raw;
  HttpResponse response;
  int64_t content_length = -1;
  bool chunked = false;
  size_t body_at = std::string::npos;
  char buf[16 * 1024];
  for (;;) {
    auto n = conn.Read(buf, sizeof(buf), deadline);
    if (!n.ok()) {
      // An answer whose head arrived is an answer, even cut short.
      if (body_at != std::string::npos) break;
      return n.status();
    }
    if (*n == 0) break;
    if (raw.size() < HttpResponse::kMaxKeptBody + 16 * 1024) raw.append(buf, *n);
    if (body_at == std::string::npos) {
      const size_t end = raw.find("\r\n\r\n");
      if (end == std::string::npos) {
        if (raw.size() > 64 * 1024) return absl::UnavailableError("the answer's headers never end");
        continue;
      }
      if (absl::Status s = ParseHead(absl::string_view(raw).substr(0, end), response,
                                     content_length, chunked);
          !s.ok()) {
        return s;
      }
      body_at = end + 4;
    }
    const size_t have = raw.size() - body_at;
    if (content_length >= 0 && have >= static_cast<size_t>(content_length)) break;
    if (chunked && absl::EndsWith(raw, "0\r\n\r\n")) break;
    if (have >= HttpResponse::kMaxKeptBody && !chunked && content_length < 0) break;
  }
  if (body_at == std::string::npos) {
    return absl::UnavailableError(
        raw.empty() ? "the connection closed without an answer" : "the answer ended in its headers");
  }
  absl::string_view body = absl::string_view(raw).substr(body_at);
  if (content_length >= 0) body = body.substr(0, static_cast<size_t>(content_length));
  response.body = chunked ? Dechunk(body) : std::string(body);
  if (response.body.size() > HttpResponse::kMaxKeptBody) response.body.resize(HttpResponse::kMaxKeptBody);
  return response;
}

}  // namespace torchmon::server

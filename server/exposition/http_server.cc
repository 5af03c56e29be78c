#include "server/exposition/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::server {
namespace {

// A body a GET or HEAD may carry, read and thrown away.
constexpr size_t kMaxBodyBytes = 64 * 1024;
// Response bytes gathered before a send (one chunk each when chunked).
constexpr size_t kFlushBytes = 64 * 1024;

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX decoded, and '+' as a space when `plus_is_space`; false for a '%'
// not followed by two hex digits.
bool PercentDecode(absl::string_view in, bool plus_is_space, std::string* out) {
  out->clear();
  out->reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%') {
      if (i + 2 >= in.size()) return false;
      const int hi = HexDigit(in[i + 1]);
      const int lo = HexDigit(in[i + 2]);
      if (hi < 0 || lo < 0) return false;
      out->push_back(static_cast<char>(hi * 16 + lo));
      i += 2;
    } else if (plus_is_space && in[i] == '+') {
      out->push_back(' ');
    } else {
      out->push_back(in[i]);
    }
  }
  return true;
}

const char* Reason(int status) {
  switch (status) {
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 413: return "Content Too Large";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "";
  }
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 32 || u >= 127 || std::strchr("\"(),/:;<=>?@[\\]{}", c) != nullptr) return false;
  }
  return true;
}

void SetNonBlocking(int fd, bool on) {
  const int flags = fcntl(fd, F_GETFL, 0);
  fcntl(fd, F_SETFL, on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK));
}

}  // namespace

const std::string* IncomingHttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) return &value;
  }
  return nullptr;
}

std::string IncomingHttpRequest::Query(absl::string_view name, int occurrence) const {
  for (absl::string_view pair : absl::StrSplit(query, '&')) {
    const size_t eq = pair.find('=');
    const absl::string_view key = pair.substr(0, eq);
    std::string decoded_key;
    if (!PercentDecode(key, true, &decoded_key) || decoded_key != name) continue;
    if (occurrence-- > 0) continue;
    std::string value;
    if (eq == absl::string_view::npos || !PercentDecode(pair.substr(eq + 1), true, &value) ||
        value.size() > 4096) {
      return "";
    }
    return value;
  }
  return "";
}

// --- Connections ---

struct HttpServer::Connection {
  enum class State { kHandshake, kHead, kBody, kAnswering };

  int fd = -1;
  SSL* ssl = nullptr;
  std::string address;  // "127.0.0.1"
  std::string bucket;   // AddressBucket(address)
  State state = State::kHead;
  std::string in;  // read, not yet consumed
  size_t body_left = 0;
  bool want_write = false;  // TLS needs the socket writable to go on
  bool idle = true;         // no byte of the next request yet
  absl::Time since;         // when it started waiting (eviction: oldest first)
  absl::Time deadline;
  IncomingHttpRequest request;
  bool close_after = false;  // set by the worker: do not keep alive
  bool send_timed_out = false;  // a worker's send made no progress in time

  ~Connection() {
    if (ssl != nullptr) SSL_free(ssl);
    if (fd >= 0) close(fd);
  }

  // Reads what is there; 1: read some, 0: nothing now, -1: closed or failed.
  int Read() {
    char buffer[16384];
    int got = 0;
    while (true) {
      if (ssl != nullptr) {
        ERR_clear_error();
        const int n = SSL_read(ssl, buffer, sizeof(buffer));
        if (n > 0) {
          in.append(buffer, static_cast<size_t>(n));
          got = 1;
          if (in.size() > 1024 * 1024) return got;  // a bound for one pass
          continue;
        }
        const int error = SSL_get_error(ssl, n);
        if (error == SSL_ERROR_WANT_READ) {
          want_write = false;
          return got;
        }
        if (error == SSL_ERROR_WANT_WRITE) {
          want_write = true;
          return got;
        }
        return got == 1 ? 1 : -1;
      }
      const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
      if (n > 0) {
        in.append(buffer, static_cast<size_t>(n));
        got = 1;
        if (in.size() > 1024 * 1024) return got;
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return got;
      return got == 1 ? 1 : -1;  // EOF or error: what was read still counts once
    }
  }

  // Sends all of `data` on a blocking socket (the worker's), false if the
  // peer is gone or made no progress for the send timeout.
  bool SendAll(absl::string_view data) {
    while (!data.empty()) {
      if (ssl != nullptr) {
        ERR_clear_error();
        const int n =
            SSL_write(ssl, data.data(), static_cast<int>(std::min<size_t>(data.size(), 1 << 30)));
        if (n <= 0) {
          send_timed_out = errno == EAGAIN || errno == EWOULDBLOCK;
          return false;
        }
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        send_timed_out = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        return false;
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // A short answer sent from the loop, best effort (a non-blocking send of
  // a few hundred bytes fits any socket buffer); the connection then closes.
  // `extra_headers`: whole header lines ("Allow: GET, HEAD\r\n"), or none.
  void SendErrorNow(int status, absl::string_view message, absl::string_view extra_headers) {
    const std::string text = absl::StrCat(
        "HTTP/1.1 ", status, " ", Reason(status), "\r\n", extra_headers,
        "Content-Type: text/plain; charset=utf-8\r\nConnection: close\r\nContent-Length: ",
        message.size(), "\r\n\r\n", message);
    if (ssl != nullptr) {
      ERR_clear_error();
      SSL_write(ssl, text.data(), static_cast<int>(text.size()));
    } else {
      [[maybe_unused]] ssize_t n = send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
  }
};

struct HttpResponseWriter::Sink {
  HttpServer::Connection* connection;
};

bool HttpResponseWriter::Start(int status, const Headers& headers, int64_t content_length) {
  if (started_ || failed_) return !failed_;
  started_ = true;
  out_ = absl::StrCat("HTTP/1.", http10_ ? "0" : "1", " ", status, " ", Reason(status), "\r\n");
  for (const auto& [name, value] : headers) absl::StrAppend(&out_, name, ": ", value, "\r\n");
  if (content_length >= 0) {
    absl::StrAppend(&out_, "Content-Length: ", content_length, "\r\n");
  } else if (!http10_) {
    chunked_ = true;
    out_ += "Transfer-Encoding: chunked\r\n";
  } else {
    keep_alive_ = false;  // the body ends with the connection
  }
  if (http10_) keep_alive_ = false;
  out_ += keep_alive_ ? "\r\n" : "Connection: close\r\n\r\n";
  return true;
}

bool HttpResponseWriter::Write(absl::string_view data) {
  if (failed_) return false;
  if (!started_) Start(200, {}, -1);
  if (head_only_ || data.empty()) return true;
  // Chunked: one chunk per flush, its size line put in front then.
  if (chunked_ && chunk_start_ == std::string::npos) chunk_start_ = out_.size();
  out_.append(data.data(), data.size());
  if (out_.size() >= kFlushBytes) return Flush();
  return true;
}

bool HttpResponseWriter::Flush() {
  if (failed_) return false;
  if (chunked_ && chunk_start_ != std::string::npos) {
    const size_t length = out_.size() - chunk_start_;
    out_.insert(chunk_start_, absl::StrCat(absl::Hex(length), "\r\n"));
    out_ += "\r\n";
    chunk_start_ = std::string::npos;
  }
  if (!out_.empty() && !sink_->connection->SendAll(out_)) failed_ = true;
  out_.clear();
  return !failed_;
}

bool HttpResponseWriter::Finish() {
  if (!started_) Send(500, "text/plain; charset=utf-8", "torchmond: no answer\n");
  if (failed_) return false;
  if (chunked_ && !head_only_) {
    Flush();
    out_ += "0\r\n\r\n";
  }
  return Flush();
}

bool HttpResponseWriter::Send(int status, absl::string_view content_type, absl::string_view body,
                        Headers extra) {
  extra.emplace_back("Content-Type", std::string(content_type));
  extra.emplace_back("Cache-Control", "no-store");
  if (!Start(status, extra, static_cast<int64_t>(body.size()))) return false;
  return Write(body);
}

}  // namespace torchmon::server

namespace torchmon::server {

// --- The event loop and the workers ---

class HttpServer::Loop {
 public:
  Loop(int listen_fd, Handler handler, TlsContext tls, HttpLimits limits, HttpCounters* counters)
      : listen_fd_(listen_fd),
        handler_(std::move(handler)),
        tls_(std::move(tls)),
        limits_(limits),
        counters_(*counters) {
    epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event event = {};
    event.events = EPOLLIN;
    event.data.fd = listen_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &event);
    event.data.fd = wake_fd_;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &event);
    for (int i = 0; i < std::max(1, limits_.workers); ++i) {
      workers_.emplace_back([this] { Work(); });
    }
    thread_ = std::thread([this] { Run(); });
  }

  ~Loop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    Wake();
    thread_.join();
    work_cv_.notify_all();
    for (std::thread& worker : workers_) worker.join();
    // Returned by the workers after the loop ended: closed with the rest.
    done_.clear();
    counters_.open.fetch_sub(static_cast<int64_t>(connections_.size()), std::memory_order_relaxed);
    connections_.clear();
    close(listen_fd_);
    close(wake_fd_);
    close(epoll_fd_);
  }

 private:
  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
  }

  void Run() {
    epoll_event events[64];
    absl::Time last_expiry = absl::Now();
    while (true) {
      const int n = epoll_wait(epoll_fd_, events, 64, 250);
      for (int i = 0; i < n; ++i) {
        const int fd = events[i].data.fd;
        if (fd == wake_fd_) {
          uint64_t count;
          [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
          {
            std::lock_guard<std::mutex> lock(mu_);
            if (stopping_) return;
          }
          TakeBack();
        } else if (fd == listen_fd_) {
          Accept();
        } else if (auto it = connections_.find(fd); it != connections_.end()) {
          Connection* c = it->second.get();
          if (c->state != Connection::State::kAnswering) Progress(c);
        }
      }
      const absl::Time now = absl::Now();
      if (now - last_expiry >= absl::Milliseconds(250)) {
        Expire(now);
        last_expiry = now;
      }
    }
  }

  void Accept() {
    while (true) {
      sockaddr_storage peer = {};
      socklen_t length = sizeof(peer);
      const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        return;  // EAGAIN; or EMFILE and the like: the next readiness retries
      }
      counters_.accepted.fetch_add(1, std::memory_order_relaxed);
      char text[INET6_ADDRSTRLEN] = "";
      if (peer.ss_family == AF_INET) {
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&peer)->sin_addr, text, sizeof(text));
      } else if (peer.ss_family == AF_INET6) {
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&peer)->sin6_addr, text, sizeof(text));
      }
      auto c = std::make_unique<Connection>();
      c->fd = fd;
      c->address = text;
      c->bucket = AddressBucket(c->address);
      if ((per_bucket_[c->bucket] >= limits_.max_per_address && !MakeRoom(&c->bucket)) ||
          (connections_.size() >= limits_.max_connections && !MakeRoom(nullptr))) {
        counters_.refused.fetch_add(1, std::memory_order_relaxed);
        if (per_bucket_[c->bucket] == 0) per_bucket_.erase(c->bucket);
        continue;  // c's destructor closes it
      }
      const int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      const absl::Time now = absl::Now();
      c->since = now;
      c->deadline = now + limits_.request_timeout;  // the handshake counts
      c->idle = false;
      if (SSL_CTX* context = tls_ ? tls_() : nullptr; context != nullptr) {
        c->ssl = SSL_new(context);
        if (c->ssl == nullptr) continue;
        SSL_set_fd(c->ssl, fd);
        SSL_set_accept_state(c->ssl);
        c->state = Connection::State::kHandshake;
      }
      ++per_bucket_[c->bucket];
      counters_.open.fetch_add(1, std::memory_order_relaxed);
      Connection* raw = c.get();
      connections_.emplace(fd, std::move(c));
      Watch(raw, EPOLL_CTL_ADD);
    }
  }

  // Closes the oldest waiting connection, of `bucket` if given; false if
  // every one is being answered.
  bool MakeRoom(const std::string* bucket) {
    Connection* oldest = nullptr;
    for (const auto& [fd, c] : connections_) {
      if (c->state == Connection::State::kAnswering) continue;
      if (bucket != nullptr && c->bucket != *bucket) continue;
      if (oldest == nullptr || c->since < oldest->since) oldest = c.get();
    }
    if (oldest == nullptr) return false;
    counters_.evicted.fetch_add(1, std::memory_order_relaxed);
    Close(oldest);
    return true;
  }

  void Watch(Connection* c, int op) {
    epoll_event event = {};
    event.events = EPOLLIN;
    if (c->want_write) event.events |= EPOLLOUT;
    event.data.fd = c->fd;
    epoll_ctl(epoll_fd_, op, c->fd, &event);
  }

  void Close(Connection* c) {
    auto bucket = per_bucket_.find(c->bucket);
    if (bucket != per_bucket_.end() && --bucket->second == 0) per_bucket_.erase(bucket);
    counters_.open.fetch_sub(1, std::memory_order_relaxed);
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    connections_.erase(c->fd);  // closes it
  }

  void Expire(absl::Time now) {
    std::vector<Connection*> late;
    for (const auto& [fd, c] : connections_) {
      if (c->state != Connection::State::kAnswering && c->deadline < now) late.push_back(c.get());
    }
    for (Connection* c : late) {
      counters_.timed_out.fetch_add(1, std::memory_order_relaxed);
      Close(c);
    }
  }

  // The connection is readable (or writable, for TLS): go as far as it can.
  void Progress(Connection* c) {
    if (c->state == Connection::State::kHandshake) {
      ERR_clear_error();
      const int r = SSL_do_handshake(c->ssl);
      if (r != 1) {
        const int error = SSL_get_error(c->ssl, r);
        if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
          const bool want_write = error == SSL_ERROR_WANT_WRITE;
          if (want_write != c->want_write) {
            c->want_write = want_write;
            Watch(c, EPOLL_CTL_MOD);
          }
          return;
        }
        Close(c);  // refused or broken: HttpsContext counts the refusals
        return;
      }
      c->state = Connection::State::kHead;
      if (c->want_write) {
        c->want_write = false;
        Watch(c, EPOLL_CTL_MOD);
      }
    }
    const bool wanted_write = c->want_write;
    const int read = c->Read();
    if (read < 0) {
      Close(c);
      return;
    }
    if (c->want_write != wanted_write) Watch(c, EPOLL_CTL_MOD);
    if (read > 0) Parse(c);
  }

  // Takes what `in` holds of the request; hands a whole one to a worker.
  void Parse(Connection* c) {
    if (c->state == Connection::State::kHead) {
      // Blank lines before a request line are allowed (RFC 9112 2.2).
      const size_t text = c->in.find_first_not_of("\r\n");
      c->in.erase(0, text == std::string::npos ? c->in.size() : text);
      if (c->in.empty()) return;
      if (c->idle) {
        // The first byte of a request on a kept-alive connection.
        c->idle = false;
        c->deadline = absl::Now() + limits_.request_timeout;
      }
      // Not waiting for the rest of what cannot be HTTP (a TLS ClientHello
      // to the plain port): the method is a token up to the first space.
      const size_t space = c->in.find(' ');
      if (!IsToken(absl::string_view(c->in).substr(0, std::min(space, c->in.size()))) ||
          space == 0) {
        Refuse(c, 400, "torchmond: not an HTTP request line\n");
        return;
      }
      const size_t end = c->in.find("\r\n\r\n");
      if ((end == std::string::npos && c->in.size() > limits_.max_head_bytes) ||
          (end != std::string::npos && end + 4 > limits_.max_head_bytes)) {
        Refuse(c, 431, absl::StrCat("torchmond: a request head over ", limits_.max_head_bytes,
                                        " bytes\n"));
        return;
      }
      if (end == std::string::npos) return;
      if (!ParseHead(c, absl::string_view(c->in).substr(0, end))) return;
      c->in.erase(0, end + 4);
      c->state = Connection::State::kBody;
    }
    if (c->state == Connection::State::kBody) {
      const size_t take = std::min(c->body_left, c->in.size());
      c->in.erase(0, take);
      c->body_left -= take;
      if (c->body_left > 0) return;
      Dispatch(c);
    }
  }

  // A 4xx answered from here, then the connection closed.
  void Refuse(Connection* c, int status, absl::string_view message,
              absl::string_view extra_headers = {}) {
    counters_.bad_requests.fetch_add(1, std::memory_order_relaxed);
    c->SendErrorNow(status, message, extra_headers);
    // What the peer sent past the request is read away first: a close
    // with unread input resets the connection, and the reset can reach
    // the peer before the answer does.
    shutdown(c->fd, SHUT_WR);
    char sink[16384];
    while (recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0) {
    }
    Close(c);
  }

  bool ParseHead(Connection* c, absl::string_view head) {
    std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
    const std::vector<absl::string_view> start = absl::StrSplit(lines[0], ' ');
    if (start.size() != 3 || !IsToken(start[0]) || start[1].empty()) {
      Refuse(c, 400, "torchmond: not an HTTP request line\n");
      return false;
    }
    IncomingHttpRequest& request = c->request;
    request = IncomingHttpRequest();
    request.remote_address = c->address;
    request.method = std::string(start[0]);
    if (start[2] == "HTTP/1.1") {
      request.minor_version = 1;
    } else if (start[2] == "HTTP/1.0") {
      request.minor_version = 0;
    } else if (absl::StartsWith(start[2], "HTTP/")) {
      Refuse(c, 505, "torchmond: HTTP/1.0 and HTTP/1.1 only\n");
      return false;
    } else {
      Refuse(c, 400, "torchmond: not an HTTP request line\n");
      return false;
    }
    absl::string_view target = start[1];
    // The absolute form (a proxy's): its path.
    if (absl::ConsumePrefix(&target, "http://") || absl::ConsumePrefix(&target, "https://")) {
      const size_t slash = target.find_first_of("/?");
      target = slash == absl::string_view::npos ? "/" : target.substr(slash);
    }
    if (target.empty() || target[0] != '/') {
      Refuse(c, 400, "torchmond: the request target is not a path\n");
      return false;
    }
    const size_t question = target.find('?');
    if (!PercentDecode(target.substr(0, question), false, &request.path)) {
      Refuse(c, 400, "torchmond: a bad %-escape in the path\n");
      return false;
    }
    if (question != absl::string_view::npos) request.query = std::string(target.substr(question + 1));
    constexpr size_t kMaxHeaders = 100;
    if (lines.size() - 1 > kMaxHeaders) {
      Refuse(c, 431, absl::StrCat("torchmond: more than ", kMaxHeaders, " header fields\n"));
      return false;
    }
    std::optional<size_t> content_length;
    for (size_t i = 1; i < lines.size(); ++i) {
      const absl::string_view line = lines[i];
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
        // A line folded onto the previous one is refused too (RFC 9112 5.2).
        Refuse(c, 400, "torchmond: a malformed header field\n");
        return false;
      }
      std::string name = absl::AsciiStrToLower(line.substr(0, colon));
      const absl::string_view value = absl::StripTrailingAsciiWhitespace(
          absl::StripLeadingAsciiWhitespace(line.substr(colon + 1)));
      if (name == "content-length") {
        size_t length = 0;
        if (!absl::SimpleAtoi(value, &length) || value.empty() || !absl::ascii_isdigit(value[0]) ||
            (content_length.has_value() && *content_length != length)) {
          Refuse(c, 400, "torchmond: a bad Content-Length\n");
          return false;
        }
        content_length = length;
      } else if (name == "transfer-encoding") {
        Refuse(c, 501, "torchmond: a request body in Transfer-Encoding is not accepted\n");
        return false;
      }
      request.headers.emplace_back(std::move(name), std::string(value));
    }
    if (request.method != "GET" && request.method != "HEAD") {
      Refuse(c, 405, absl::StrCat("torchmond: ", request.method, " is not served\n"),
             "Allow: GET, HEAD\r\n");
      return false;
    }
    if (content_length.value_or(0) > kMaxBodyBytes) {
      Refuse(c, 413, "torchmond: a GET or HEAD has no use for a body this large\n");
      return false;
    }
    c->body_left = content_length.value_or(0);
    c->close_after = request.minor_version == 0;
    if (const std::string* connection = request.Header("connection"); connection != nullptr) {
      for (absl::string_view option : absl::StrSplit(*connection, ',')) {
        if (absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(option), "close")) {
          c->close_after = true;
        }
      }
    }
    return true;
  }

  void Dispatch(Connection* c) {
    c->state = Connection::State::kAnswering;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      work_.push_back(c);
    }
    work_cv_.notify_one();
  }

  // Connections the workers answered: kept alive, or closed.
  void TakeBack() {
    std::deque<Connection*> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      done.swap(done_);
    }
    const absl::Time now = absl::Now();
    for (Connection* c : done) {
      if (c->close_after) {
        Close(c);
        continue;
      }
      c->state = Connection::State::kHead;
      c->idle = true;
      c->since = now;
      c->deadline = now + limits_.idle_timeout;
      c->want_write = false;
      Watch(c, EPOLL_CTL_ADD);
      if (!c->in.empty()) Parse(c);  // a pipelined request
    }
  }

  void Work() {
    while (true) {
      Connection* c = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu_);
        work_cv_.wait(lock, [this] { return stopping_ || !work_.empty(); });
        if (work_.empty()) return;  // stopping, nothing left to answer
        c = work_.front();
        work_.pop_front();
      }
      Answer(c);
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_.push_back(c);
      }
      Wake();
    }
  }

  void Answer(Connection* c) {
    SetNonBlocking(c->fd, false);
    const absl::Duration timeout = limits_.write_timeout;
    timeval tv = absl::ToTimeval(timeout);
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    // A TLS write may have to read (a key update): bounded the same way.
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    HttpResponseWriter::Sink sink{c};
    HttpResponseWriter response(&sink, c->request.method == "HEAD", c->request.minor_version == 0,
                          c->close_after);
    handler_(c->request, response);
    const bool sent = response.Finish();
    if (!sent && c->send_timed_out) {
      counters_.timed_out.fetch_add(1, std::memory_order_relaxed);
    }
    c->close_after = !sent || !response.keep_alive_;
    SetNonBlocking(c->fd, true);
  }

  const int listen_fd_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  const Handler handler_;
  const TlsContext tls_;
  const HttpLimits limits_;
  HttpCounters& counters_;

  // The loop thread's alone.
  absl::flat_hash_map<int, std::unique_ptr<Connection>> connections_;
  absl::flat_hash_map<std::string, size_t> per_bucket_;

  std::mutex mu_;
  std::condition_variable work_cv_;
  bool stopping_ = false;          // guarded by mu_
  std::deque<Connection*> work_;   // guarded by mu_: whole requests to answer
  std::deque<Connection*> done_;   // guarded by mu_: answered, back to the loop

  std::vector<std::thread> workers_;
  std::thread thread_;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                              Handler handler, TlsContext tls,
                                                              HttpLimits limits,
                                                              HttpCounters* counters) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("\"", address, "\" is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  if (const int error = getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                                    &found);
      error != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve on ", address, ": ", gai_strerror(error)));
  }
  int fd = -1;
  std::string failure;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, SOMAXCONN) != 0) {
      failure = std::strerror(errno);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve on ", address, ": ", failure));
  }
  sockaddr_storage bound = {};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  std::unique_ptr<HttpServer> server(new HttpServer());
  server->port_ = ntohs(bound.ss_family == AF_INET6
                            ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                            : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  server->loop_ =
      std::make_unique<Loop>(fd, std::move(handler), std::move(tls), limits, counters);
  return server;
}

HttpServer::~HttpServer() = default;

}  // namespace torchmon::server

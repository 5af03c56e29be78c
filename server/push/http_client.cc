#include "server/push/http_client.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

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

bool IsFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsDir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// "host" or "[v6]" as a URL writes it.
std::string UrlHost(const std::string& host) {
  return host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host;
}

bool IsLoopback(absl::string_view host) {
  if (absl::EqualsIgnoreCase(host, "localhost") ||
      absl::EndsWithIgnoreCase(host, ".localhost")) {
    return true;
  }
  in_addr v4;
  in6_addr v6;
  const std::string text(host);
  if (inet_pton(AF_INET, text.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  return inet_pton(AF_INET6, text.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

// Whether `host` (an address) lies in `cidr` ("10.0.0.0/8", "fd00::/8").
bool InCidr(const std::string& host, absl::string_view cidr) {
  const size_t slash = cidr.find('/');
  int bits = 0;
  if (slash == absl::string_view::npos || !absl::SimpleAtoi(cidr.substr(slash + 1), &bits)) {
    return false;
  }
  const std::string network(cidr.substr(0, slash));
  unsigned char a[16], b[16];
  int length = 0;
  if (inet_pton(AF_INET, host.c_str(), a) == 1 && inet_pton(AF_INET, network.c_str(), b) == 1) {
    length = 4;
  } else if (inet_pton(AF_INET6, host.c_str(), a) == 1 &&
             inet_pton(AF_INET6, network.c_str(), b) == 1) {
    length = 16;
  } else {
    return false;
  }
  if (bits < 0 || bits > length * 8) return false;
  for (int i = 0; i < length; ++i) {
    const int keep = std::min(8, std::max(0, bits - 8 * i));
    const unsigned mask = keep == 0 ? 0u : (0xffu << (8 - keep)) & 0xffu;
    if ((a[i] & mask) != (b[i] & mask)) return false;
  }
  return true;
}

// NO_PROXY's rules, as Go's net/http reads them.
bool Bypassed(const HttpUrl& url, absl::string_view no_proxy) {
  const std::string host = absl::AsciiStrToLower(url.host);
  for (absl::string_view entry : absl::StrSplit(no_proxy, ',', absl::SkipWhitespace())) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry == "*") return true;
    std::string name = absl::AsciiStrToLower(entry);
    if (InCidr(host, name)) return true;
    // "host:port" matches that port only; "[v6]:port" and "[v6]" too.
    int port = 0;
    if (const size_t colon = name.rfind(':');
        colon != std::string::npos && name.find(':') == colon &&
        absl::SimpleAtoi(name.substr(colon + 1), &port)) {
      if (port != url.port) continue;
      name.resize(colon);
    } else if (absl::StartsWith(name, "[")) {
      const size_t close = name.find(']');
      if (close == std::string::npos) continue;
      if (close + 1 < name.size() &&
          (!absl::SimpleAtoi(name.substr(close + 2), &port) || port != url.port)) {
        continue;
      }
      name = name.substr(1, close - 1);
    }
    absl::string_view domain = name;
    absl::ConsumePrefix(&domain, "*");
    absl::ConsumePrefix(&domain, ".");
    if (domain.empty()) continue;
    // The domain itself, with or without the leading dot, and its subdomains.
    if (host == domain) return true;
    if (host.size() > domain.size() && absl::EndsWith(host, domain) &&
        host[host.size() - domain.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

std::once_flag curl_initialized;

// What a transfer read of the answer.
struct Received {
  HttpResponse response;
};

size_t OnBody(char* data, size_t size, size_t count, void* user) {
  auto* received = static_cast<Received*>(user);
  const size_t n = size * count;
  std::string& body = received->response.body;
  if (body.size() < HttpResponse::kMaxKeptBody) {
    body.append(data, std::min(n, HttpResponse::kMaxKeptBody - body.size()));
  }
  return n;
}

size_t OnHeader(char* data, size_t size, size_t count, void* user) {
  auto* received = static_cast<Received*>(user);
  const size_t n = size * count;
  absl::string_view line(data, n);
  if (absl::StartsWith(line, "HTTP/")) {
    // A new answer (after a 1xx, or a proxy's CONNECT answer): only the
    // final one's headers count.
    received->response.retry_after.clear();
    received->response.body.clear();
    return n;
  }
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos &&
      absl::EqualsIgnoreCase(absl::StripAsciiWhitespace(line.substr(0, colon)), "retry-after")) {
    received->response.retry_after =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return n;
}

// The error a failed transfer means, worded as the exporters log it.
absl::Status TransferError(CURLcode code, const char* detail, const PushEndpoint& e,
                           const std::string& proxy) {
  const std::string why = detail[0] != '\0' ? detail : curl_easy_strerror(code);
  const std::string& name = e.server_name.empty() ? e.url.host : e.server_name;
  switch (code) {
    case CURLE_COULDNT_RESOLVE_HOST:
      return absl::UnavailableError(absl::StrCat("cannot resolve ", e.url.host, ": ", why));
    case CURLE_COULDNT_RESOLVE_PROXY:
      return absl::UnavailableError(absl::StrCat("cannot resolve the proxy ", proxy, ": ", why));
    case CURLE_COULDNT_CONNECT:
      return absl::UnavailableError(
          absl::StrCat(proxy.empty() ? "connecting to " : "connecting through the proxy ",
                       proxy.empty() ? absl::StrCat(UrlHost(e.url.host), ":", e.url.port) : proxy,
                       ": ", why));
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(
          absl::StrCat("timed out after ", e.timeout_ms, " ms: ", why));
    case CURLE_PEER_FAILED_VERIFICATION:
      return absl::UnavailableError(absl::StrCat(
          "TLS handshake: the server's certificate for ", name, " does not verify: ", why));
    case CURLE_SSL_CACERT_BADFILE:
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot load the CA certificates ", e.ca_file.empty() ? "of the system" : e.ca_file,
          ": ", why));
    case CURLE_SSL_CERTPROBLEM:
      return absl::FailedPreconditionError(absl::StrCat(
          "cannot use the client certificate ", e.cert_file, " with key ", e.key_file, ": ", why));
    case CURLE_SSL_CONNECT_ERROR:
      return absl::UnavailableError(absl::StrCat("TLS handshake with ", name, ": ", why));
    default:
      return absl::UnavailableError(why);
  }
}

}  // namespace

std::string ProxyFor(const HttpUrl& url, const char* (*getenv)(const char*)) {
  // The upper-case name first, then the lower-case one, as Go reads them.
  auto env = [&](const char* upper, const char* lower) -> std::string {
    for (const char* name : {upper, lower}) {
      const char* value = getenv(name);
      if (value != nullptr && value[0] != '\0') return value;
    }
    return "";
  };
  std::string proxy = url.tls ? env("HTTPS_PROXY", "https_proxy") : env("HTTP_PROXY", "http_proxy");
  if (proxy.empty() || IsLoopback(url.host) || Bypassed(url, env("NO_PROXY", "no_proxy"))) {
    return "";
  }
  if (proxy.find("://") == std::string::npos) proxy = "http://" + proxy;
  return proxy;
}

CaLocations SystemCaFiles(absl::string_view root) {
  CaLocations found;
  const char* file = std::getenv("SSL_CERT_FILE");
  const char* dirs = std::getenv("SSL_CERT_DIR");
  if (file != nullptr && file[0] != '\0') found.file = file;
  if (dirs != nullptr && dirs[0] != '\0') {
    for (absl::string_view dir : absl::StrSplit(dirs, ':', absl::SkipEmpty())) {
      if (IsDir(std::string(dir))) {
        found.dir = std::string(dir);
        break;
      }
    }
  }
  if (!found.file.empty() || !found.dir.empty()) return found;
  // Where each distribution keeps its bundle (the list Go's crypto/x509
  // looks through, in its order).
  for (const char* path : {
           "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Gentoo, Arch
           "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL 6
           "/etc/ssl/ca-bundle.pem",                             // SUSE
           "/etc/pki/tls/cacert.pem",                            // OpenELEC
           "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7+, Rocky, Alma
           "/etc/ssl/cert.pem",                                  // Alpine
       }) {
    if (IsFile(absl::StrCat(root, path))) {
      found.file = absl::StrCat(root, path);
      break;
    }
  }
  for (const char* path : {"/etc/ssl/certs", "/etc/pki/tls/certs"}) {
    if (IsDir(absl::StrCat(root, path))) {
      found.dir = absl::StrCat(root, path);
      break;
    }
  }
  return found;
}

HttpSession::HttpSession() {
  std::call_once(curl_initialized, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  curl_ = curl_easy_init();
  multi_ = curl_multi_init();
}

HttpSession::~HttpSession() {
  if (curl_ != nullptr) curl_easy_cleanup(static_cast<CURL*>(curl_));
  if (multi_ != nullptr) curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

absl::StatusOr<HttpResponse> HttpSession::Post(const PushEndpoint& endpoint,
                                               const HttpRequest& request) {
  CURL* curl = static_cast<CURL*>(curl_);
  CURLM* multi = static_cast<CURLM*>(multi_);
  if (curl == nullptr || multi == nullptr) return absl::InternalError("libcurl failed to start");
  const HttpUrl& url = endpoint.url;

  // Credentials, read now: a rotated token or password applies to the
  // next request.
  std::string authorization;
  if (!endpoint.bearer_token_file.empty()) {
    absl::StatusOr<std::string> token = ReadSecret(endpoint.bearer_token_file, "bearer token");
    if (!token.ok()) return token.status();
    authorization = "Bearer " + *token;
  } else if (!endpoint.basic_auth_username.empty()) {
    absl::StatusOr<std::string> password =
        ReadSecret(endpoint.basic_auth_password_file, "basic auth password");
    if (!password.ok()) return password.status();
    authorization = "Basic " + absl::Base64Escape(
                                   absl::StrCat(endpoint.basic_auth_username, ":", *password));
  }

  const std::string proxy = ProxyFor(url, [](const char* name) -> const char* {
    return std::getenv(name);
  });
  const bool tls = url.tls || absl::StartsWith(proxy, "https://");
  CaLocations cas;
  if (tls && !endpoint.ca_file.empty()) {
    cas.file = endpoint.ca_file;
  } else if (tls) {
    cas = SystemCaFiles();
    if (cas.file.empty() && cas.dir.empty()) {
      return absl::FailedPreconditionError(
          "cannot load the CA certificates of the system: none in any of the places "
          "distributions keep them (/etc/ssl/certs/ca-certificates.crt, "
          "/etc/pki/tls/certs/ca-bundle.crt, /etc/ssl/ca-bundle.pem, "
          "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem, /etc/ssl/cert.pem, "
          "/etc/ssl/certs/), and no SSL_CERT_FILE or SSL_CERT_DIR; give the endpoint ca_file=");
    }
  }

  curl_easy_reset(curl);  // options only: the connection and TLS session stay
  char error[CURL_ERROR_SIZE] = "";
  Received received;
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  // An exchange cut short (the timeout, a cancel) does not wait for a name
  // lookup still running on the threaded resolver (Debian's libcurl): the
  // lookup's thread is left to finish and free itself. The release build's
  // c-ares has no such thread.
  curl_easy_setopt(curl, CURLOPT_QUICK_EXIT, 1L);
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, static_cast<long>(std::max<int64_t>(1, endpoint.timeout_ms)));
  curl_easy_setopt(curl, CURLOPT_POST, 1L);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(request.body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &received);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &received);
  curl_easy_setopt(curl, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(curl, CURLOPT_USERAGENT, "torchmond/" TORCHMON_VERSION);

  // The TLS name: server_name= when given (sent as SNI and verified), with
  // the connection still made to the URL's host and Host naming it.
  std::string target = url.text;
  struct curl_slist* connect_to = nullptr;
  struct curl_slist* headers = nullptr;
  if (url.tls && !endpoint.server_name.empty() && endpoint.server_name != url.host) {
    target = absl::StrCat("https://", UrlHost(endpoint.server_name), ":", url.port, url.path);
    connect_to = curl_slist_append(
        connect_to, absl::StrCat(UrlHost(endpoint.server_name), ":", url.port, ":",
                                 UrlHost(url.host), ":", url.port)
                        .c_str());
    headers = curl_slist_append(headers,
                                absl::StrCat("Host: ", UrlHost(url.host), ":", url.port).c_str());
    curl_easy_setopt(curl, CURLOPT_CONNECT_TO, connect_to);
  }
  curl_easy_setopt(curl, CURLOPT_URL, target.c_str());

  headers = curl_slist_append(headers, absl::StrCat("Content-Type: ", request.content_type).c_str());
  for (const auto& [name, value] : request.headers) {
    headers = curl_slist_append(headers, absl::StrCat(name, ": ", value).c_str());
  }
  if (!authorization.empty()) {
    headers = curl_slist_append(headers, absl::StrCat("Authorization: ", authorization).c_str());
  }
  // The body goes at once: a receiver's early answer still stops it, and
  // none waits a second for a 100 Continue that servers may never send.
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);

  curl_easy_setopt(curl, CURLOPT_PROXY, proxy.c_str());  // "": none, whatever curl would read
  if (tls) {
    curl_easy_setopt(curl, CURLOPT_SSLVERSION, static_cast<long>(CURL_SSLVERSION_TLSv1_2));
    // Set or left unset each time: an empty CAPATH would be a path.
    if (!cas.file.empty()) {
      curl_easy_setopt(curl, CURLOPT_CAINFO, cas.file.c_str());
      curl_easy_setopt(curl, CURLOPT_PROXY_CAINFO, cas.file.c_str());
    }
    if (!cas.dir.empty()) {
      curl_easy_setopt(curl, CURLOPT_CAPATH, cas.dir.c_str());
      curl_easy_setopt(curl, CURLOPT_PROXY_CAPATH, cas.dir.c_str());
    }
    if (!endpoint.cert_file.empty()) {
      curl_easy_setopt(curl, CURLOPT_SSLCERT, endpoint.cert_file.c_str());
      curl_easy_setopt(curl, CURLOPT_SSLKEY, endpoint.key_file.c_str());
    }
  }

  // The exchange, on the multi interface so that `cancel_fd` can end it
  // at once, name lookup included.
  bool cancelled = false;
  CURLcode result = CURLE_OK;
  curl_multi_add_handle(multi, curl);
  for (;;) {
    int running = 0;
    if (curl_multi_perform(multi, &running) != CURLM_OK) break;
    if (running == 0) break;
    curl_waitfd cancel = {request.cancel_fd, CURL_WAIT_POLLIN, 0};
    const bool watch = request.cancel_fd >= 0;
    curl_multi_poll(multi, watch ? &cancel : nullptr, watch ? 1 : 0, 1000, nullptr);
    if (watch && (cancel.revents & CURL_WAIT_POLLIN) != 0) {
      cancelled = true;
      break;
    }
  }
  int left = 0;
  while (CURLMsg* message = curl_multi_info_read(multi, &left)) {
    if (message->msg == CURLMSG_DONE && message->easy_handle == curl) {
      result = message->data.result;
    }
  }
  curl_multi_remove_handle(multi, curl);
  long new_connections = 0;
  curl_easy_getinfo(curl, CURLINFO_NUM_CONNECTS, &new_connections);
  connections_ += new_connections;
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_slist_free_all(connect_to);
  // The handle keeps no pointer to what this call owned past here.
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, nullptr);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, nullptr);
  curl_easy_setopt(curl, CURLOPT_CONNECT_TO, nullptr);

  if (cancelled) {
    return absl::CancelledError("cut short: the daemon is stopping");
  }
  // An answer counts even if the exchange then failed (a receiver that
  // answered early and closed while the body was going).
  if (result != CURLE_OK && status < 200) return TransferError(result, error, endpoint, proxy);
  if (status < 200) return absl::UnavailableError("no HTTP answer");
  received.response.status = static_cast<int>(status);
  return std::move(received.response);
}

absl::StatusOr<HttpResponse> HttpPost(const PushEndpoint& endpoint, const HttpRequest& request) {
  HttpSession session;
  return session.Post(endpoint, request);
}

}  // namespace torchmon::server

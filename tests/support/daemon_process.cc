#include "tests/support/daemon_process.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "torchmon/channel.h"

namespace torchmon::testing {

std::string OwnUserLabel() {
  const passwd* user = getpwuid(geteuid());
  return user != nullptr ? std::string(user->pw_name) : absl::StrCat(geteuid());
}

std::string TorchmondPath() { return TORCHMOND_PATH; }

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const TempDir& dir, const std::vector<std::string>& extra_flags) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  d->socket_path_ = dir.path() + "/torchmond.sock";
  std::vector<std::string> args = {"--listen", "unix://" + d->socket_path_, "--listen",
                                   "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  // Tests that expect a refusal at start get it as this error; it is no
  // failure.
  absl::StatusOr<std::unique_ptr<LaunchedDaemon>> launched = LaunchedDaemon::Start(
      TorchmondPath(), args, dir.path() + "/torchmond.stderr", std::chrono::seconds(10));
  if (!launched.ok()) return launched.status();
  d->launched_ = *std::move(launched);
  d->unix_target_ = d->launched_->ready().UnixTarget();
  d->tcp_target_ = d->launched_->ready().TcpTarget();
  return d;
}

DaemonProcess::~DaemonProcess() {
  if (launched_ == nullptr || launched_->pid() <= 0) return;  // never started, or stopped
  absl::StatusOr<int> status = launched_->Stop(SIGTERM, std::chrono::seconds(10));
  if (!status.ok()) {
    ADD_FAILURE() << "torchmond did not exit within 10 s of SIGTERM; stderr:\n" << Stderr();
    return;  // ~LaunchedDaemon kills it
  }
  // A daemon that crashed, or whose sanitizer runtime found a leak or an
  // error at shutdown, fails the test that started it.
  if (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
    ADD_FAILURE() << "torchmond ended with wait status " << *status
                  << " after SIGTERM instead of exiting 0; stderr:\n" << Stderr();
  }
}

absl::StatusOr<int> DaemonProcess::Stop(int signal, std::chrono::milliseconds timeout) {
  return launched_->Stop(signal, timeout);
}

std::string DaemonProcess::Stderr() const { return launched_->Stderr(); }

void DaemonProcess::Signal(int signal) const { launched_->Signal(signal); }

std::unique_ptr<v1::Query::Stub> DaemonProcess::QueryStub() const {
  return v1::Query::NewStub(grpc::CreateChannel(unix_target_, grpc::InsecureChannelCredentials()));
}

absl::StatusOr<HttpResponse> HttpGetWithHeaders(const std::string& address, const std::string& path,
                                                const std::vector<std::string>& headers) {
  return HttpRequest(address, "GET", path, headers);
}

absl::StatusOr<HttpResponse> HttpRequest(const std::string& address, const std::string& method,
                                         const std::string& path,
                                         const std::vector<std::string>& headers) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(absl::StrCat("bad address ", address));
  }
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError("socket failed");
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to ", address, ": ", std::strerror(errno)));
  }
  std::string request = absl::StrCat(method, " ", path, " HTTP/1.0\r\nHost: ", address, "\r\n");
  for (const std::string& header : headers) absl::StrAppend(&request, header, "\r\n");
  request += "\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return absl::UnavailableError("write failed");
  }
  std::string response;
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, static_cast<size_t>(n));
  close(fd);
  const size_t body = response.find("\r\n\r\n");
  HttpResponse out;
  if (!absl::StartsWith(response, "HTTP/1.") || body == std::string::npos || response.size() < 12 ||
      !absl::SimpleAtoi(response.substr(9, 3), &out.status)) {
    return absl::UnavailableError("malformed HTTP response");
  }
  out.head = response.substr(0, body);
  out.body = response.substr(body + 4);
  return out;
}

absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path) {
  auto response = HttpGetWithHeaders(address, path, {});
  if (!response.ok()) return response.status();
  if (response->status != 200) {
    return absl::UnavailableError(
        absl::StrCat("HTTP error: ", response->head.substr(0, response->head.find("\r\n"))));
  }
  return std::move(response->body);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> SecureChannel(const std::string& target,
                                                             const ClientSecurity& security) {
  ClientOptions options;
  options.target = target;
  options.security = security;
  options.security_from_environment = false;
  return CreateDaemonChannel(options);
}

absl::StatusOr<std::unique_ptr<v1::Query::Stub>> SecureQueryStub(const std::string& target,
                                                                 const ClientSecurity& security) {
  auto channel = SecureChannel(target, security);
  if (!channel.ok()) return channel.status();
  return v1::Query::NewStub(*channel);
}

absl::StatusOr<double> ScrapeValue(const std::string& scrape, const std::string& name,
                                   const std::vector<std::string>& labels) {
  for (absl::string_view line : absl::StrSplit(scrape, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == absl::string_view::npos) continue;
    const absl::string_view metric = line.substr(0, std::min(brace, space));
    if (metric != name) continue;
    bool all = true;
    for (const std::string& l : labels) {
      // Match whole label pairs: preceded by '{' or ',' and followed by ',' or '}'.
      const bool found = absl::StrContains(line, absl::StrCat("{", l, ",")) ||
                         absl::StrContains(line, absl::StrCat("{", l, "}")) ||
                         absl::StrContains(line, absl::StrCat(",", l, ",")) ||
                         absl::StrContains(line, absl::StrCat(",", l, "}"));
      if (!found) {
        all = false;
        break;
      }
    }
    if (!all) continue;
    const std::string value(line.substr(space + 1));
    if (value == "Nan" || value == "NaN") return std::nan("");
    if (value == "+Inf") return HUGE_VAL;
    if (value == "-Inf") return -HUGE_VAL;
    double v;
    if (!absl::SimpleAtod(value, &v)) return absl::InternalError(absl::StrCat("bad value in: ", line));
    return v;
  }
  return absl::NotFoundError(absl::StrCat("no sample of ", name, " with the given labels"));
}

}  // namespace torchmon::testing

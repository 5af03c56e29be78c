#include "tests/support/daemon_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "torchmon/channel.h"

namespace torchmon::testing {

std::string TorchmondPath() { return TORCHMOND_PATH; }

TempDir::TempDir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/torchmon-test.XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) std::abort();
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

absl::StatusOr<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(
    const TempDir& dir, const std::vector<std::string>& extra_flags) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  d->socket_path_ = dir.path() + "/torchmond.sock";
  d->stderr_path_ = dir.path() + "/torchmond.stderr";
  std::vector<std::string> args = {TorchmondPath(), "--listen", "unix://" + d->socket_path_,
                                   "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int err = open(d->stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) dup2(err, STDERR_FILENO);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  d->pid_ = pid;

  // Read the ready line, bounded in time.
  std::string line;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  while (line.find('\n') == std::string::npos) {
    char buf[512];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n > 0) {
      line.append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n == 0 || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  close(out[0]);
  line = line.substr(0, line.find('\n'));
  if (!absl::StartsWith(line, "torchmond ready ")) {
    // Tests that expect a refusal at start get it here; it is no failure.
    d->expect_clean_exit_ = false;
    return absl::UnavailableError(
        absl::StrCat("torchmond did not become ready; stdout: \"", line, "\" stderr: ", d->Stderr()));
  }
  d->ready_line_ = line;
  for (absl::string_view part : absl::StrSplit(line.substr(16), ' ')) {
    if (absl::ConsumePrefix(&part, "grpc=")) {
      for (absl::string_view addr : absl::StrSplit(part, ',')) {
        if (absl::StartsWith(addr, "unix:")) {
          d->unix_target_ = std::string(addr);
        } else {
          d->tcp_target_ = std::string(addr);
        }
      }
    } else if (absl::ConsumePrefix(&part, "metrics=")) {
      d->metrics_address_ = std::string(part);
    }
  }
  return d;
}

DaemonProcess::~DaemonProcess() {
  if (pid_ <= 0) return;
  auto status = Stop(SIGTERM, std::chrono::seconds(10));
  if (!status.ok()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    ADD_FAILURE() << "torchmond did not exit within 10 s of SIGTERM; stderr:\n" << Stderr();
    return;
  }
  // A daemon that crashed, or whose sanitizer runtime found a leak or an
  // error at shutdown, fails the test that started it.
  if (expect_clean_exit_ && (!WIFEXITED(*status) || WEXITSTATUS(*status) != 0)) {
    ADD_FAILURE() << "torchmond ended with wait status " << *status
                  << " after SIGTERM instead of exiting 0; stderr:\n" << Stderr();
  }
}

absl::StatusOr<int> DaemonProcess::Stop(int signal, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("not running");
  kill(pid_, signal);
  int status = 0;
  const bool exited = WaitFor(
      [&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout);
  if (!exited) return absl::DeadlineExceededError("torchmond did not exit in time");
  pid_ = -1;
  return status;
}

std::string DaemonProcess::Stderr() const {
  std::ifstream in(stderr_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void DaemonProcess::Signal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

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

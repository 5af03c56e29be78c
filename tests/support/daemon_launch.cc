#include "tests/support/daemon_launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::testing {
namespace {

using Clock = std::chrono::steady_clock;
constexpr absl::string_view kReadyPrefix = "torchmond ready ";

// The first line `fd` yields within `timeout` (without its newline), or
// what came before EOF or the deadline.
std::string ReadFirstLine(int fd, std::chrono::milliseconds timeout) {
  std::string text;
  const Clock::time_point deadline = Clock::now() + timeout;
  while (text.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
    char buf[512];
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    text.append(buf, static_cast<size_t>(n));
  }
  return text.substr(0, text.find('\n'));
}

}  // namespace

std::string ReadyLine::UnixTarget() const {
  for (const std::string& address : grpc) {
    if (absl::StartsWith(address, "unix:")) return address;
  }
  return "";
}

std::string ReadyLine::TcpTarget() const {
  for (const std::string& address : grpc) {
    if (!absl::StartsWith(address, "unix:")) return address;
  }
  return "";
}

absl::StatusOr<ReadyLine> ParseReadyLine(absl::string_view line) {
  ReadyLine ready;
  ready.line = std::string(line);
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, kReadyPrefix)) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a ready line (no \"", kReadyPrefix, "\"): \"", line, "\""));
  }
  for (absl::string_view part : absl::StrSplit(rest, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&part, "grpc=")) {
      for (absl::string_view address : absl::StrSplit(part, ',', absl::SkipEmpty())) {
        ready.grpc.emplace_back(address);
      }
    } else if (absl::ConsumePrefix(&part, "metrics=")) {
      ready.metrics = std::string(part);
    }
  }
  if (ready.grpc.empty() || ready.metrics.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ready line without grpc= or metrics=: \"", line, "\""));
  }
  return ready;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
             std::chrono::milliseconds interval) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(interval);
  }
}

TempDir::TempDir(const std::string& prefix) {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/", prefix, ".XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) std::abort();
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

absl::StatusOr<std::unique_ptr<LaunchedDaemon>> LaunchedDaemon::Start(
    const std::string& binary, const std::vector<std::string>& args,
    const std::string& stderr_path, std::chrono::milliseconds ready_timeout) {
  std::unique_ptr<LaunchedDaemon> daemon(new LaunchedDaemon());
  daemon->stderr_path_ = stderr_path;
  std::vector<std::string> argv_strings = {binary};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::UnavailableError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) {
    close(out[0]);
    close(out[1]);
    return absl::UnavailableError("fork failed");
  }
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) dup2(err, STDERR_FILENO);
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  daemon->pid_ = pid;
  // The daemon prints nothing else on stdout: the pipe is not read again.
  const std::string line = ReadFirstLine(out[0], ready_timeout);
  close(out[0]);
  absl::StatusOr<ReadyLine> ready = ParseReadyLine(line);
  if (!ready.ok()) {
    // Reaped here, so that its stderr is complete: an exit (a refusal at
    // start) is what some tests expect. How it ended is part of the error,
    // so that a test that expected a refusal and got none says which way
    // it went: an exit of its own, or a kill because it was still running.
    const absl::StatusOr<int> ended = daemon->Stop(SIGKILL, std::chrono::seconds(5));
    std::string how;
    if (!ended.ok()) {
      how = std::string(ended.status().message());
    } else if (WIFEXITED(*ended)) {
      how = absl::StrCat("it exited with status ", WEXITSTATUS(*ended));
    } else if (WIFSIGNALED(*ended) && WTERMSIG(*ended) == SIGKILL) {
      how = "it was still running, and was killed";
    } else {
      how = absl::StrCat("it ended by signal ", WTERMSIG(*ended));
    }
    return absl::UnavailableError(absl::StrCat(binary, " did not become ready within ",
                                               ready_timeout.count(), " ms (", how,
                                               "); stdout: \"", line, "\"; stderr: ",
                                               daemon->Stderr()));
  }
  daemon->ready_ = *std::move(ready);
  return daemon;
}

LaunchedDaemon::~LaunchedDaemon() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
}

absl::StatusOr<int> LaunchedDaemon::Stop(int signal, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("torchmond is not running");
  kill(pid_, signal);
  int status = 0;
  if (!WaitFor([&] { return waitpid(pid_, &status, WNOHANG) == pid_; }, timeout,
               std::chrono::milliseconds(5))) {
    return absl::DeadlineExceededError(absl::StrCat("torchmond did not exit within ",
                                                    timeout.count(), " ms of signal ", signal));
  }
  pid_ = -1;
  return status;
}

void LaunchedDaemon::Signal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

std::string LaunchedDaemon::Stderr() const {
  std::ifstream in(stderr_path_);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace torchmon::testing

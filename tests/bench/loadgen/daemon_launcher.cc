#include "loadgen/daemon_launcher.h"

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
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace torchmon::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

bool WaitExit(pid_t pid, std::chrono::milliseconds timeout, int* status) {
  const Clock::time_point deadline = Clock::now() + timeout;
  for (;;) {
    const pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid || r < 0) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<SpawnedDaemon>> SpawnedDaemon::Start(
    const std::string& binary, const std::vector<std::string>& extra_args,
    std::chrono::milliseconds ready_timeout) {
  std::unique_ptr<SpawnedDaemon> daemon(new SpawnedDaemon());
  const char* tmp = std::getenv("TMPDIR");
  std::string dir =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/torchmon-loadgen.XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot create a temporary directory ", dir));
  }
  daemon->dir_ = dir;
  const std::string socket = dir + "/torchmond.sock";
  std::vector<std::string> args = {binary, "--listen", "unix://" + socket, "--metrics-listen",
                                   "127.0.0.1:0"};
  args.insert(args.end(), extra_args.begin(), extra_args.end());

  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::UnavailableError("pipe failed");
  const std::string stderr_path = dir + "/torchmond.stderr";
  const pid_t pid = fork();
  if (pid < 0) return absl::UnavailableError("fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (err >= 0) dup2(err, STDERR_FILENO);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(out[1]);
  daemon->pid_ = pid;

  // Read up to the first newline, bounded in time. The rest of stdout is
  // never read again: the daemon prints nothing else there.
  std::string line;
  const Clock::time_point deadline = Clock::now() + ready_timeout;
  while (line.find('\n') == std::string::npos) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) break;
    pollfd pfd{out[0], POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(left)) <= 0) continue;
    char buf[512];
    const ssize_t n = read(out[0], buf, sizeof(buf));
    if (n <= 0) break;
    line.append(buf, static_cast<size_t>(n));
  }
  close(out[0]);
  line = line.substr(0, line.find('\n'));
  absl::string_view rest = line;
  if (!absl::ConsumePrefix(&rest, "torchmond ready ")) {
    return absl::UnavailableError(absl::StrCat(binary, " did not become ready within ",
                                               ready_timeout.count(), "ms; stdout: \"", line,
                                               "\"; stderr: ", daemon->Stderr()));
  }
  for (absl::string_view part : absl::StrSplit(rest, ' ', absl::SkipEmpty())) {
    if (absl::ConsumePrefix(&part, "grpc=")) {
      for (absl::string_view addr : absl::StrSplit(part, ',')) {
        if (absl::StartsWith(addr, "unix:") && daemon->target_.empty()) {
          daemon->target_ = std::string(addr);
        }
      }
    } else if (absl::ConsumePrefix(&part, "metrics=")) {
      daemon->metrics_address_ = std::string(part);
    }
  }
  if (daemon->target_.empty()) daemon->target_ = "unix://" + socket;
  return daemon;
}

SpawnedDaemon::~SpawnedDaemon() {
  if (pid_ > 0 && !Stop(std::chrono::seconds(5)).ok()) {
    // Stop already sent SIGKILL and reaped it.
  }
  if (!dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
}

absl::StatusOr<int> SpawnedDaemon::Stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return absl::FailedPreconditionError("the daemon is not running");
  const pid_t pid = pid_;
  pid_ = -1;
  kill(pid, SIGTERM);
  int status = 0;
  if (WaitExit(pid, timeout, &status)) return status;
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return absl::DeadlineExceededError(
      absl::StrCat("torchmond did not exit within ", timeout.count(), "ms of SIGTERM; killed"));
}

std::string SpawnedDaemon::Stderr() const {
  std::ifstream in(dir_ + "/torchmond.stderr");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace torchmon::loadgen

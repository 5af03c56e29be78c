#include "tests/support/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace torchmon::testing {
namespace {

using Clock = std::chrono::steady_clock;

void CloseFd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

std::vector<char*> CStrings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::vector<std::string> CurrentEnvironment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  return env;
}

std::vector<std::string> EditEnvironment(std::vector<std::string> env,
                                         const std::vector<std::string>& remove,
                                         const std::vector<std::string>& set) {
  auto named = [](const std::string& entry, const std::string& key) {
    return absl::StartsWith(entry, absl::StrCat(key, "="));
  };
  std::vector<std::string> keys = remove;
  for (const std::string& s : set) keys.push_back(s.substr(0, s.find('=')));
  env.erase(std::remove_if(env.begin(), env.end(),
                           [&](const std::string& entry) {
                             return std::any_of(keys.begin(), keys.end(),
                                                [&](const auto& key) { return named(entry, key); });
                           }),
            env.end());
  env.insert(env.end(), set.begin(), set.end());
  return env;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv, const std::optional<std::vector<std::string>>& env) {
  if (argv.empty()) return absl::InvalidArgumentError("no program given");
  // Everything the child needs is prepared before fork: between fork and exec
  // only async-signal-safe calls are allowed (the test process has threads).
  std::vector<std::string> args = argv;
  std::vector<std::string> envs = env.has_value() ? *env : CurrentEnvironment();
  std::vector<char*> c_args = CStrings(args);
  std::vector<char*> c_envs = CStrings(envs);

  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError("pipe failed");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    const int null = open("/dev/null", O_RDONLY);
    if (null >= 0) dup2(null, STDIN_FILENO);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    // The test runner may have blocked or ignored signals; the child starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(c_args[0], c_args.data(), c_envs.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  fcntl(out[0], F_SETFL, O_NONBLOCK);
  fcntl(err[0], F_SETFL, O_NONBLOCK);
  std::unique_ptr<ChildProcess> child(new ChildProcess());
  child->pid_ = pid;
  child->out_fd_ = out[0];
  child->err_fd_ = err[0];
  return child;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  CloseFd(out_fd_);
  CloseFd(err_fd_);
}

template <typename Stop>
bool ChildProcess::Pump(Clock::time_point deadline, Stop stop) {
  for (;;) {
    if (stop() || (out_fd_ < 0 && err_fd_ < 0)) return true;
    // One pass even when the deadline has passed, to take what is buffered.
    const auto remaining =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    const int wait_ms = static_cast<int>(std::clamp<int64_t>(remaining + 1, 0, 100));
    if (poll(fds, 2, remaining > 0 ? wait_ms : 0) < 0 && errno != EINTR) return false;
    for (auto [fd, buffer] : {std::pair<int*, std::string*>{&out_fd_, &out_},
                              std::pair<int*, std::string*>{&err_fd_, &err_}}) {
      if (*fd < 0) continue;
      char buf[4096];
      for (;;) {
        const ssize_t n = read(*fd, buf, sizeof(buf));
        if (n > 0) {
          buffer->append(buf, static_cast<size_t>(n));
          continue;
        }
        if (n == 0) CloseFd(*fd);  // the write end is closed: end of output
        break;                     // n < 0: EAGAIN (nothing more now) or an error
      }
    }
    if (remaining <= 0) return stop();
  }
}

absl::StatusOr<std::string> ChildProcess::ReadLine(std::chrono::milliseconds timeout) {
  const bool got =
      Pump(Clock::now() + timeout, [&] { return out_.find('\n') != std::string::npos; });
  const size_t newline = out_.find('\n');
  if (newline == std::string::npos) {
    if (got || out_fd_ < 0) {
      return absl::OutOfRangeError(absl::StrCat("stdout ended without a line; stdout: \"", out_,
                                                "\" stderr: \"", err_, "\""));
    }
    return absl::DeadlineExceededError(absl::StrCat("no line on stdout within ", timeout.count(),
                                                    "ms; stderr so far: \"", err_, "\""));
  }
  std::string line = out_.substr(0, newline);
  out_.erase(0, newline + 1);
  return line;
}

void ChildProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

absl::StatusOr<CommandResult> ChildProcess::Wait(std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  int status = 0;
  bool exited = false;
  // Output and exit both: a child blocked writing to a full pipe never exits.
  Pump(deadline, [&] {
    if (!exited && pid_ > 0) exited = waitpid(pid_, &status, WNOHANG) == pid_;
    return exited && out_fd_ < 0 && err_fd_ < 0;
  });
  while (!exited && Clock::now() < deadline) {
    exited = waitpid(pid_, &status, WNOHANG) == pid_;
    if (!exited) usleep(1000);
  }
  if (!exited) {
    return absl::DeadlineExceededError(absl::StrCat("still running after ", timeout.count(),
                                                    "ms; stdout: \"", out_, "\" stderr: \"", err_,
                                                    "\""));
  }
  pid_ = -1;
  // Whatever is still buffered in the pipes (a grandchild may keep them open;
  // it is not waited for).
  Pump(Clock::now(), [] { return false; });
  CommandResult result;
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.term_signal = WTERMSIG(status);
  result.out = std::move(out_);
  result.err = std::move(err_);
  return result;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         std::chrono::milliseconds timeout,
                                         const std::optional<std::vector<std::string>>& env) {
  auto child = ChildProcess::Start(argv, env);
  if (!child.ok()) return child.status();
  return (*child)->Wait(timeout);
}

}  // namespace torchmon::testing

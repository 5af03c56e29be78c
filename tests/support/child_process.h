// Test support: runs a program (e.g. torchmonctl) as a child process with
// its stdout and stderr captured, for a bounded time. Every wait is bounded;
// the destructor kills and reaps a child that is still running.
#ifndef TORCHMON_TESTS_SUPPORT_CHILD_PROCESS_H_
#define TORCHMON_TESTS_SUPPORT_CHILD_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torchmon::testing {

// How a child ended and everything it wrote.
struct CommandResult {
  // The exit status if it exited, else -1.
  int exit_code = -1;
  // The signal that ended it, or 0 if it exited.
  int term_signal = 0;
  std::string out;  // stdout
  std::string err;  // stderr
};

// The environment of this process as "KEY=VALUE" strings.
std::vector<std::string> CurrentEnvironment();

// `env` without the variables named in `remove`, with `set` ("KEY=VALUE")
// added over it.
std::vector<std::string> EditEnvironment(std::vector<std::string> env,
                                         const std::vector<std::string>& remove,
                                         const std::vector<std::string>& set);

// One running child. Not thread-safe.
class ChildProcess {
 public:
  // Starts argv[0] (a path) with `argv`, stdin from /dev/null and stdout and
  // stderr captured. `env` replaces the environment; nullopt inherits it.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& argv,
      const std::optional<std::vector<std::string>>& env = std::nullopt);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // The next complete line of stdout (without its '\n'), waiting up to
  // `timeout` for it. DeadlineExceeded if none arrived in time, OutOfRange
  // if stdout ended first.
  absl::StatusOr<std::string> ReadLine(std::chrono::milliseconds timeout);

  void Signal(int signal);

  // Waits up to `timeout` for the child to exit and close its output.
  // Returns how it ended and what it wrote (stdout not yet taken by
  // ReadLine); DeadlineExceeded if it is still running.
  absl::StatusOr<CommandResult> Wait(std::chrono::milliseconds timeout);

 private:
  ChildProcess() = default;
  // Reads whatever is available until `deadline`, or until `stop()` holds.
  // Returns false on timeout.
  template <typename Stop>
  bool Pump(std::chrono::steady_clock::time_point deadline, Stop stop);

  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  std::string out_, err_;
};

// Runs `argv` to completion (≤ timeout; a child still running then is
// killed and DeadlineExceeded returned).
absl::StatusOr<CommandResult> RunCommand(
    const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
    const std::optional<std::vector<std::string>>& env = std::nullopt);

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_CHILD_PROCESS_H_

// The one way tests and benchmarks start a torchmond and read its ready
// line, and the one poll-until helper they wait with. No gRPC and no
// GoogleTest: the load generator links it before it forks its ranks.
//
// The ready line is the first line torchmond prints on stdout, once every
// listener is bound (docs/operating.md, "Logs"):
//
//   torchmond ready grpc=<addr>[,<addr>...] metrics=<host:port>
//
// each gRPC address as a client targets it ("unix:///abs/path" or
// "host:port", port 0 resolved), in the order of the --listen flags. The
// Python helpers (tests/support/torchmond.py) and the shell scripts'
// (tests/support/torchmond.sh) read it by the same rule.
#ifndef TORCHMON_TESTS_SUPPORT_DAEMON_LAUNCH_H_
#define TORCHMON_TESTS_SUPPORT_DAEMON_LAUNCH_H_

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torchmon::testing {

// A parsed ready line.
struct ReadyLine {
  std::string line;               // as printed, without the newline
  std::vector<std::string> grpc;  // the gRPC addresses, in order
  std::string metrics;            // host:port of /metrics
  // The first Unix-socket address ("unix://..."), or "" if none.
  std::string UnixTarget() const;
  // The first TCP address ("host:port"), or "" if none.
  std::string TcpTarget() const;
};

// InvalidArgument naming what is missing if `line` is not a ready line
// (prefix, a non-empty grpc= list, metrics=).
absl::StatusOr<ReadyLine> ParseReadyLine(absl::string_view line);

// Calls `condition` every `interval` until it returns true (then true) or
// `timeout` has passed (then false). It is called at least once.
bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
             std::chrono::milliseconds interval = std::chrono::milliseconds(10));

// A fresh private directory under $TMPDIR (or /tmp), removed with its
// contents by the destructor. Aborts if it cannot be made.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "torchmon-test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// One torchmond child. Not thread-safe. The destructor SIGKILLs and reaps a
// daemon still running (Stop it first to see how it ends).
class LaunchedDaemon {
 public:
  // Runs `binary` with `args`, its stderr to `stderr_path` (created or
  // truncated), and reads its ready line for at most `ready_timeout`.
  // Unavailable, naming what it printed and its stderr, if it exits or
  // stays silent first (the child is then reaped).
  static absl::StatusOr<std::unique_ptr<LaunchedDaemon>> Start(
      const std::string& binary, const std::vector<std::string>& args,
      const std::string& stderr_path, std::chrono::milliseconds ready_timeout);
  ~LaunchedDaemon();
  LaunchedDaemon(const LaunchedDaemon&) = delete;
  LaunchedDaemon& operator=(const LaunchedDaemon&) = delete;

  // The child's pid; -1 once it has been reaped.
  pid_t pid() const { return pid_; }
  const ReadyLine& ready() const { return ready_; }

  // Sends `signal` and waits at most `timeout` for the exit: its wait
  // status (waitpid), or DeadlineExceeded with the daemon still running.
  absl::StatusOr<int> Stop(int signal, std::chrono::milliseconds timeout);
  // Sends `signal` without waiting (SIGSTOP/SIGCONT to freeze it).
  void Signal(int signal) const;
  // What the daemon wrote to stderr so far.
  std::string Stderr() const;

 private:
  LaunchedDaemon() = default;
  pid_t pid_ = -1;
  std::string stderr_path_;
  ReadyLine ready_;
};

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_DAEMON_LAUNCH_H_

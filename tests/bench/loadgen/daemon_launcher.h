// Starts torchmond as a child process on a private temporary Unix socket and
// stops it again. Uses fork/exec only (no gRPC), so it may run before the
// load generator forks its rank processes.
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_DAEMON_LAUNCHER_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_DAEMON_LAUNCHER_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace torchmon::loadgen {

// One spawned daemon. Not thread-safe. The destructor stops it (SIGTERM,
// then SIGKILL after 5 s) and removes the temporary directory.
class SpawnedDaemon {
 public:
  // Runs `binary --listen unix://<tmp>/torchmond.sock --metrics-listen
  // 127.0.0.1:0 <extra_args>` and waits (at most `ready_timeout`) for its
  // "torchmond ready grpc=... metrics=..." line. Unavailable, with the
  // daemon's stderr, if it exits or stays silent.
  static absl::StatusOr<std::unique_ptr<SpawnedDaemon>> Start(
      const std::string& binary, const std::vector<std::string>& extra_args,
      std::chrono::milliseconds ready_timeout);
  ~SpawnedDaemon();
  SpawnedDaemon(const SpawnedDaemon&) = delete;
  SpawnedDaemon& operator=(const SpawnedDaemon&) = delete;

  pid_t pid() const { return pid_; }
  // The gRPC target clients use ("unix:///tmp/.../torchmond.sock").
  const std::string& target() const { return target_; }
  // host:port of its /metrics endpoint.
  const std::string& metrics_address() const { return metrics_address_; }

  // SIGTERM, then waits up to `timeout` for a clean exit. The daemon's exit
  // status as a wait status; DeadlineExceeded (and SIGKILL) if it hung.
  absl::StatusOr<int> Stop(std::chrono::milliseconds timeout);

  // What the daemon wrote to stderr so far.
  std::string Stderr() const;

 private:
  SpawnedDaemon() = default;

  pid_t pid_ = -1;
  std::string dir_;
  std::string target_;
  std::string metrics_address_;
};

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_DAEMON_LAUNCHER_H_

// Test support: runs the real torchmond binary as a child process on a
// private temp Unix socket and loopback port 0 (through LaunchedDaemon), and
// talks to it over real sockets. Every wait is bounded; the destructor
// always reaps the child.
#ifndef TORCHMON_TESTS_SUPPORT_DAEMON_PROCESS_H_
#define TORCHMON_TESTS_SUPPORT_DAEMON_PROCESS_H_

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/support/daemon_launch.h"
#include "torchmon/client.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::testing {

// Path of the torchmond binary under test (set by CMake).
std::string TorchmondPath();

// The `user` label torchmond gives the series of the tests' own clients on
// its Unix socket (--peer-labels, on unless turned off): the name of the
// user the tests run as, or its uid in decimal if it has none.
std::string OwnUserLabel();

// A torchmond for one test, started by LaunchedDaemon (daemon_launch.h).
class DaemonProcess {
 public:
  // Starts torchmond with a Unix socket in `dir`, a TCP listener on
  // 127.0.0.1:0, metrics on 127.0.0.1:0 and `extra_flags`; waits (≤ 10 s)
  // for its ready line. Unavailable, with its stderr, if it exits first (a
  // refusal at start) or stays silent.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> Start(
      const TempDir& dir, const std::vector<std::string>& extra_flags = {});
  // SIGTERM, then fails the running test (ADD_FAILURE) unless the daemon
  // exits 0 within 10 s (it is killed if it does not exit).
  ~DaemonProcess();

  const std::string& unix_target() const { return unix_target_; }
  const std::string& tcp_target() const { return tcp_target_; }
  const std::string& metrics_address() const { return launched_->ready().metrics; }
  const std::string& ready_line() const { return launched_->ready().line; }
  const std::string& socket_path() const { return socket_path_; }

  // Sends `signal` and waits (≤ timeout) for exit. Returns the exit status
  // as from waitpid, or DeadlineExceeded.
  absl::StatusOr<int> Stop(int signal, std::chrono::milliseconds timeout);
  // Sends `signal` without waiting (e.g. SIGSTOP/SIGCONT to freeze it).
  void Signal(int signal) const;
  // Everything the daemon wrote to stderr so far.
  std::string Stderr() const;

  std::unique_ptr<v1::Query::Stub> QueryStub() const;

  pid_t pid() const { return launched_->pid(); }

 private:
  DaemonProcess() = default;
  std::unique_ptr<LaunchedDaemon> launched_;
  std::string socket_path_, unix_target_, tcp_target_;
};

// GET http://address/path over a real TCP connection (HTTP/1.0, ≤ 5 s).
absl::StatusOr<std::string> HttpGet(const std::string& address, const std::string& path);

struct HttpResponse {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
};

// GET with extra request header lines ("Authorization: Basic ..."), any
// status returned as it is (HTTP/1.0, ≤ 5 s).
absl::StatusOr<HttpResponse> HttpGetWithHeaders(const std::string& address, const std::string& path,
                                                const std::vector<std::string>& headers);

// The same with another method ("HEAD").
absl::StatusOr<HttpResponse> HttpRequest(const std::string& address, const std::string& method,
                                         const std::string& path,
                                         const std::vector<std::string>& headers);

// A channel to `target` made by the client library with `security`
// (torchmon::CreateDaemonChannel, nothing taken from the environment): TLS
// and the bearer token as a torchmon client sends them, for stubs of any
// service. Error if the library refuses the settings.
absl::StatusOr<std::shared_ptr<grpc::Channel>> SecureChannel(const std::string& target,
                                                             const ClientSecurity& security);

// A Query stub on SecureChannel(target, security).
absl::StatusOr<std::unique_ptr<v1::Query::Stub>> SecureQueryStub(const std::string& target,
                                                                 const ClientSecurity& security);

// The value of the first sample line in a Prometheus text scrape whose
// metric name is `name` and which carries every `labels` pair
// (e.g. {"stat=\"train.loss\"", "agg=\"mean\""}). NotFound if none.
absl::StatusOr<double> ScrapeValue(const std::string& scrape, const std::string& name,
                                   const std::vector<std::string>& labels);

int64_t NowMs();

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_DAEMON_PROCESS_H_

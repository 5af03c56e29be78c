// torchmond: the torchmon daemon. See `torchmond --help` and docs/.
#include <csignal>
#include <cstdlib>
#include <iostream>

#include "absl/synchronization/mutex.h"
#include "absl/strings/str_cat.h"
#include "server/daemon/build_info.h"
#include "server/daemon/daemon.h"
#include "server/daemon/options.h"

int main(int argc, char** argv) {
  // Debian's abseil checks every absl::Mutex acquisition for lock-order
  // cycles: 25-35 ns per lock, paid per sample block on the ingest path.
  // The test suite keeps the check; the daemon does not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  // A peer that goes away mid-write is an error of that write (EPIPE), not
  // the end of the daemon: every socket here is a network peer's.
  std::signal(SIGPIPE, SIG_IGN);
  auto options = torchmon::server::ParseDaemonOptions(argc, argv);
  if (!options.ok()) {
    std::cerr << "torchmond: " << options.status().message() << "\n";
    return torchmon::server::kExitUsage;
  }
  if (options->help) {
    std::cout << torchmon::server::DaemonUsage();
    return 0;
  }
  if (options->version) {
    std::cout << (options->verbose ? torchmon::server::VerboseVersion()
                                   : absl::StrCat("torchmond ", TORCHMON_VERSION, "\n"));
    return 0;
  }
  if (options->check_config) {
    if (absl::Status s = torchmon::server::CheckStartable(*options); !s.ok()) {
      std::cerr << "torchmond: " << options->config_file << ": " << s.message() << "\n";
      return torchmon::server::kExitUsage;
    }
    std::cout << options->config_file << ": ok\n";
    return 0;
  }
  static const torchmon::server::SystemClock clock;
  torchmon::server::Daemon daemon(*std::move(options), clock);
  if (absl::Status s = daemon.Start(); !s.ok()) {
    std::cerr << "torchmond: " << s.message() << "\n";
    return torchmon::server::StartFailureExitStatus(s);
  }
  std::cout << daemon.ReadyLine() << std::endl;
  daemon.Run();
  // Everything is closed, logged and unlinked. Exit without running the
  // destructors: nothing is left to flush, and tearing down every thread
  // and table would only delay the restart that usually follows.
  std::cout.flush();
  std::cerr.flush();
  std::_Exit(0);
}

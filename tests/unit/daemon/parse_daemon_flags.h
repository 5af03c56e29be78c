// Test support: torchmond's flag parser driven from a list of strings.
#ifndef TORCHMON_TESTS_UNIT_PARSE_DAEMON_FLAGS_H_
#define TORCHMON_TESTS_UNIT_PARSE_DAEMON_FLAGS_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "server/daemon/options.h"

namespace torchmon::server {

// ParseDaemonOptions over "torchmond" followed by `args`.
inline absl::StatusOr<DaemonOptions> Parse(std::vector<std::string> args) {
  args.insert(args.begin(), "torchmond");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return ParseDaemonOptions(static_cast<int>(args.size()), argv.data());
}

// The error message for `args`, which must be refused (a test failure if not).
inline std::string ErrorOf(std::vector<std::string> args) {
  auto options = Parse(std::move(args));
  EXPECT_FALSE(options.ok());
  return options.ok() ? "" : std::string(options.status().message());
}

}  // namespace torchmon::server

#endif  // TORCHMON_TESTS_UNIT_PARSE_DAEMON_FLAGS_H_

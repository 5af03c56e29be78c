// The test support's launcher: the ready line's rule (the same cases as
// tests/python/test_ready_line.py, so C++ and Python read it alike), the
// poll helper, and a real torchmond started and stopped.
#include "tests/support/daemon_launch.h"

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace torchmon::testing {
namespace {

TEST(ReadyLineTest, NamesEveryGrpcAddressInOrderAndTheMetricsListener) {
  absl::StatusOr<ReadyLine> ready = ParseReadyLine(
      "torchmond ready grpc=unix:///run/t/torchmond.sock,127.0.0.1:7070 metrics=127.0.0.1:9464");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->grpc,
            (std::vector<std::string>{"unix:///run/t/torchmond.sock", "127.0.0.1:7070"}));
  EXPECT_EQ(ready->UnixTarget(), "unix:///run/t/torchmond.sock");
  EXPECT_EQ(ready->TcpTarget(), "127.0.0.1:7070");
  EXPECT_EQ(ready->metrics, "127.0.0.1:9464");
}

TEST(ReadyLineTest, ATcpOnlyDaemonHasNoUnixTarget) {
  absl::StatusOr<ReadyLine> ready =
      ParseReadyLine("torchmond ready grpc=[::1]:7070 metrics=127.0.0.1:1");
  ASSERT_TRUE(ready.ok()) << ready.status();
  EXPECT_EQ(ready->UnixTarget(), "");
  EXPECT_EQ(ready->TcpTarget(), "[::1]:7070");
}

TEST(ReadyLineTest, AnythingElseIsRefusedNamingWhatIsMissing) {
  for (const char* line : {"", "torchmond: bad flag --x", "torchmond ready metrics=127.0.0.1:1",
                           "torchmond ready grpc= metrics=127.0.0.1:1",
                           "torchmond ready grpc=unix:///a.sock"}) {
    absl::StatusOr<ReadyLine> ready = ParseReadyLine(line);
    EXPECT_EQ(ready.status().code(), absl::StatusCode::kInvalidArgument) << line;
  }
}

TEST(WaitForTest, ReturnsAsSoonAsTheConditionHoldsAndFalseAfterTheTimeout) {
  int calls = 0;
  EXPECT_TRUE(WaitFor([&] { return ++calls == 3; }, std::chrono::seconds(30),
                      std::chrono::milliseconds(1)));
  EXPECT_EQ(calls, 3);
  calls = 0;
  EXPECT_FALSE(WaitFor([&] { return ++calls < 0; }, std::chrono::milliseconds(0)));
  EXPECT_EQ(calls, 1);  // called once even with no time
}

TEST(LaunchedDaemonTest, StartsARealDaemonReadsItsLineAndStopsIt) {
  TempDir dir;
  const std::string socket = dir.path() + "/torchmond.sock";
  absl::StatusOr<std::unique_ptr<LaunchedDaemon>> daemon = LaunchedDaemon::Start(
      TORCHMOND_PATH, {"--listen", "unix://" + socket, "--metrics-listen", "127.0.0.1:0"},
      dir.path() + "/stderr", std::chrono::seconds(10));
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  EXPECT_EQ((*daemon)->ready().UnixTarget(), "unix://" + socket);
  EXPECT_NE((*daemon)->ready().metrics.find("127.0.0.1:"), std::string::npos);
  absl::StatusOr<int> status = (*daemon)->Stop(SIGTERM, std::chrono::seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << *status;
  EXPECT_EQ((*daemon)->pid(), -1);
}

TEST(LaunchedDaemonTest, ADaemonThatRefusesToStartIsUnavailableWithItsStderr) {
  TempDir dir;
  absl::StatusOr<std::unique_ptr<LaunchedDaemon>> daemon = LaunchedDaemon::Start(
      TORCHMOND_PATH, {"--no-such-flag"}, dir.path() + "/stderr", std::chrono::seconds(10));
  ASSERT_EQ(daemon.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(daemon.status().message().find("--no-such-flag"), std::string::npos)
      << daemon.status();
}

}  // namespace
}  // namespace torchmon::testing

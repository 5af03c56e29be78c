// torchmond --config and --check-config: the real binary reading real files.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_process.h"

namespace torchmon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr auto kRunTimeout = std::chrono::seconds(10);

class ConfigTest : public ::testing::Test {
 protected:
  // Writes `text` to DIR/name and returns the path.
  std::string WriteFile(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    chmod(path.c_str(), mode);
    return path;
  }

  CommandResult Run(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {TorchmondPath()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto result = RunCommand(argv, kRunTimeout);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  static bool Exists(const std::string& path) {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  }

  TempDir dir_;
};

TEST_F(ConfigTest, CheckConfigAcceptsAGoodFileAndBindsNothing) {
  const std::string socket = dir_.path() + "/check.sock";
  const std::string conf = WriteFile("ok.conf", absl::StrCat(
      "# a production-like file\n"
      "listen = unix://", socket, "\n"
      "listen = 127.0.0.1:0\n"
      "metrics-listen = 127.0.0.1:0\n"
      "grace = 2s\n"
      "socket-mode = 0660\n"));
  const CommandResult r = Run({"--check-config", conf});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, conf + ": ok\n");
  EXPECT_THAT(r.err, IsEmpty());
  EXPECT_FALSE(Exists(socket)) << "--check-config must not start a listener";
}

TEST_F(ConfigTest, CheckConfigNamesTheLineOfABadValue) {
  const std::string conf = WriteFile("bad.conf", "grace = 2s\n\nseries-ttl = forever\n");
  const CommandResult r = Run({"--check-config", conf});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(conf + ":3: --series-ttl"));
  EXPECT_THAT(r.out, IsEmpty());
}

TEST_F(ConfigTest, CheckConfigReadsTheFilesTheConfigurationNames) {
  // Syntax alone is not enough: a token file that is not there would stop
  // the daemon at start, so the check says so too.
  const std::string missing = dir_.path() + "/no-such-token";
  const std::string conf = WriteFile("token.conf", "auth-token-file = " + missing + "\n");
  const CommandResult r = Run({"--check-config", conf});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(conf + ": "));
  EXPECT_THAT(r.err, HasSubstr(missing));

  const std::string token = WriteFile("token", "s3cret-token-of-enough-length-0123456789\n");
  WriteFile("token.conf", "auth-token-file = " + token + "\n");
  const CommandResult ok = Run({"--check-config", conf});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

TEST_F(ConfigTest, CheckConfigOfAMissingFileFails) {
  const CommandResult r = Run({"--check-config", dir_.path() + "/absent.conf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read the configuration file"));
}

TEST_F(ConfigTest, TheDaemonRefusesToStartOnABadFileNamingTheLine) {
  const std::string socket = dir_.path() + "/bad.sock";
  const std::string conf = WriteFile(
      "bad.conf", absl::StrCat("listen = unix://", socket, "\nmetrics-listen = 127.0.0.1:0\n"
                               "window = 1s\n"));
  const CommandResult r = Run({"--config", conf});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr(conf + ":3: unknown setting \"window\""));
  EXPECT_FALSE(Exists(socket));
}

// What restarting cannot fix exits 78 (EX_CONFIG), which the systemd unit
// does not restart; a busy address may free itself and exits 1, which it does.
TEST_F(ConfigTest, AConfigurationOrPermissionErrorAtStartExits78) {
  const std::string socket = dir_.path() + "/d.sock";
  // A sink directory whose parent does not exist.
  CommandResult r = Run({"--listen", "unix://" + socket, "--metrics-listen", "127.0.0.1:0",
                         "--tensorboard-dir", dir_.path() + "/no/such/dir"});
  EXPECT_EQ(r.exit_code, 78) << r.err;
  EXPECT_THAT(r.err, HasSubstr("--tensorboard-dir " + dir_.path() + "/no/such/dir"));
  EXPECT_FALSE(Exists(socket));
  // A file where the socket goes.
  const std::string file = WriteFile("not-a-socket", "x");
  r = Run({"--listen", "unix://" + file, "--metrics-listen", "127.0.0.1:0"});
  EXPECT_EQ(r.exit_code, 78) << r.err;
  EXPECT_THAT(r.err, HasSubstr(file + " exists and is not a socket"));
  // A token file that is not there.
  r = Run({"--listen", "unix://" + socket, "--metrics-listen", "127.0.0.1:0", "--auth-token-file",
           dir_.path() + "/no-token"});
  EXPECT_EQ(r.exit_code, 78) << r.err;
}

TEST_F(ConfigTest, AnAddressInUseAtStartExitsOneToBeRestarted) {
  const int busy = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(busy, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(bind(busy, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(busy, 1), 0);
  ASSERT_EQ(getsockname(busy, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string port = absl::StrCat(ntohs(address.sin_port));
  const std::string socket_path = dir_.path() + "/d.sock";
  const CommandResult r = Run({"--listen", "unix://" + socket_path, "--metrics-listen",
                               "127.0.0.1:" + port});
  close(busy);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr(port));
}

TEST_F(ConfigTest, TheDaemonRunsWithTheFilesSettingsAndTheCommandLineOverrides) {
  // DaemonProcess gives its own --listen and --metrics-listen flags: they
  // replace the file's, whose socket therefore never appears.
  const std::string file_socket = dir_.path() + "/from-file.sock";
  const std::string conf = WriteFile(
      "run.conf", absl::StrCat("listen = unix://", file_socket, "\n"
                               "socket-mode = 0660\n"
                               "metrics-listen = 127.0.0.1:1\n"));
  {
    auto daemon = DaemonProcess::Start(dir_, {"--config", conf});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    struct stat st;
    ASSERT_EQ(stat((*daemon)->socket_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0660u) << "socket-mode from the file";
    EXPECT_FALSE(Exists(file_socket)) << "the command line's --listen replaces the file's";
    EXPECT_NE((*daemon)->metrics_address(), "127.0.0.1:1");
    EXPECT_TRUE(HttpGet((*daemon)->metrics_address(), "/metrics").ok());
  }
  {
    auto daemon = DaemonProcess::Start(dir_, {"--config", conf, "--socket-mode", "0600"});
    ASSERT_TRUE(daemon.ok()) << daemon.status();
    struct stat st;
    ASSERT_EQ(stat((*daemon)->socket_path().c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u) << "the command line overrides the file";
  }
}

}  // namespace
}  // namespace torchmon::testing

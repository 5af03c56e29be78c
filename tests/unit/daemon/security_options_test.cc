// torchmond's security flags: parsing, how they must go together, and the
// warnings about settings that expose the daemon.
#include "server/daemon/security_options.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parse_daemon_flags.h"
#include "server/daemon/options.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::vector<std::string> Warnings(std::vector<std::string> args, bool root = false) {
  auto options = Parse(std::move(args));
  EXPECT_TRUE(options.ok()) << options.status();
  return options.ok() ? SecurityWarnings(*options, root) : std::vector<std::string>{};
}

TEST(SecurityOptionsTest, NothingIsAskedByDefault) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->security.socket_group.empty());
  EXPECT_FALSE(o->security.tls());
  EXPECT_TRUE(o->security.tls_client_ca_file.empty());
  EXPECT_TRUE(o->security.auth_token_file.empty());
  EXPECT_TRUE(o->security.metrics_auth_file.empty());
  EXPECT_TRUE(o->security.user.empty());
}

TEST(SecurityOptionsTest, ParsesEverySecurityFlag) {
  auto o = Parse({"--listen", "unix:///run/t/d.sock", "--listen", ":7070", "--socket-group",
                  "torchmon", "--tls-cert", "/etc/t/cert.pem", "--tls-key=/etc/t/key.pem",
                  "--tls-client-ca", "/etc/t/ca.pem", "--auth-token-file", "/etc/t/token",
                  "--metrics-auth-file", "/etc/t/scrapers", "--user", "torchmon"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->security.socket_group, "torchmon");
  EXPECT_EQ(o->security.tls_cert_file, "/etc/t/cert.pem");
  EXPECT_EQ(o->security.tls_key_file, "/etc/t/key.pem");
  EXPECT_EQ(o->security.tls_client_ca_file, "/etc/t/ca.pem");
  EXPECT_EQ(o->security.auth_token_file, "/etc/t/token");
  EXPECT_EQ(o->security.metrics_auth_file, "/etc/t/scrapers");
  EXPECT_EQ(o->security.user, "torchmon");
}

TEST(SecurityOptionsTest, SocketGroupOpensTheSocketToTheGroupUnlessAModeIsGiven) {
  auto grouped = Parse({"--socket-group", "torchmon"});
  ASSERT_TRUE(grouped.ok());
  EXPECT_EQ(grouped->socket_mode, 0660u);
  auto explicit_mode = Parse({"--socket-mode", "0640", "--socket-group", "torchmon"});
  ASSERT_TRUE(explicit_mode.ok());
  EXPECT_EQ(explicit_mode->socket_mode, 0640u);
}

TEST(SecurityOptionsTest, EmptyValueIsRefusedNamingTheFlag) {
  EXPECT_THAT(ErrorOf({"--auth-token-file", ""}), HasSubstr("--auth-token-file is empty"));
  EXPECT_THAT(ErrorOf({"--user="}), HasSubstr("--user is empty"));
  EXPECT_THAT(ErrorOf({"--tls-cert"}), HasSubstr("--tls-cert needs a value"));
}

TEST(SecurityOptionsTest, CertificateAndKeyGoTogether) {
  const std::string no_key = ErrorOf({"--listen", ":0", "--tls-cert", "/c.pem"});
  EXPECT_THAT(no_key, HasSubstr("--tls-cert \"/c.pem\" needs --tls-key"));
  const std::string no_cert = ErrorOf({"--listen", ":0", "--tls-key", "/k.pem"});
  EXPECT_THAT(no_cert, HasSubstr("--tls-key \"/k.pem\" needs --tls-cert"));
}

TEST(SecurityOptionsTest, ClientCaNeedsTls) {
  EXPECT_THAT(ErrorOf({"--listen", ":0", "--tls-client-ca", "/ca.pem"}),
              HasSubstr("--tls-client-ca \"/ca.pem\" needs --tls-cert and --tls-key"));
}

TEST(SecurityOptionsTest, TlsWithoutATcpListenerIsRefused) {
  EXPECT_THAT(ErrorOf({"--tls-cert", "/c.pem", "--tls-key", "/k.pem"}),
              HasSubstr("none is configured (add --listen HOST:PORT)"));
}

TEST(SecurityOptionsTest, SocketGroupWithoutAUnixListenerIsRefused) {
  EXPECT_THAT(ErrorOf({"--listen", ":0", "--socket-group", "torchmon"}),
              HasSubstr("--socket-group \"torchmon\" sets the group of Unix sockets"));
}

TEST(SecurityOptionsTest, PeerLabelsAreOnUnlessTurnedOff) {
  auto defaults = Parse({"--listen", "unix:///tmp/t.sock"});
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_TRUE(defaults->security.peer_labels);
  auto off = Parse({"--listen", "unix:///tmp/t.sock", "--peer-labels", "off"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->security.peer_labels);
  // TCP clients are named by their token or certificate: no Unix socket needed.
  EXPECT_TRUE(Parse({"--listen", "127.0.0.1:0", "--peer-labels", "on"}).ok());
  EXPECT_THAT(ErrorOf({"--peer-labels", "yes"}),
              HasSubstr("--peer-labels \"yes\" is neither on nor off"));
}

TEST(SecurityOptionsTest, AdminGroupNeedsPeerLabels) {
  EXPECT_THAT(ErrorOf({"--listen", "unix:///tmp/t.sock", "--peer-labels", "off", "--admin-group",
                       "adm"}),
              HasSubstr("--admin-group \"adm\" names who sees every user's series, and users "
                        "are told apart only with --peer-labels on"));
  EXPECT_TRUE(Parse({"--listen", "unix:///tmp/t.sock", "--peer-labels", "on", "--admin-group",
                     "adm"})
                  .ok());
}

TEST(SecurityOptionsTest, TokenInClearTextToOtherHostsIsRefused) {
  const std::string error = ErrorOf({"--listen", "0.0.0.0:7070", "--auth-token-file", "/t"});
  EXPECT_THAT(error, HasSubstr("--listen 0.0.0.0:7070"));
  EXPECT_THAT(error, HasSubstr("clear text"));
}

TEST(SecurityOptionsTest, TokenIsAcceptedOnLoopbackOrBehindTls) {
  EXPECT_TRUE(
      Parse({"--listen", ":7070", "--listen", "[::1]:7071", "--auth-token-file", "/t"}).ok());
  EXPECT_TRUE(Parse({"--listen", "0.0.0.0:7070", "--auth-token-file", "/t", "--tls-cert", "/c",
                     "--tls-key", "/k"})
                  .ok());
}

TEST(SecurityOptionsTest, UsageListsEverySecurityFlagWithItsDefault) {
  const std::string usage = DaemonUsage();
  for (const char* flag : {"--socket-group", "--tls-cert", "--tls-key", "--tls-client-ca",
                           "--auth-token-file", "--metrics-auth-file", "--user"}) {
    EXPECT_THAT(usage, HasSubstr(flag));
  }
  EXPECT_THAT(usage, HasSubstr("docs/security.md"));
  EXPECT_THAT(usage, HasSubstr("0660 with --socket-group"));
}

TEST(SecurityWarningsTest, DefaultsAreQuietForAnUnprivilegedUser) {
  EXPECT_THAT(Warnings({}), IsEmpty());
  EXPECT_THAT(Warnings({"--listen", ":0", "--metrics-listen", "[::1]:0"}), IsEmpty());
}

TEST(SecurityWarningsTest, PlainTcpReachableFromOtherHostsIsWarnedAbout) {
  const std::vector<std::string> warnings = Warnings({"--listen", "0.0.0.0:7070"});
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("--listen 0.0.0.0:7070 is reachable from other hosts"));
}

TEST(SecurityWarningsTest, TlsWithoutClientAuthenticationIsWarnedAbout) {
  const std::vector<std::string> warnings =
      Warnings({"--listen", "0.0.0.0:7070", "--tls-cert", "/c", "--tls-key", "/k"});
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("accepts every client"));
  EXPECT_THAT(Warnings({"--listen", "0.0.0.0:7070", "--tls-cert", "/c", "--tls-key", "/k",
                        "--tls-client-ca", "/ca"}),
              IsEmpty());
}

TEST(SecurityWarningsTest, MetricsReachableFromOtherHostsIsWarnedAbout) {
  const std::vector<std::string> open = Warnings({"--metrics-listen", "0.0.0.0:9464"});
  ASSERT_THAT(open, SizeIs(1));
  EXPECT_THAT(open[0], HasSubstr("without authentication"));
  const std::vector<std::string> with_auth =
      Warnings({"--metrics-listen", "0.0.0.0:9464", "--metrics-auth-file", "/a"});
  ASSERT_THAT(with_auth, SizeIs(1));
  EXPECT_THAT(with_auth[0], HasSubstr("password crosses the network in clear text"));
}

TEST(SecurityWarningsTest, SocketOpenToEveryUserIsWarnedAbout) {
  const std::vector<std::string> warnings = Warnings({"--socket-mode", "0666"});
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("lets every local user connect"));
}

TEST(SecurityWarningsTest, RootWithoutUserIsWarnedAbout) {
  const std::vector<std::string> warnings = Warnings({}, /*root=*/true);
  ASSERT_THAT(warnings, SizeIs(1));
  EXPECT_THAT(warnings[0], HasSubstr("--user"));
  EXPECT_THAT(Warnings({"--user", "nobody"}, /*root=*/true), IsEmpty());
}

}  // namespace
}  // namespace torchmon::server

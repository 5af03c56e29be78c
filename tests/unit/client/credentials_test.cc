// How the client library decides what it may send where: targets, token
// files, the environment, and the settings it refuses before connecting.
#include "detail/credentials.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torchmon/client.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::detail {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kToken[] = "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f";

// Sets an environment variable for the scope, restoring it after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) previous_ = old;
    if (value == nullptr) {
      unsetenv(name);
    } else {
      setenv(name, value, 1);
    }
  }
  ~ScopedEnv() {
    if (previous_) {
      setenv(name_, previous_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> previous_;
};

class CredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/torchmon-credentials-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Write(const std::string& name, const std::string& content, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  absl::Status Create(const std::string& target, const ClientSecurity& security,
                      std::vector<std::string>* warnings = nullptr) {
    std::vector<std::string> ignored;
    return CreateChannel(target, security, grpc::ChannelArguments(),
                         warnings != nullptr ? warnings : &ignored)
        .status();
  }

  std::string dir_;
};

TEST(ParseTargetTest, UnixTargetsAreLocal) {
  const TargetInfo info = ParseTarget("unix:///run/torchmon/torchmond.sock");
  EXPECT_TRUE(info.is_unix);
  EXPECT_EQ(info.unix_path, "/run/torchmon/torchmond.sock");
  EXPECT_TRUE(info.local);
  EXPECT_EQ(ParseTarget("unix:/tmp/x.sock").unix_path, "/tmp/x.sock");
}

TEST(ParseTargetTest, LoopbackHostsAreLocal) {
  for (const char* target : {"127.0.0.1:7070", "localhost:7070", "[::1]:7070",
                             "dns:///localhost:7070", "ipv4:127.0.0.1:7070"}) {
    EXPECT_TRUE(ParseTarget(target).local) << target;
  }
}

TEST(ParseTargetTest, OtherHostsAreNot) {
  for (const char* target :
       {"10.0.0.5:7070", "node7:7070", "[2001:db8::1]:7070", "dns://8.8.8.8/localhost.evil:7070",
        "ipv4:127.0.0.1:1,10.0.0.1:1", "weird",
        // A DNS server of the target's own names the host: its "localhost"
        // is that server's word, not this machine's, and a token would go
        // out in clear. Any authority makes a target not local, a loopback
        // literal's too: one rule, on the safe side.
        "dns://8.8.8.8/localhost:7070", "dns://10.0.0.53:53/127.0.0.1:7070",
        "dns://resolver.example/[::1]:7070"}) {
    EXPECT_FALSE(ParseTarget(target).local) << target;
  }
  // No authority: this machine's resolver, as a target without a scheme.
  EXPECT_TRUE(ParseTarget("dns:///localhost:7070").local);
  EXPECT_TRUE(ParseTarget("dns:localhost:7070").local);
  EXPECT_EQ(ParseTarget("dns://8.8.8.8/localhost:7070").host, "localhost");
  EXPECT_EQ(ParseTarget("node7:7070").host, "node7");
  EXPECT_EQ(ParseTarget("[2001:db8::1]:7070").host, "2001:db8::1");
}

TEST(ParseClientTokenTest, TakesTheFirstTokenLine) {
  auto token = ParseClientToken(absl::StrCat("# for job 42\n\n  ", kToken, "  \nsecond\n"), "f");
  ASSERT_TRUE(token.ok()) << token.status();
  EXPECT_EQ(*token, kToken);
}

TEST(ParseClientTokenTest, RefusesAnEmptyFileOrABadCharacter) {
  EXPECT_FALSE(ParseClientToken("# nothing\n", "f").ok());
  EXPECT_FALSE(ParseClientToken("abc def", "f").ok());
}

TEST_F(CredentialsTest, EnvironmentFillsOnlyWhatIsEmpty) {
  ScopedEnv token("TORCHMON_TOKEN_FILE", "/env/token");
  ScopedEnv ca("TORCHMON_TLS_CA", "/env/ca.pem");
  ScopedEnv cert("TORCHMON_TLS_CERT", "/env/cert.pem");
  ScopedEnv key("TORCHMON_TLS_KEY", "/env/key.pem");
  ScopedEnv name("TORCHMON_TLS_SERVER_NAME", "node7");
  ClientSecurity given;
  given.tls_ca_file = "/given/ca.pem";
  const ClientSecurity s = SecurityFromEnvironment(given);
  EXPECT_EQ(s.token_file, "/env/token");
  EXPECT_EQ(s.tls_ca_file, "/given/ca.pem");
  EXPECT_EQ(s.tls_cert_file, "/env/cert.pem");
  EXPECT_EQ(s.tls_key_file, "/env/key.pem");
  EXPECT_EQ(s.tls_server_name, "node7");
  EXPECT_TRUE(s.token.empty());
}

TEST_F(CredentialsTest, TokenInClearTextToAnotherHostIsRefused) {
  ClientSecurity security;
  security.token = kToken;
  const absl::Status status = Create("10.0.0.5:7070", security);
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("in clear text"));
  EXPECT_THAT(std::string(status.message()), ::testing::Not(HasSubstr(kToken)));
}

TEST_F(CredentialsTest, TokenIsAllowedToLoopbackUnixAndOverTls) {
  ClientSecurity security;
  security.token = kToken;
  EXPECT_TRUE(Create("127.0.0.1:7070", security).ok());
  EXPECT_TRUE(Create("unix://" + dir_ + "/d.sock", security).ok());
  security.tls_ca_file = Write("ca.pem", "-----BEGIN CERTIFICATE-----\n", 0644);
  EXPECT_TRUE(Create("10.0.0.5:7070", security).ok());
}

TEST_F(CredentialsTest, MissingTokenFileIsRefusedNamingIt) {
  ClientSecurity security;
  security.token_file = dir_ + "/missing";
  const absl::Status status = Create("127.0.0.1:7070", security);
  EXPECT_TRUE(absl::IsNotFound(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr(security.token_file));
}

TEST_F(CredentialsTest, TokenFileEveryoneCanReadIsWarnedAbout) {
  ClientSecurity security;
  security.token_file = Write("token", kToken, 0644);
  std::vector<std::string> warnings;
  EXPECT_TRUE(Create("127.0.0.1:7070", security, &warnings).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("readable by every user"));
  warnings.clear();
  ASSERT_EQ(chmod(security.token_file.c_str(), 0600), 0);
  EXPECT_TRUE(Create("127.0.0.1:7070", security, &warnings).ok());
  EXPECT_THAT(warnings, IsEmpty());
}

TEST_F(CredentialsTest, ClientCertificateWithoutKeyIsRefused) {
  ClientSecurity security;
  security.tls_cert_file = Write("cert.pem", "x", 0644);
  EXPECT_TRUE(absl::IsInvalidArgument(Create("10.0.0.5:7070", security)));
}

TEST_F(CredentialsTest, DefaultSocketInADirectoryAnotherUserOwnsIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  // As if another user had created $XDG_RUNTIME_DIR/torchmon first.
  ScopedEnv runtime("XDG_RUNTIME_DIR", dir_.c_str());
  const std::string squatted = dir_ + "/torchmon";
  ASSERT_EQ(mkdir(squatted.c_str(), 0700), 0);
  ASSERT_EQ(chown(squatted.c_str(), 65534, 65534), 0);
  const absl::Status status = Create("unix://" + protocol::DefaultSocketPath(), {});
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("owned by uid 65534"));
}

TEST_F(CredentialsTest, DefaultSocketWhoseDirectoryDoesNotExistYetIsAllowed) {
  ScopedEnv runtime("XDG_RUNTIME_DIR", dir_.c_str());
  EXPECT_TRUE(Create("unix://" + protocol::DefaultSocketPath(), {}).ok());
}

TEST_F(CredentialsTest, ClientWhoseSettingsAreRefusedSaysWhyAndDoesNotConnect) {
  ClientOptions options;
  options.target = "unix://" + dir_ + "/d.sock";
  options.security.token_file = dir_ + "/missing";
  options.security_from_environment = false;
  options.labels_from_environment = false;
  options.log_to_stderr = false;
  options.destructor_flush_timeout = std::chrono::milliseconds(0);
  Client client(options);
  const std::vector<std::string> errors = client.TakeErrors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("not connecting to the daemon"));
  EXPECT_THAT(errors[0], HasSubstr(options.security.token_file));
}

}  // namespace
}  // namespace torchmon::detail

// The files the security flags name, as the daemon reads them at start, and
// the user and group lookups of --user and --socket-group.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/daemon/privileges.h"
#include "server/daemon/security.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;

class SecretFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/torchmon-secret.XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  std::string dir_;
};

TEST_F(SecretFileTest, OwnerOnlyAndGroupReadableSecretsAreRead) {
  auto owner_only = ReadSecretFile(Write("a", "secret", 0600), "--auth-token-file");
  ASSERT_TRUE(owner_only.ok()) << owner_only.status();
  EXPECT_EQ(*owner_only, "secret");
  EXPECT_TRUE(ReadSecretFile(Write("b", "secret", 0640), "--auth-token-file").ok());
  EXPECT_TRUE(ReadSecretFile(Write("c", "secret", 0400), "--auth-token-file").ok());
}

TEST_F(SecretFileTest, SecretOthersCanReadIsRefusedNamingTheFlagAndTheFix) {
  const std::string path = Write("token", "secret", 0644);
  auto content = ReadSecretFile(path, "--auth-token-file");
  ASSERT_FALSE(content.ok());
  const std::string message(content.status().message());
  EXPECT_THAT(message, HasSubstr(absl::StrCat("--auth-token-file ", path, " has mode 0644")));
  EXPECT_THAT(message, HasSubstr("chmod 600"));
}

TEST_F(SecretFileTest, SecretItsGroupCanWriteIsRefused) {
  EXPECT_FALSE(ReadSecretFile(Write("token", "secret", 0660), "--auth-token-file").ok());
}

TEST_F(SecretFileTest, MissingFileIsNotFoundNamingTheFlag) {
  auto content = ReadSecretFile(dir_ + "/missing", "--tls-key");
  ASSERT_FALSE(content.ok());
  EXPECT_TRUE(absl::IsNotFound(content.status()));
  EXPECT_THAT(std::string(content.status().message()), HasSubstr("--tls-key"));
}

TEST_F(SecretFileTest, DirectoryIsNotASecret) {
  EXPECT_FALSE(ReadSecretFile(dir_, "--auth-token-file").ok());
}

TEST_F(SecretFileTest, CertificatesMayBeReadableByEveryone) {
  EXPECT_TRUE(ReadPublicFile(Write("cert.pem", "x", 0644), "--tls-cert").ok());
}

TEST_F(SecretFileTest, LoadRefusesAnInvalidTokenFileNamingIt) {
  SecurityOptions options;
  options.auth_token_file = Write("token", "short\n", 0600);
  DaemonStats stats;
  auto security = ServerSecurity::Load(options, stats);
  ASSERT_FALSE(security.ok());
  EXPECT_THAT(std::string(security.status().message()),
              HasSubstr(absl::StrCat("--auth-token-file ", options.auth_token_file, " line 1")));
}

TEST_F(SecretFileTest, LoadRefusesAKeyThatIsNotPem) {
  SecurityOptions options;
  options.tls_cert_file = Write("cert.pem", "-----BEGIN CERTIFICATE-----\n", 0644);
  options.tls_key_file = Write("key.pem", "not a key", 0600);
  DaemonStats stats;
  auto security = ServerSecurity::Load(options, stats);
  ASSERT_FALSE(security.ok());
  EXPECT_THAT(std::string(security.status().message()), HasSubstr("--tls-key"));
  EXPECT_THAT(std::string(security.status().message()), HasSubstr("PRIVATE KEY"));
}

TEST_F(SecretFileTest, LoadWithoutFlagsAsksNothingOfScrapes) {
  DaemonStats stats;
  auto security = ServerSecurity::Load(SecurityOptions(), stats);
  ASSERT_TRUE(security.ok());
  EXPECT_EQ((*security)->metrics_auth(), nullptr);
}

TEST(PrivilegesTest, LooksUpUsersByNameAndNumber) {
  auto by_name = LookUpUser("root");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  EXPECT_EQ(by_name->uid, 0u);
  EXPECT_EQ(by_name->gid, 0u);
  auto by_number = LookUpUser("0");
  ASSERT_TRUE(by_number.ok());
  EXPECT_EQ(by_number->name, "root");
}

TEST(PrivilegesTest, UnknownUserOrGroupIsNotFoundNamingIt) {
  auto user = LookUpUser("no-such-user-torchmon");
  ASSERT_FALSE(user.ok());
  EXPECT_TRUE(absl::IsNotFound(user.status()));
  EXPECT_THAT(std::string(user.status().message()), HasSubstr("\"no-such-user-torchmon\""));
  auto group = LookUpGroup("no-such-group-torchmon");
  ASSERT_FALSE(group.ok());
  EXPECT_THAT(std::string(group.status().message()), HasSubstr("--socket-group"));
}

TEST(PrivilegesTest, LooksUpGroupsByNameAndNumber) {
  auto by_name = LookUpGroup("root");
  ASSERT_TRUE(by_name.ok());
  EXPECT_EQ(*by_name, 0u);
  auto by_number = LookUpGroup("0");
  ASSERT_TRUE(by_number.ok());
  EXPECT_EQ(*by_number, 0u);
}

TEST(PrivilegesTest, OnlyRootMaySwitchToAnotherUser) {
  const UserIdentity root{"root", 0, 0};
  const UserIdentity nobody{"nobody", 65534, 65534};
  if (geteuid() == 0) {
    EXPECT_TRUE(CheckCanSwitchTo(nobody).ok());
  } else {
    const absl::Status status = CheckCanSwitchTo(root);
    EXPECT_TRUE(absl::IsPermissionDenied(status));
    EXPECT_THAT(std::string(status.message()),
                HasSubstr("--user root: switching users needs root"));
  }
}

TEST(PrivilegesTest, SwitchingToTheCurrentUserIsANoOp) {
  UserIdentity self{"self", geteuid(), getegid()};
  uid_t r, e, s;
  getresuid(&r, &e, &s);
  if (r != e || e != s) GTEST_SKIP() << "real, effective and saved uids differ";
  EXPECT_TRUE(DropPrivileges(self).ok());
  EXPECT_EQ(geteuid(), e);
}

}  // namespace
}  // namespace torchmon::server

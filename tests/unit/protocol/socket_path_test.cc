// Which Unix socket directories are trusted: owners, modes, sticky
// ancestors and symbolic links, on real directories in a temp dir.
#include "torchmon/protocol/socket_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::protocol {
namespace {

using ::testing::HasSubstr;

constexpr uid_t kOtherUser = 65534;  // nobody

class SocketDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TMPDIR");
    std::string templ =
        absl::StrCat(tmp != nullptr && *tmp ? tmp : "/tmp", "/torchmon-sockdir.XXXXXX");
    ASSERT_NE(mkdtemp(templ.data()), nullptr);
    root_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }

  std::string MakeDir(const std::string& name, mode_t mode) {
    const std::string path = root_ + "/" + name;
    EXPECT_EQ(mkdir(path.c_str(), 0700), 0) << path;
    EXPECT_EQ(chmod(path.c_str(), mode), 0) << path;
    return path;
  }

  absl::Status Check(const std::string& dir) {
    return CheckSocketDirectory(dir + "/torchmond.sock", {geteuid()});
  }

  static bool IsRoot() { return geteuid() == 0; }

  std::string root_;
};

TEST_F(SocketDirectoryTest, PrivateDirectoryOfTheUserIsTrusted) {
  EXPECT_TRUE(Check(MakeDir("private", 0700)).ok());
}

TEST_F(SocketDirectoryTest, DirectoryOthersMaySearchButNotWriteIsTrusted) {
  EXPECT_TRUE(Check(MakeDir("shared", 0755)).ok());
}

TEST_F(SocketDirectoryTest, DirectoryWritableByOthersIsRefused) {
  const absl::Status status = Check(MakeDir("open", 0777));
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("mode 0777"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("writable by other users"));
}

TEST_F(SocketDirectoryTest, DirectoryWritableByItsGroupIsRefused) {
  EXPECT_TRUE(absl::IsFailedPrecondition(Check(MakeDir("group", 0770))));
}

TEST_F(SocketDirectoryTest, StickyWorldWritableDirectoryIsRefusedAsTheSocketsOwn) {
  // Anyone could create the socket name there before the daemon does.
  EXPECT_TRUE(absl::IsFailedPrecondition(Check(MakeDir("tmp", 01777))));
}

TEST_F(SocketDirectoryTest, PrivateDirectoryInsideAStickyWorldWritableOneIsTrusted) {
  MakeDir("tmp", 01777);
  EXPECT_TRUE(Check(MakeDir("tmp/torchmon-1000", 0700)).ok());
}

TEST_F(SocketDirectoryTest, PrivateDirectoryInsideANonStickyWorldWritableOneIsRefused) {
  // Anyone could rename the private directory away and put their own there.
  MakeDir("open", 0777);
  const absl::Status status = Check(MakeDir("open/private", 0700));
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("not sticky"));
}

TEST_F(SocketDirectoryTest, DirectoryOwnedByAnotherUserIsRefusedNamingTheOwner) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string dir = MakeDir("squatted", 0700);
  ASSERT_EQ(chown(dir.c_str(), kOtherUser, kOtherUser), 0);
  const absl::Status status = CheckSocketDirectory(dir + "/d.sock", {1000});
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("owned by uid 65534"));
}

TEST_F(SocketDirectoryTest, DirectoryOwnedByATrustedUserIsTrusted) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to give a directory to another user";
  const std::string dir = MakeDir("service", 0750);
  ASSERT_EQ(chown(dir.c_str(), kOtherUser, kOtherUser), 0);
  EXPECT_TRUE(CheckSocketDirectory(dir + "/d.sock", {kOtherUser}).ok());
}

TEST_F(SocketDirectoryTest, SymbolicLinkOwnedByAnotherUserIsRefused) {
  if (!IsRoot()) GTEST_SKIP() << "needs root to give a link to another user";
  const std::string target = MakeDir("real", 0700);
  const std::string link = root_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  ASSERT_EQ(lchown(link.c_str(), kOtherUser, kOtherUser), 0);
  const absl::Status status = Check(link);
  EXPECT_TRUE(absl::IsFailedPrecondition(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("symbolic link owned by uid 65534"));
}

TEST_F(SocketDirectoryTest, SymbolicLinkToAnUntrustedDirectoryIsRefused) {
  const std::string target = MakeDir("open", 0777);
  const std::string link = root_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_TRUE(absl::IsFailedPrecondition(Check(link)));
}

TEST_F(SocketDirectoryTest, SymbolicLinkOfTheUserToAPrivateDirectoryIsTrusted) {
  const std::string target = MakeDir("real", 0700);
  const std::string link = root_ + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_TRUE(Check(link).ok());
}

TEST_F(SocketDirectoryTest, MissingDirectoryIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(Check(root_ + "/missing")));
}

TEST_F(SocketDirectoryTest, RelativePathIsRefused) {
  EXPECT_TRUE(absl::IsInvalidArgument(CheckSocketDirectory("run/torchmond.sock", {geteuid()})));
}

}  // namespace
}  // namespace torchmon::protocol

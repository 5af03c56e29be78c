#include "server/daemon/watched_tls_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

HttpsMaterial Pem(const std::string& cert, const std::string& key, const std::string& ca = "") {
  HttpsMaterial material;
  material.cert_chain_pem = cert;
  material.key_pem = key;
  material.client_ca_pem = ca;
  return material;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

class WatchedTlsFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = ::testing::TempDir() + "/watched-tls.XXXXXX";
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    parent_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(parent_); }
  std::string parent_;
};

TEST_F(WatchedTlsFilesTest, WritesPrivateCopiesWhereTheWatcherLooks) {
  auto files = WatchedTlsFiles::Create(parent_, Pem("cert 1", "key 1", "ca 1"));
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(Read((*files)->cert_path()), "cert 1");
  EXPECT_EQ(Read((*files)->key_path()), "key 1");
  EXPECT_EQ(Read((*files)->ca_path()), "ca 1");
  struct stat st;
  ASSERT_EQ(stat((*files)->key_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  const std::string dir = std::filesystem::path((*files)->key_path()).parent_path().parent_path();
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST_F(WatchedTlsFilesTest, AReplaceSwapsEveryFileAtOnceAndKeepsOneGenerationBehind) {
  auto files = WatchedTlsFiles::Create(parent_, Pem("cert 1", "key 1"));
  ASSERT_TRUE(files.ok()) << files.status();
  const std::filesystem::path dir =
      std::filesystem::path((*files)->key_path()).parent_path().parent_path();
  for (int generation = 2; generation <= 4; ++generation) {
    const std::string n = std::to_string(generation);
    ASSERT_TRUE((*files)->Replace(Pem("cert " + n, "key " + n)).ok());
    EXPECT_EQ(Read((*files)->cert_path()), "cert " + n);
    EXPECT_EQ(Read((*files)->key_path()), "key " + n);
    // "current" is a symlink to the generation: one rename switches all.
    EXPECT_EQ(std::filesystem::read_symlink(dir / "current"), "gen-" + n);
    EXPECT_TRUE(std::filesystem::exists(dir / ("gen-" + std::to_string(generation - 1))));
    EXPECT_FALSE(std::filesystem::exists(dir / ("gen-" + std::to_string(generation - 2))));
  }
}

TEST_F(WatchedTlsFilesTest, GoesWithItsOwnerAndCanBeGivenAway) {
  std::string dir;
  {
    auto files = WatchedTlsFiles::Create(parent_, Pem("c", "k"));
    ASSERT_TRUE(files.ok()) << files.status();
    EXPECT_TRUE((*files)->GiveTo(geteuid(), getegid()).ok());
    dir = std::filesystem::path((*files)->key_path()).parent_path().parent_path();
    EXPECT_TRUE(std::filesystem::exists(dir));
  }
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST_F(WatchedTlsFilesTest, AnUnwritableParentIsAnErrorNamingIt) {
  auto files = WatchedTlsFiles::Create(parent_ + "/missing", Pem("c", "k"));
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.status().message().find(parent_ + "/missing"), std::string::npos)
      << files.status();
}

}  // namespace
}  // namespace torchmon::server

// torchmond's configuration file: its syntax (config_file.h) and how its
// settings combine with the command line (options.h).
#include "server/daemon/config_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/daemon/options.h"
#include "parse_daemon_flags.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

std::string ErrorOfText(const std::string& text) {
  auto settings = ParseConfigText(text, "t.conf");
  EXPECT_FALSE(settings.ok());
  return settings.ok() ? "" : std::string(settings.status().message());
}

TEST(ConfigTextTest, NamesValuesCommentsAndBlankLines) {
  auto settings = ParseConfigText(
      "# torchmond\n"
      "\n"
      "  grace = 2s  \n"
      "listen=unix:///tmp/a.sock\n"
      "listen = :7070   # a TCP port too\n"
      "metrics-listen = 127.0.0.1:0\n",
      "t.conf");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings,
              ElementsAre(Field(&ConfigSetting::value, "2s"),
                          Field(&ConfigSetting::value, "unix:///tmp/a.sock"),
                          Field(&ConfigSetting::value, ":7070"),
                          Field(&ConfigSetting::value, "127.0.0.1:0")));
  EXPECT_EQ((*settings)[0].name, "grace");
  EXPECT_EQ((*settings)[0].origin, "t.conf:3");
  EXPECT_EQ((*settings)[2].name, "listen");
  EXPECT_EQ((*settings)[3].origin, "t.conf:6");
}

TEST(ConfigTextTest, AHashInsideAnUnquotedValueIsKept) {
  // Only a '#' after a blank starts a comment.
  auto settings = ParseConfigText("auth-token-file = /etc/a#b\n", "t.conf");
  ASSERT_TRUE(settings.ok()) << settings.status();
  ASSERT_THAT(*settings, SizeIs(1));
  EXPECT_EQ((*settings)[0].value, "/etc/a#b");
}

TEST(ConfigTextTest, QuotedValuesKeepBlanksAndHashesAndUndoEscapes) {
  auto settings = ParseConfigText(
      "tls-cert-file = \" /a dir/#1 \\\"x\\\" \\\\ \"  # trailing comment\n", "t.conf");
  ASSERT_TRUE(settings.ok()) << settings.status();
  ASSERT_THAT(*settings, SizeIs(1));
  EXPECT_EQ((*settings)[0].value, " /a dir/#1 \"x\" \\ ");
}

TEST(ConfigTextTest, EmptyTextHasNoSettings) {
  auto settings = ParseConfigText("# nothing\n\n", "t.conf");
  ASSERT_TRUE(settings.ok());
  EXPECT_THAT(*settings, IsEmpty());
}

TEST(ConfigTextTest, SyntaxErrorsNameFileLineAndProblem) {
  EXPECT_THAT(ErrorOfText("grace = 1s\ngrace 2s\n"),
              HasSubstr("t.conf:2: expected NAME = VALUE"));
  EXPECT_THAT(ErrorOfText("--grace = 1s\n"), HasSubstr("t.conf:1: write \"grace = ...\""));
  EXPECT_THAT(ErrorOfText("gr ace = 1s\n"), HasSubstr("t.conf:1: \"gr ace\" is not a setting name"));
  EXPECT_THAT(ErrorOfText(" = 1s\n"), HasSubstr("t.conf:1: \"\" is not a setting name"));
  EXPECT_THAT(ErrorOfText("auth-token-file = \"/etc/x\n"),
              HasSubstr("t.conf:1: auth-token-file: the quoted value has no closing \""));
  EXPECT_THAT(ErrorOfText("auth-token-file = \"/etc/x\" y\n"),
              HasSubstr("unexpected \"y\" after the quoted value"));
  EXPECT_THAT(ErrorOfText("auth-token-file = \"a\\nb\"\n"),
              HasSubstr("a backslash may only escape"));
}

TEST(ConfigTextTest, OnlyListenMayRepeat) {
  EXPECT_THAT(ErrorOfText("grace = 1s\n\ngrace = 2s\n"),
              HasSubstr("t.conf:3: grace is already set on line 1 (only listen, remote-write-url and otlp-endpoint may be repeated)"));
  auto settings = ParseConfigText("listen = :1\nlisten = :2\n", "t.conf");
  ASSERT_TRUE(settings.ok()) << settings.status();
  EXPECT_THAT(*settings, SizeIs(2));
}

// A configuration file in a fresh temporary directory.
class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/torchmon-config-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    path_ = dir_ + "/torchmond.conf";
  }
  void TearDown() override {
    unlink(path_.c_str());
    rmdir(dir_.c_str());
  }
  void Write(const std::string& text) {
    std::ofstream(path_) << text;
  }

  std::string dir_;
  std::string path_;
};

TEST_F(ConfigFileTest, EverySettingReachesTheOptions) {
  Write(
      "listen = unix:///tmp/x.sock\n"
      "metrics-listen = 127.0.0.1:0\n"
      "grace = 3s\n"
      "series-ttl = 5m\n"
      "max-events = 77\n"
      "socket-mode = 0660\n"
      "drain-timeout = 250ms\n");
  auto o = Parse({"--config", path_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->config_file, path_);
  EXPECT_FALSE(o->check_config);
  ASSERT_THAT(o->listen, SizeIs(1));
  EXPECT_EQ(o->listen[0].path, "/tmp/x.sock");
  EXPECT_EQ(o->metrics_listen, "127.0.0.1:0");
  EXPECT_EQ(o->aggregator.grace_ms, 3'000);
  EXPECT_EQ(o->aggregator.series_ttl_ms, 300'000);
  EXPECT_EQ(o->ingest.client_memory_ms, 300'000);  // follows series-ttl, as on the command line
  EXPECT_EQ(o->max_events, 77u);
  EXPECT_EQ(o->socket_mode, 0660u);
  EXPECT_EQ(o->drain_timeout_ms, 250);
}

TEST_F(ConfigFileTest, TheCommandLineOverridesTheFileWhereverItStands) {
  Write("grace = 3s\nmax-events = 77\n");
  auto before = Parse({"--grace", "5s", "--config", path_});
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->aggregator.grace_ms, 5'000);
  EXPECT_EQ(before->max_events, 77u);
  auto after = Parse({"--config=" + path_, "--grace=7s"});
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->aggregator.grace_ms, 7'000);
}

TEST_F(ConfigFileTest, CommandLineListenersReplaceTheFilesInsteadOfAdding) {
  Write("listen = unix:///tmp/a.sock\nlisten = :7070\n");
  auto file_only = Parse({"--config", path_});
  ASSERT_TRUE(file_only.ok()) << file_only.status();
  EXPECT_THAT(file_only->listen, SizeIs(2));
  auto replaced = Parse({"--config", path_, "--listen", "unix:///tmp/b.sock"});
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  ASSERT_THAT(replaced->listen, SizeIs(1));
  EXPECT_EQ(replaced->listen[0].path, "/tmp/b.sock");
}

TEST_F(ConfigFileTest, SocketGroupInTheFileOpensTheModeUnlessAModeIsGiven) {
  // As on the command line: a group implies 0660 unless --socket-mode says.
  Write("socket-group = root\n");
  auto implied = Parse({"--config", path_});
  ASSERT_TRUE(implied.ok()) << implied.status();
  EXPECT_EQ(implied->socket_mode, 0660u);
  auto explicit_mode = Parse({"--config", path_, "--socket-mode", "0600"});
  ASSERT_TRUE(explicit_mode.ok()) << explicit_mode.status();
  EXPECT_EQ(explicit_mode->socket_mode, 0600u);
}

TEST_F(ConfigFileTest, CheckConfigReadsTheFileAndSaysSo) {
  Write("grace = 3s\n");
  auto o = Parse({"--check-config", path_});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->check_config);
  EXPECT_EQ(o->config_file, path_);
  EXPECT_EQ(o->aggregator.grace_ms, 3'000);
}

TEST_F(ConfigFileTest, BadSettingsNameTheFileLineAndFlag) {
  Write("# header\ngrace = soon\n");
  EXPECT_THAT(ErrorOf({"--config", path_}), HasSubstr(path_ + ":2: --grace"));
  Write("grace = 1s\nwindow-size = 1s\n");
  EXPECT_THAT(ErrorOf({"--config", path_}),
              HasSubstr(path_ + ":2: unknown setting \"window-size\""));
  Write("socket-mode = 0999\n");
  EXPECT_THAT(ErrorOf({"--config", path_}), HasSubstr(path_ + ":1: --socket-mode \"0999\""));
}

TEST_F(ConfigFileTest, CommandLineOnlyFlagsAreNotSettings) {
  for (const char* name : {"help", "version", "config", "check-config"}) {
    Write(absl::StrCat(name, " = x\n"));
    EXPECT_THAT(ErrorOf({"--config", path_}),
                HasSubstr(absl::StrCat(path_, ":1: ", name, " is a command-line flag")));
  }
}

TEST_F(ConfigFileTest, OneConfigurationFileAtMost) {
  Write("grace = 1s\n");
  EXPECT_THAT(ErrorOf({"--config", path_, "--check-config", path_}),
              HasSubstr("give one configuration file"));
  EXPECT_THAT(ErrorOf({"--config", ""}), HasSubstr("--config is empty"));
  EXPECT_THAT(ErrorOf({"--config"}), HasSubstr("--config needs a value"));
}

TEST_F(ConfigFileTest, UnreadableFilesAreRefusedByName) {
  auto missing = ReadConfigFile(dir_ + "/absent.conf");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("cannot read the configuration file \"" + dir_ + "/absent.conf\""));
  auto directory = ReadConfigFile(dir_);
  EXPECT_THAT(std::string(directory.status().message()), HasSubstr("is a directory"));
  EXPECT_THAT(ErrorOf({"--config", dir_ + "/absent.conf"}), HasSubstr("No such file"));
}

}  // namespace
}  // namespace torchmon::server

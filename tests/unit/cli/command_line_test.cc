// torchmonctl's usage text, written from the parser's flag tables: what
// --help shows is what ParseCommandLine accepts, in 80 columns.
#include "cli/command_line.h"
#include "cli/usage_text.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::vector<std::string> kCommands = {"series", "windows", "events", "watch",
                                            "ranks",  "top",     "push",   "event"};

// The flags listed in a usage text: the first word of each "  --flag" line
// and each "-h, --help" spelling, up to the global section if `own_only`.
std::vector<std::string> ListedFlags(const std::string& usage, bool own_only) {
  std::vector<std::string> flags;
  for (absl::string_view line : absl::StrSplit(usage, '\n')) {
    if (own_only && absl::StartsWith(line, "Global flags")) break;
    if (!absl::StartsWith(line, "  -")) continue;
    line.remove_prefix(2);
    // The help starts at column 22, after two spaces or fewer.
    line = line.substr(0, std::min(line.find("  "), size_t{20}));
    for (absl::string_view word : absl::StrSplit(line, ", ")) {
      flags.emplace_back(word.substr(0, word.find(' ')));
    }
  }
  return flags;
}

// A value each flag accepts, so that only an unknown flag can fail.
std::string ValueFor(const std::string& flag) {
  if (flag == "--label") return "k=v";
  if (flag == "--agg") return "max";
  if (flag == "--window" || flag == "--since" || flag == "--timeout" || flag == "--interval") {
    return "1s";
  }
  if (flag == "--last" || flag == "--count" || flag == "--max-samples" || flag == "--at" ||
      flag == "--window-start") {
    return "5";
  }
  return "x";
}

std::vector<std::string> ArgumentsOf(const std::string& command) {
  if (command == "windows" || command == "ranks") return {"s"};
  if (command == "push") return {"s", "1"};
  if (command == "event") return {"e"};
  return {};
}

TEST(UsageTextTest, EveryLineFitsInEightyColumns) {
  std::vector<std::string> texts = {UsageText("")};
  for (const std::string& command : kCommands) texts.push_back(UsageText(command));
  for (const std::string& text : texts) {
    ASSERT_TRUE(absl::EndsWith(text, "\n"));
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      EXPECT_LE(line.size(), 80u) << line;
    }
  }
}

TEST(UsageTextTest, EveryFlagACommandListsIsOneItsParserAccepts) {
  for (const std::string& command : kCommands) {
    const std::string usage = UsageText(command);
    EXPECT_THAT(usage, StartsWith("Usage: torchmonctl " + command + " "));
    const std::vector<std::string> flags = ListedFlags(usage, /*own_only=*/false);
    ASSERT_GE(flags.size(), 10u) << usage;  // its own, and the nine global spellings
    for (const std::string& flag : flags) {
      std::vector<std::string> args = {command};
      for (const std::string& a : ArgumentsOf(command)) args.push_back(a);
      args.push_back(flag);
      const bool no_value = flag == "--json" || flag == "--histogram";
      if (!no_value && flag != "--help" && flag != "-h") args.push_back(ValueFor(flag));
      auto parsed = ParseCommandLine(args, "unix:///tmp/x.sock");
      EXPECT_TRUE(parsed.ok()) << command << " " << flag << ": " << parsed.status();
    }
    // A synopsis names each of the command's own flags.
    const std::string synopsis = usage.substr(0, usage.find("\n\n"));
    for (const std::string& flag : ListedFlags(usage, /*own_only=*/true)) {
      EXPECT_THAT(synopsis, HasSubstr("[" + flag)) << command;
    }
  }
}

// `ranks` with no STAT compares the straggler split's compute time.
TEST(RanksCommandTest, WithoutAStatItComparesTheStragglerSplit) {
  auto parsed = ParseCommandLine({"ranks"}, "unix:///tmp/x.sock");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(std::get<RanksCommand>(parsed->command).stat, "torch.dist.compute_s");
  parsed = ParseCommandLine({"ranks", "train.*"}, "unix:///tmp/x.sock");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(std::get<RanksCommand>(parsed->command).stat, "train.*");
  EXPECT_FALSE(ParseCommandLine({"ranks", "a", "b"}, "unix:///tmp/x.sock").ok());
}

TEST(UsageTextTest, AFlagOfAnotherCommandIsNeitherListedNorAccepted) {
  const std::vector<std::string> series = ListedFlags(UsageText("series"), true);
  EXPECT_EQ(series, (std::vector<std::string>{"--stat", "--label"}));
  auto parsed = ParseCommandLine({"series", "--window", "1s"}, "unix:///tmp/x.sock");
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().message(), "unknown flag --window for command series");
}

TEST(UsageTextTest, TheToolsUsageListsEveryCommandWithItsSynopsis) {
  const std::string tool = UsageText("");
  EXPECT_THAT(tool, StartsWith("Usage: torchmonctl [--target ADDR] [--json] "));
  EXPECT_THAT(tool, HasSubstr("[--tls-ca FILE [--tls-cert FILE --tls-key FILE]] COMMAND ...\n"));
  for (const std::string& command : kCommands) {
    const std::string usage = UsageText(command);
    // "Usage: torchmonctl push STAT..." appears as "  push STAT..." (its
    // first line, which the tool's list wraps at a different column).
    std::string first = usage.substr(0, usage.find('\n'));
    first = first.substr(first.find(command + " "));
    const std::string head = first.substr(0, first.find(" [--", first.find(' ') + 1));
    EXPECT_THAT(tool, HasSubstr("\n  " + head)) << command;
  }
  EXPECT_EQ(UsageText("no-such-command"), tool);
}

// The layout, on one whole text: synopsis, paragraph, the flags with their
// help at column 22, then the global flags.
TEST(UsageTextTest, SeriesUsageIsLaidOutAsDocumented) {
  const std::string usage = UsageText("series");
  EXPECT_THAT(usage, StartsWith(
                         "Usage: torchmonctl series [--stat GLOB] [--label k=v]...\n"
                         "\n"
                         "Lists the series matching the selector: definition, counters and "
                         "last window.\n"
                         "\n"
                         "  --stat GLOB         stat name, exact or a glob (* any run, ? one "
                         "character)\n"
                         "  --label k=v         only series whose label k equals v; repeatable\n"
                         "\n"
                         "Global flags (before or after the command):\n"
                         "  --target ADDR       daemon address: unix:///path, /path or "
                         "host:port\n"
                         "                      (default: $TORCHMON_TARGET, else the default "
                         "socket)\n"));
  EXPECT_THAT(usage, HasSubstr("\n  --tls-server-name NAME\n"
                               "                      name the daemon's certificate must"));
  EXPECT_THAT(usage, HasSubstr("\n  -h, --help          show this help\n"));
}

}  // namespace
}  // namespace torchmon::cli

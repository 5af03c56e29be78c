// RateLimitedLog: the first line of a kind at once, the rest counted and
// summed up once per interval, on a ManualClock.
#include "server/core/rate_limited_log.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/clock.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

class RateLimitedLogTest : public ::testing::Test {
 protected:
  ManualClock clock_{1'000'000};
  std::vector<std::string> lines_;
  RateLimitedLog log_{clock_, 60'000, [this](const std::string& line) { lines_.push_back(line); }};
};

TEST_F(RateLimitedLogTest, AThousandOccurrencesMakeOneLineThenOneSummaryPerInterval) {
  for (int i = 0; i < 1000; ++i) log_.Report("refused a TLS handshake", "attempt " + std::to_string(i));
  log_.Report("refused a call without an accepted bearer token", "no token");
  EXPECT_THAT(lines_, ElementsAre("refused a TLS handshake: attempt 0 (more of these are counted "
                                  "and summed up every 60 s)",
                                  "refused a call without an accepted bearer token: no token (more "
                                  "of these are counted and summed up every 60 s)"));
  lines_.clear();
  clock_.Advance(59'999);
  log_.Flush();
  EXPECT_THAT(lines_, IsEmpty());  // not before the interval
  clock_.Advance(1);
  log_.Flush();
  // The token's kind had nothing more: no summary.
  EXPECT_THAT(lines_, ElementsAre("refused a TLS handshake: 999 more in the last 60 s, the last: "
                                  "attempt 999"));
  EXPECT_EQ(log_.lines_written(), 3u);
}

TEST_F(RateLimitedLogTest, AKindQuietForAnIntervalIsWrittenAtOnceAgain) {
  log_.Report("k", "first");
  clock_.Advance(60'000);
  log_.Flush();  // nothing counted: forgotten
  log_.Report("k", "again");
  EXPECT_THAT(lines_, ElementsAre("k: first (more of these are counted and summed up every 60 s)",
                                  "k: again (more of these are counted and summed up every 60 s)"));
}

TEST_F(RateLimitedLogTest, ShutdownWritesWhatIsPendingAndAClientCannotForgeLines) {
  log_.Report("k", "first");
  log_.Report("k", "evil\ntorchmond: stopped: 0 series");
  clock_.Advance(1500);
  log_.Flush(/*everything=*/true);
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_EQ(lines_[1], "k: 1 more in the last 1500 ms, the last: evil\\x0atorchmond: stopped: 0 "
                       "series");
  // Long details are cut.
  log_.Report("long", std::string(10'000, 'x'));
  EXPECT_LT(lines_.back().size(), 500u);
}

}  // namespace
}  // namespace torchmon::server

// torchmon::WaitCounter against a real daemon: the one rule that turns a
// wait counter's key into series (torchmon._WaitCounter and the backend of
// PyTorch's own wait counters are built on it; docs/torch-metrics.md).
#include "torchmon/wait_counter.h"

#include <chrono>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_fixture.h"

namespace torchmon::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class WaitCounterTest : public DaemonFixture {
 protected:
  void SetUp() override { StartDaemon(); }
};

TEST_F(WaitCounterTest, AKeyIsNamedWaitSAndActive) {
  EXPECT_EQ(WaitCounter::WaitStatName("pytorch.wait_counter.TCPStore__get"),
            "pytorch.wait_counter.TCPStore__get.wait_s");
  EXPECT_EQ(WaitCounter::ActiveStatName("data.loader"), "data.loader.active");
}

TEST_F(WaitCounterTest, WaitsBecomeCountSumMaxAndAHistogramAndTheInFlightCount) {
  Client client(Options());
  WaitCounter counter(client, "cpp.wait");
  counter.Begin();
  counter.Begin();
  EXPECT_EQ(counter.in_flight(), 2);
  counter.End(std::chrono::milliseconds(250));
  counter.End(std::chrono::milliseconds(500));
  counter.Begin();
  counter.End(std::chrono::nanoseconds(-5));  // a clock that went back: 0
  EXPECT_EQ(counter.in_flight(), 0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());

  const v1::SeriesInfo wait = OnlySeries("cpp.wait.wait_s");
  EXPECT_EQ(wait.counters().accepted(), 3u);
  EXPECT_THAT(wait.spec().aggregations(),
              ElementsAre(v1::COUNT, v1::SUM, v1::MAX));
  EXPECT_TRUE(wait.spec().histogram());
  EXPECT_EQ(wait.spec().window_size_ms(), 10000);
  const v1::SeriesInfo active = OnlySeries("cpp.wait.active");
  EXPECT_EQ(active.counters().accepted(), 6u);  // at each begin and end
  EXPECT_THAT(active.spec().aggregations(), ElementsAre(v1::VALUE, v1::MAX));

  // The histogram holds every wait since the series began: no window to
  // wait for.
  const std::string scrape = Scrape();
  EXPECT_EQ(Scraped(scrape, "torchmon_stat_distribution_count", {"stat=\"cpp.wait.wait_s\""}), 3);
  EXPECT_DOUBLE_EQ(
      Scraped(scrape, "torchmon_stat_distribution_sum", {"stat=\"cpp.wait.wait_s\""}), 0.75);
}

TEST_F(WaitCounterTest, AKeyThatIsNoStatNameDropsItsWaitsAndSaysWhy) {
  Client client(Options());
  WaitCounter counter(client, std::string(1100, 'k'));
  counter.Begin();
  counter.End(std::chrono::milliseconds(1));
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  const std::vector<std::string> errors = client.TakeErrors();
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr("INVALID_ARGUMENT"));
  EXPECT_TRUE(ListSeries("kkk*").empty());
}

}  // namespace
}  // namespace torchmon::testing

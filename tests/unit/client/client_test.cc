// torchmon::Client and Stat without a daemon: what a training process sees
// when torchmond is not running, and how invalid definitions are reported.
#include "torchmon/client.h"

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "detail/client_core.h"
#include "detail/sender_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

// A target that no daemon listens on: a socket path in a fresh empty
// directory.
class ClientWithoutDaemonTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/torchmon-client-test.XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    target_ = "unix://" + dir_ + "/absent.sock";
  }
  void TearDown() override { rmdir(dir_.c_str()); }

  ClientOptions Options() const {
    ClientOptions o;
    o.target = target_;
    o.labels = {{"rank", "0"}};
    o.labels_from_environment = false;
    o.log_to_stderr = false;
    o.destructor_flush_timeout = std::chrono::milliseconds(0);
    return o;
  }

  std::string dir_;
  std::string target_;
};

// Moves a manual clock on in small steps until stopped, as time passes.
class ClockMover {
 public:
  explicit ClockMover(detail::ManualSenderClock& clock)
      : thread_([this, &clock] {
          while (!stop_.load()) {
            clock.Advance(std::chrono::milliseconds(5));
            std::this_thread::yield();
          }
        }) {}
  ~ClockMover() {
    stop_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_F(ClientWithoutDaemonTest, FlushReturnsDeadlineExceededOnceItsClockPassesTheTimeout) {
  // On a manual clock: the flush waits 200 ms of the client's time, not of
  // the test's.
  detail::ManualSenderClock clock;
  auto client = detail::ClientInternals::WithClock(Options(), clock);
  Stat stat(*client, "loss", {Aggregation::MEAN}, std::chrono::seconds(1));
  stat.add(1.0);
  const auto start = clock.Now();
  absl::Status status;
  {
    ClockMover mover(clock);
    status = client->Flush(std::chrono::milliseconds(200));
  }
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(target_));
  EXPECT_GE(clock.Now() - start, std::chrono::milliseconds(200));
}

TEST_F(ClientWithoutDaemonTest, AFlushWaitsAsLongAsItsClockStandsStill) {
  detail::ManualSenderClock clock;
  auto client = detail::ClientInternals::WithClock(Options(), clock);
  Stat stat(*client, "loss", {Aggregation::MEAN}, std::chrono::seconds(1));
  stat.add(1.0);
  std::atomic<bool> returned{false};
  std::thread flusher([&] {
    EXPECT_EQ(client->Flush(std::chrono::milliseconds(200)).code(),
              absl::StatusCode::kDeadlineExceeded);
    returned.store(true);
  });
  // Once the flush waits (its deadline taken), 199 ms of the client's time,
  // however long the test takes: not yet.
  while (clock.Waiting() == 0) std::this_thread::yield();
  clock.Advance(std::chrono::milliseconds(199));
  for (int i = 0; i < 100; ++i) std::this_thread::yield();
  EXPECT_FALSE(returned.load());
  clock.Advance(std::chrono::milliseconds(1));
  flusher.join();
  EXPECT_TRUE(returned.load());
}

TEST_F(ClientWithoutDaemonTest, TheDestructorsFlushTimeoutIsMeasuredOnTheClientsClock) {
  detail::ManualSenderClock clock;
  ClientOptions o = Options();
  o.destructor_flush_timeout = std::chrono::seconds(30);
  auto client = detail::ClientInternals::WithClock(o, clock);
  auto stat = std::make_unique<Stat>(*client, "loss", std::vector<StatAggregation>{Aggregation::MEAN},
                                     std::chrono::seconds(1));
  stat->add(1.0);
  const auto start = clock.Now();
  {
    ClockMover mover(clock);
    client.reset();  // flushes for 30 s of its clock, then stops
  }
  EXPECT_GE(clock.Now() - start, std::chrono::seconds(30));
  EXPECT_EQ(stat->dropped(), 1u);  // never delivered: dropped once stopped
}

TEST_F(ClientWithoutDaemonTest, FlushWithNothingRecordedSucceedsAtOnce) {
  Client client(Options());
  EXPECT_TRUE(client.Flush(std::chrono::milliseconds(200)).ok());
}

TEST_F(ClientWithoutDaemonTest, StatsCountEverySampleAddedAndNothingSent) {
  Client client(Options());
  Stat a(client, "a", {Aggregation::SUM}, std::chrono::seconds(1));
  Stat b(client, "b", {Aggregation::MAX}, std::chrono::seconds(1));
  for (int i = 0; i < 3; ++i) a.add(i);
  for (int i = 0; i < 5; ++i) b.add(i, 1000 + i);
  client.LogEvent(Event("epoch_end", {{"epoch", int64_t{1}}}));
  const ClientStats stats = client.Stats();
  EXPECT_EQ(stats.samples_added, 8u);
  EXPECT_EQ(stats.samples_sent, 0u);
  EXPECT_EQ(stats.samples_dropped, 0u);
  EXPECT_EQ(stats.events_logged, 1u);
  EXPECT_EQ(stats.events_sent, 0u);
  EXPECT_EQ(stats.batches_sent, 0u);
  EXPECT_EQ(stats.connects, 0u);
  EXPECT_EQ(a.added(), 3u);
  EXPECT_EQ(b.added(), 5u);
}

TEST_F(ClientWithoutDaemonTest, AddBeyondTheBudgetDropsAndCountsEveryExtraSample) {
  ClientOptions o = Options();
  o.buffer_bytes = ClientOptions::kMinBufferBytes;
  Client client(o);
  Stat stat(client, "busy", {Aggregation::COUNT}, std::chrono::seconds(1));
  // Nothing is sent without a daemon: what the budget holds stays buffered.
  constexpr uint64_t kAdds = 200000;
  for (uint64_t i = 0; i < kAdds; ++i) stat.add(static_cast<double>(i));
  EXPECT_EQ(stat.added(), kAdds);
  // At most the budget less its reserve, 24 bytes a sample.
  const uint64_t most = (o.buffer_bytes - o.buffer_bytes / 8) / 24;
  EXPECT_GE(stat.dropped(), kAdds - most);
  EXPECT_LT(stat.dropped(), kAdds);
  EXPECT_EQ(client.Stats().samples_added, kAdds);
  EXPECT_EQ(client.Stats().samples_dropped, stat.dropped());
  // The flooded budget still has room for another thread's first samples
  // (the flooding thread's own log holds at most half the budget, and the
  // last eighth serves only a log's first chunk). Another stat added to
  // from the flooding thread shares its full log until the sender drains
  // it, which a full log makes it do at once when a daemon is there.
  Stat quiet(client, "quiet", {Aggregation::COUNT}, std::chrono::seconds(1));
  std::thread([&] {
    for (int i = 0; i < 6; ++i) quiet.add(i);
  }).join();
  EXPECT_EQ(quiet.dropped(), 0u);
  EXPECT_EQ(quiet.added(), 6u);
}

TEST_F(ClientWithoutDaemonTest, ABudgetTooSmallForOneBatchIsRefusedNamingTheField) {
  ClientOptions o = Options();
  o.buffer_bytes = 1000;
  try {
    Client client(o);
    FAIL() << "a 1000-byte budget was accepted";
  } catch (const std::invalid_argument& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ClientOptions::buffer_bytes is 1000"), std::string::npos) << message;
    EXPECT_NE(message.find("at least 2097152"), std::string::npos) << message;
  }
  o.buffer_bytes = ClientOptions::kMinBufferBytes;
  Client smallest(o);
  Stat stat(smallest, "fits", {Aggregation::COUNT}, std::chrono::seconds(1));
  stat.add(1);
  EXPECT_EQ(stat.dropped(), 0u);
}

TEST_F(ClientWithoutDaemonTest, StatOutlivingItsClientCountsLaterSamplesAsDropped) {
  auto client = std::make_unique<Client>(Options());
  Stat stat(*client, "orphan", {Aggregation::SUM}, std::chrono::seconds(1));
  stat.add(1.0);
  client.reset();
  stat.add(2.0);
  stat.add(3.0, 12345);
  EXPECT_EQ(stat.added(), 3u);
  EXPECT_EQ(stat.dropped(), 3u);
  EXPECT_EQ(stat.name(), "orphan");
}

TEST_F(ClientWithoutDaemonTest, EventBeyondTheQueueIsDroppedAndCounted) {
  ClientOptions o = Options();
  o.max_buffered_events = 2;
  Client client(o);
  for (int i = 0; i < 5; ++i) client.LogEvent(Event("tick", {{"i", int64_t{i}}}));
  const ClientStats stats = client.Stats();
  EXPECT_EQ(stats.events_logged, 5u);
  EXPECT_EQ(stats.events_dropped, 3u);
}

TEST_F(ClientWithoutDaemonTest, TargetAndLabelsAreTheResolvedOnes) {
  ClientOptions o = Options();
  o.labels = {{"rank", "3"}, {"job", "j1"}};
  Client client(o);
  EXPECT_EQ(client.target(), target_);
  EXPECT_THAT(client.labels(), ElementsAre(std::make_pair(std::string("rank"), std::string("3")),
                                           std::make_pair(std::string("job"), std::string("j1"))));
}

class InvalidStatTest : public ClientWithoutDaemonTest {
 protected:
  // The one error TakeErrors reports for `stat`, which must drop its samples.
  std::string OnlyError(Client& client, Stat& stat) {
    stat.add(1.0);
    stat.add(2.0);
    EXPECT_EQ(stat.added(), 2u);
    EXPECT_EQ(stat.dropped(), 2u);
    std::vector<std::string> errors = client.TakeErrors();
    EXPECT_THAT(errors, SizeIs(1));
    EXPECT_THAT(client.TakeErrors(), IsEmpty());
    return errors.empty() ? "" : errors[0];
  }
};

TEST_F(InvalidStatTest, EmptyNameIsRecordedAsAnError) {
  Client client(Options());
  Stat stat(client, "", {Aggregation::MEAN}, std::chrono::seconds(1));
  EXPECT_THAT(OnlyError(client, stat),
              AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("stat name is empty")));
}

TEST_F(InvalidStatTest, AnOverlongNameIsQuotedShortInItsError) {
  Client client(Options());
  const std::string name(100000, 'x');
  Stat stat(client, name, {Aggregation::MEAN}, std::chrono::seconds(1));
  const std::string error = OnlyError(client, stat);
  EXPECT_THAT(error, AllOf(HasSubstr("INVALID_ARGUMENT"), HasSubstr("100000 bytes long")));
  // The name shortened in the message, not 100 KB on stderr.
  EXPECT_LT(error.size(), 400u) << error.substr(0, 200);
}

TEST_F(InvalidStatTest, WindowBelowTheMinimumIsRecordedAsAnError) {
  Client client(Options());
  Stat stat(client, "fast", {Aggregation::MEAN}, std::chrono::milliseconds(1));
  EXPECT_THAT(OnlyError(client, stat),
              AllOf(HasSubstr("\"fast\""), HasSubstr("window_size_ms 1 is outside")));
}

TEST_F(InvalidStatTest, ReservedLabelKeyIsRecordedAsAnError) {
  Client client(Options());
  Stat stat(client, "tagged", {Aggregation::MEAN}, std::chrono::seconds(1), 0, {{"stat", "x"}});
  EXPECT_THAT(OnlyError(client, stat),
              AllOf(HasSubstr("\"tagged\""), HasSubstr("label key \"stat\" is reserved")));
}

TEST_F(InvalidStatTest, LabelThatIsAlsoAnIdentityLabelIsRecordedAsAnError) {
  Client client(Options());
  Stat stat(client, "dup", {Aggregation::MEAN}, std::chrono::seconds(1), 0, {{"rank", "1"}});
  EXPECT_THAT(OnlyError(client, stat), HasSubstr("label \"rank\" is also an identity label"));
}

TEST_F(InvalidStatTest, NoAggregationsIsRecordedAsAnError) {
  Client client(Options());
  Stat stat(client, "none", {}, std::chrono::seconds(1));
  EXPECT_THAT(OnlyError(client, stat), HasSubstr("aggregations is empty"));
}

TEST_F(InvalidStatTest, LabelsGivenInStatOptionsAreCheckedAsTheLabelsArgumentIs) {
  Client client(Options());
  StatOptions options;
  options.labels = {{"stat", "x"}};
  Stat stat(client, "tagged", {Aggregation::MEAN}, std::chrono::seconds(1), options);
  EXPECT_THAT(OnlyError(client, stat),
              AllOf(HasSubstr("\"tagged\""), HasSubstr("label key \"stat\" is reserved")));
}

TEST_F(InvalidStatTest, MaxSamplesGivenInStatOptionsIsCheckedAsTheArgumentIs) {
  Client client(Options());
  StatOptions options;
  options.max_samples = -1;
  Stat stat(client, "capped", {Aggregation::MEAN}, std::chrono::seconds(1), options);
  EXPECT_THAT(OnlyError(client, stat), HasSubstr("max_samples"));
}

// Unlike no aggregations at all (NoAggregationsIsRecordedAsAnError).
TEST_F(ClientWithoutDaemonTest, AHistogramWithoutAggregationsIsAValidStat) {
  Client client(Options());
  StatOptions options;
  options.histogram = true;
  Stat stat(client, "distribution", {}, std::chrono::seconds(1), options);
  stat.add(1.0);
  EXPECT_EQ(stat.added(), 1u);
  EXPECT_EQ(stat.dropped(), 0u);
  EXPECT_THAT(client.TakeErrors(), IsEmpty());
}

TEST_F(InvalidStatTest, InvalidStatDoesNotHoldUpFlush) {
  Client client(Options());
  Stat stat(client, "", {Aggregation::MEAN}, std::chrono::seconds(1));
  stat.add(1.0);
  EXPECT_TRUE(client.Flush(std::chrono::milliseconds(200)).ok());
}

TEST_F(ClientWithoutDaemonTest, InvalidClientLabelIsRecordedAndIgnored) {
  ClientOptions o = Options();
  o.labels = {{"rank", "0"}, {"agg", "x"}};
  Client client(o);
  EXPECT_THAT(client.labels(), ElementsAre(std::make_pair(std::string("rank"), std::string("0"))));
  EXPECT_THAT(client.TakeErrors(),
              ElementsAre(AllOf(HasSubstr("client label ignored"), HasSubstr("\"agg\""))));
}

}  // namespace
}  // namespace torchmon

// Stats made and destroyed against the real torchmond: the ids of destroyed
// Stats are reused (StatRegistry) without a sample ever crossing from one
// Stat to the next, a process that makes Stats in a loop keeps its memory
// flat, and Flush waits for a redefinition to settle.
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "detail/client_core.h"
#include "detail/sender_clock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_fixture.h"
#include "torchmon/client.h"

namespace torchmon::testing {
namespace {

using StatLifetimeTest = DaemonFixture;
using Clock = std::chrono::steady_clock;

#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define TORCHMON_TEST_UNDER_SANITIZER 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TORCHMON_TEST_UNDER_SANITIZER 1
#endif

#ifdef TORCHMON_TEST_UNDER_SANITIZER
constexpr bool kUnderSanitizer = true;
#else
constexpr bool kUnderSanitizer = false;
#endif

// How many Stats the loop makes: $TORCHMON_STAT_LOOP_COUNT, else 20
// million (200,000 under a sanitizer, whose runtime makes each make and
// destroy tens of times slower).
uint64_t LoopCount() {
  uint64_t n = 0;
  if (const char* env = std::getenv("TORCHMON_STAT_LOOP_COUNT");
      env != nullptr && absl::SimpleAtoi(env, &n) && n >= 1000) {
    return n;
  }
  return kUnderSanitizer ? 200'000 : 20'000'000;
}

// This process's resident memory, in bytes.
uint64_t ResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    uint64_t kib = 0;
    if (line.rfind("VmRSS:", 0) == 0 && absl::SimpleAtoi(line.substr(6, line.size() - 9), &kib)) {
      return kib * 1024;
    }
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

// A job that makes a Stat per step and lets it go, twenty million times
// (each of the old client's 80 bytes per Stat ever made would be 1.6 GB
// here, and it refused Stats past 2^24 - 1): every tenth records a sample,
// so ids are in flight (buffered, in unacknowledged batches) when their
// Stat is destroyed and the loop goes on making Stats. The ids in use stay
// few, the process's memory flat, and the daemon counts every sample
// exactly: a sample of 20 Stats with series of their own, the rest
// together in one series.
TEST_F(StatLifetimeTest, StatsMadeAndDestroyedInALoopKeepMemoryFlatAndCountExactly) {
  StartDaemon({"--grace", "60s"});  // no sample can be late
  Client client(Options());
  const uint64_t n = LoopCount();
  const uint64_t sampled_every = n / 20;
  const std::vector<StatAggregation> count = {Aggregation::COUNT};
  const std::string shared = "loop.shared";
  uint64_t shared_samples = 0;
  uint64_t samples = 0;
  std::vector<uint64_t> sampled_samples;

  // Past the warm-up, the Stats waiting for their release and the ids in
  // use hold steady, and so does the heap.
  const uint64_t warm_up = std::min<uint64_t>(n / 4, 1'000'000);
  uint64_t rss_warm = 0;
  uint64_t rss_peak = 0;
  const Clock::time_point start = Clock::now();
  for (uint64_t i = 0; i < n; ++i) {
    if (i % sampled_every == 0) {
      const uint64_t k = i / sampled_every;
      Stat stat(client, absl::StrCat("loop.sampled.", k), count, std::chrono::seconds(10));
      sampled_samples.push_back(k % 5 + 1);
      for (uint64_t s = 0; s < sampled_samples.back(); ++s) stat.add(1.0);
      samples += sampled_samples.back();
    } else {
      Stat stat(client, shared, count, std::chrono::seconds(10));
      if (i % 10 == 1) {
        stat.add(1.0);
        ++shared_samples;
        ++samples;
      }
    }
    if ((i + 1) % warm_up == 0) {
      const uint64_t rss = ResidentBytes();
      if (i + 1 == warm_up) rss_warm = rss;
      rss_peak = std::max(rss_peak, rss);
    }
  }
  const double loop_s = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(client.Flush(std::chrono::seconds(60)).ok());
  const double flushed_s = std::chrono::duration<double>(Clock::now() - start).count();
  const uint32_t largest_id = detail::ClientInternals::LargestStatId(client);
  std::cout << n << " Stats made and destroyed in " << loop_s << " s (" << n / loop_s / 1e6
            << " M/s), flushed after " << flushed_s << " s; largest id " << largest_id << "; RSS "
            << rss_warm / 1e6 << " MB after " << warm_up << ", at most " << rss_peak / 1e6
            << " MB\n";

  EXPECT_TRUE(client.TakeErrors().empty());
  const ClientStats stats = client.Stats();
  EXPECT_EQ(stats.samples_added, samples);
  EXPECT_EQ(stats.samples_delivered, samples);
  EXPECT_EQ(stats.samples_dropped, 0u);
  EXPECT_EQ(stats.errors, 0u);
  EXPECT_EQ(OnlySeries(shared).counters().accepted(), shared_samples);
  for (uint64_t k = 0; k < sampled_samples.size(); ++k) {
    EXPECT_EQ(OnlySeries(absl::StrCat("loop.sampled.", k)).counters().accepted(),
              sampled_samples[k])
        << k;
  }
  // Ids are reused: far fewer than the Stats made (the old client handed
  // out one each, and refused Stats past 2^24 - 1); the tables hold that
  // many entries.
  EXPECT_LT(largest_id, std::min<uint64_t>(n / 2, uint64_t{1} << 20));
  // And memory is flat past the warm-up: within 64 MiB, where the old
  // client's 80 bytes per Stat made grew by 1.5 GB over 20 million. (Not
  // under a sanitizer, whose allocator keeps freed memory in quarantine.)
  if (!kUnderSanitizer) {
    EXPECT_LT(rss_peak - rss_warm, uint64_t{64} << 20);
  }
}

// Stats of two series, made and destroyed in turn, each with samples still
// buffered when it goes: the next ones take their ids once those samples
// are acknowledged, and not one sample lands in the other series (whose
// window and values differ), however often an id changes hands.
TEST_F(StatLifetimeTest, AReusedIdNeverCarriesTheOldStatsSamplesIntoTheNewOnes) {
  StartDaemon({"--grace", "60s"});
  Client client(Options());
  constexpr int kRounds = kUnderSanitizer ? 2'000 : 20'000;
  uint64_t a_samples = 0;
  uint64_t b_samples = 0;
  for (int r = 0; r < kRounds; ++r) {
    {
      Stat a(client, "reuse.a", {Aggregation::COUNT, Aggregation::SUM}, std::chrono::seconds(10));
      for (int s = 0; s <= r % 3; ++s, ++a_samples) a.add(1.0);
    }
    {
      Stat b(client, "reuse.b", {Aggregation::COUNT, Aggregation::SUM}, std::chrono::seconds(20));
      for (int s = 0; s <= r % 4; ++s, ++b_samples) b.add(1000.0);
    }
    // Now and then a flush: ids are freed in between, and handed out again
    // at once to the other series' Stats.
    if (r % 100 == 99) {
      ASSERT_TRUE(client.Flush(std::chrono::seconds(30)).ok());
    }
  }
  ASSERT_TRUE(client.Flush(std::chrono::seconds(30)).ok());
  const uint32_t largest_id = detail::ClientInternals::LargestStatId(client);
  std::cout << 2 * kRounds << " Stats of two series: largest id " << largest_id << "\n";
  // Ids were reused: at most a quarter of the Stats had an id of their own.
  EXPECT_LT(largest_id, static_cast<uint32_t>(kRounds / 2));
  EXPECT_TRUE(client.TakeErrors().empty());
  const v1::SeriesInfo a = OnlySeries("reuse.a");
  const v1::SeriesInfo b = OnlySeries("reuse.b");
  EXPECT_EQ(a.counters().accepted(), a_samples);
  EXPECT_EQ(b.counters().accepted(), b_samples);
  EXPECT_EQ(a.counters().client_dropped() + b.counters().client_dropped(), 0u);

  // Each series' windows sum its own values only: the windows, all open
  // (grace 60 s), as a watcher gets them when SIGTERM closes them.
  auto stub = daemon_->QueryStub();
  grpc::ClientContext context;
  auto reader = stub->WatchWindows(&context, v1::WatchWindowsRequest());
  std::map<std::string, std::pair<double, uint64_t>> sum_and_count;
  std::thread watcher([&] {
    v1::WindowSummary w;
    while (reader->Read(&w)) {
      auto& [sum, accepted] = sum_and_count[w.series().stat()];
      sum += Aggregate(w, v1::SUM);
      accepted += w.accepted();
    }
  });
  // The watch is open once the daemon counts it.
  EXPECT_TRUE(WaitFor(
      [&] {
        auto watchers = ScrapeValue(Scrape(), "torchmon_daemon_watchers", {});
        return watchers.ok() && *watchers == 1;
      },
      std::chrono::seconds(10)));
  ASSERT_TRUE(daemon_->Stop(SIGTERM, std::chrono::seconds(30)).ok());
  watcher.join();
  EXPECT_EQ(sum_and_count["reuse.a"], std::make_pair(1.0 * a_samples, a_samples));
  EXPECT_EQ(sum_and_count["reuse.b"], std::make_pair(1000.0 * b_samples, b_samples));
}

// A loop that destroys Stats faster than the sender lets go of them is
// paced: with 65,536 destroyed Stats waiting (the sender's clock stands
// still, so it retires none), making the next one waits for the sender,
// 100 ms at most on the client's clock.
TEST_F(StatLifetimeTest, MakingAStatWaitsWhileTooManyDestroyedOnesWaitForTheSender) {
  StartDaemon();
  detail::ManualSenderClock clock;
  auto client = detail::ClientInternals::WithClock(Options(), clock);
  ASSERT_TRUE(WaitFor([&] { return client->Stats().connects == 1; }, std::chrono::seconds(10)));
  for (int i = 0; i < 65'536; ++i) {
    Stat destroyed(*client, "paced.loop", {Aggregation::COUNT}, std::chrono::seconds(10));
  }
  std::atomic<bool> made{false};
  std::thread maker([&] {
    Stat next(*client, "paced.loop", {Aggregation::COUNT}, std::chrono::seconds(10));
    made = true;
  });
  ASSERT_TRUE(WaitFor([&] { return clock.LongestWaitAhead() == std::chrono::milliseconds(100); },
                      std::chrono::seconds(10)));
  EXPECT_FALSE(made);
  clock.Advance(std::chrono::milliseconds(100));
  maker.join();
  EXPECT_TRUE(made);
  ASSERT_TRUE(client->Flush(std::chrono::seconds(30)).ok());
  EXPECT_TRUE(client->TakeErrors().empty());
}

// A Stat made again with another window after the first is destroyed:
// the daemon holds the new definition back until the first one's release
// comes (StatDefinition.after_release). Flush waits for that release too,
// so once it returns the series has the new definition and every sample.
TEST_F(StatLifetimeTest, FlushReturnsOnceARedefinitionIsSettled) {
  StartDaemon();
  Client client(Options());
  for (int round = 0; round < 5; ++round) {
    const std::string name = absl::StrCat("redef.flush", round);
    {
      Stat first(client, name, {Aggregation::SUM}, std::chrono::milliseconds(kWindowMs));
      first.add(1.0);
      first.add(2.0);
    }
    Stat second(client, name, {Aggregation::SUM}, std::chrono::milliseconds(2 * kWindowMs));
    second.add(3.0);
    ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
    // No wait: the flush's return is the promise.
    const v1::SeriesInfo series = OnlySeries(name);
    EXPECT_EQ(series.definition(), 1u) << name;
    EXPECT_EQ(series.spec().window_size_ms(), 2 * kWindowMs) << name;
    EXPECT_EQ(series.counters().accepted(), 3u) << name;
  }
  EXPECT_TRUE(client.TakeErrors().empty());
}

}  // namespace
}  // namespace torchmon::testing

// Integration tests: the real torchmond binary on a temp Unix socket and
// loopback port 0, fed by the real C++ client, read back over real gRPC and
// real HTTP scrapes. Windows are short (500 ms, grace 500 ms) and every wait
// is a bounded poll on a condition.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "detail/client_core.h"
#include "detail/sender_clock.h"
#include "tests/support/daemon_fixture.h"
#include "torchmon/client.h"

namespace torchmon::testing {
namespace {

using ::testing::HasSubstr;

using DaemonTest = DaemonFixture;


TEST_F(DaemonTest, ReadyLineNamesEveryListenerWithItsRealPort) {
  StartDaemon();
  EXPECT_EQ(daemon_->unix_target(), "unix://" + daemon_->socket_path());
  EXPECT_TRUE(absl::StartsWith(daemon_->tcp_target(), "127.0.0.1:"));
  EXPECT_NE(daemon_->tcp_target(), "127.0.0.1:0");
  EXPECT_TRUE(absl::StartsWith(daemon_->metrics_address(), "127.0.0.1:"));
  EXPECT_NE(daemon_->metrics_address(), "127.0.0.1:0");
  EXPECT_TRUE(HttpGet(daemon_->metrics_address(), "/metrics").ok());
}

TEST_F(DaemonTest, UnixSocketIsOwnerOnlyByDefault) {
  StartDaemon();
  struct stat st;
  ASSERT_EQ(stat(daemon_->socket_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(DaemonTest, ClientSamplesAreQueryableAndScrapedOnceTheWindowCloses) {
  StartDaemon();
  Client client(Options());
  Stat loss(client, "train.loss", {Aggregation::MEAN, Aggregation::MAX, Aggregation::COUNT},
            std::chrono::milliseconds(kWindowMs));
  const int64_t t0 = NextWindowStartUs();
  for (double v : {0.5, 1.5, 4.0}) loss.add(v, t0 + 1000);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());

  // No further samples: the window still closes on the daemon's timer.
  auto windows = WaitForWindows("train.loss", 1);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].start_ms(), t0 / 1000);
  EXPECT_EQ(windows[0].end_ms(), t0 / 1000 + kWindowMs);
  EXPECT_DOUBLE_EQ(Aggregate(windows[0], v1::MEAN), 2.0);
  EXPECT_DOUBLE_EQ(Aggregate(windows[0], v1::MAX), 4.0);
  EXPECT_DOUBLE_EQ(Aggregate(windows[0], v1::COUNT), 3.0);
  EXPECT_EQ(windows[0].series().labels().at("rank"), "0");

  const std::string scrape = Scrape();
  auto mean = ScrapeValue(scrape, "torchmon_stat",
                          {"stat=\"train.loss\"", "agg=\"mean\"", "rank=\"0\""});
  ASSERT_TRUE(mean.ok()) << mean.status() << "\n" << scrape;
  EXPECT_DOUBLE_EQ(*mean, 2.0);
  EXPECT_EQ(Scraped(scrape, "torchmon_samples_accepted_total", {"stat=\"train.loss\""}), 3.0);
}

TEST_F(DaemonTest, TcpListenerServesTheSameDaemon) {
  StartDaemon();
  ClientOptions o = Options();
  o.target = daemon_->tcp_target();
  Client client(o);
  Stat s(client, "tcp.stat", {Aggregation::SUM}, std::chrono::milliseconds(kWindowMs));
  s.add(2.0);
  s.add(5.0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  EXPECT_EQ(OnlySeries("tcp.stat").counters().accepted(), 2u);
}

TEST_F(DaemonTest, ConflictingDefinitionIsRefusedNamingBothAndTheFirstKeepsWorking) {
  StartDaemon();
  Client first(Options()), second(Options());
  Stat a(first, "step_time", {Aggregation::MEAN}, std::chrono::milliseconds(kWindowMs));
  a.add(1.0);
  ASSERT_TRUE(first.Flush(std::chrono::seconds(5)).ok());
  Stat b(second, "step_time", {Aggregation::MEAN}, std::chrono::seconds(2));
  b.add(2.0);
  ASSERT_TRUE(second.Flush(std::chrono::seconds(5)).ok());
  const std::vector<std::string> errors = second.TakeErrors();
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr("window=500ms"));
  EXPECT_THAT(errors[0], HasSubstr("window=2s"));
  EXPECT_THAT(errors[0], HasSubstr("step_time"));
  a.add(3.0);
  ASSERT_TRUE(first.Flush(std::chrono::seconds(5)).ok());
  EXPECT_TRUE(first.TakeErrors().empty());
  EXPECT_EQ(OnlySeries("step_time").counters().accepted(), 2u);
}

TEST_F(DaemonTest, AStatAskingForAHistogramDefinesASeriesWithOne) {
  StartDaemon();
  Client client(Options());
  const auto window = std::chrono::milliseconds(kWindowMs);
  StatOptions options;
  options.max_samples = 7;
  options.labels = {{"phase", "eval"}};
  options.histogram = true;
  Stat with(client, "h.with", {Aggregation::MEAN}, window, options);
  StatOptions alone;
  alone.histogram = true;
  Stat only(client, "h.alone", {}, window, alone);
  Stat without(client, "h.without", {Aggregation::MEAN}, window, 7, {{"phase", "eval"}});
  Stat quantile(client, "h.quantile", {Quantile(0.99)}, window);  // implies one
  for (Stat* stat : {&with, &only, &without, &quantile}) stat->add(1.0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  EXPECT_TRUE(client.TakeErrors().empty());

  const v1::SeriesInfo h = OnlySeries("h.with");
  EXPECT_TRUE(h.spec().histogram());
  EXPECT_EQ(h.spec().max_samples(), 7);
  EXPECT_EQ(h.series().labels().at("phase"), "eval");
  EXPECT_EQ(h.counters().accepted(), 1u);
  const v1::SeriesInfo a = OnlySeries("h.alone");
  EXPECT_TRUE(a.spec().histogram());
  EXPECT_TRUE(a.spec().aggregations().empty());
  const v1::SeriesInfo w = OnlySeries("h.without");
  EXPECT_FALSE(w.spec().histogram());
  EXPECT_EQ(w.spec().max_samples(), 7);
  EXPECT_TRUE(OnlySeries("h.quantile").spec().histogram());

  // The flag is part of the definition: the same stat without it is refused.
  Client other(Options());
  Stat again(other, "h.with", {Aggregation::MEAN}, window, 7, {{"phase", "eval"}});
  again.add(2.0);
  ASSERT_TRUE(other.Flush(std::chrono::seconds(5)).ok());
  const std::vector<std::string> errors = other.TakeErrors();
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr("max_samples=7 histogram;"));
}

TEST_F(DaemonTest, MalformedBatchIsRefusedWithAReasonAndTheStreamCarriesOn) {
  StartDaemon();
  auto stub = v1::Ingest::NewStub(
      grpc::CreateChannel(daemon_->unix_target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  auto stream = stub->Stream(&ctx);
  v1::IngestBatch bad;
  bad.set_sequence(1);
  v1::SampleBlock* orphan = bad.add_samples();
  orphan->set_stat_id(42);
  orphan->add_values(1.0);
  ASSERT_TRUE(stream->Write(bad));
  v1::IngestAck ack;
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_EQ(ack.sequence(), 1u);
  ASSERT_EQ(ack.errors_size(), 1);
  EXPECT_EQ(ack.errors(0).code(), static_cast<int>(grpc::StatusCode::NOT_FOUND));
  EXPECT_THAT(ack.errors(0).message(), HasSubstr("stat id 42"));
  EXPECT_EQ(ack.errors(0).samples_refused(), 1u);

  v1::IngestBatch good;
  good.set_sequence(2);
  v1::StatDefinition* def = good.add_definitions();
  def->set_id(1);
  def->set_name("raw.stat");
  def->mutable_spec()->add_aggregations(v1::SUM);
  def->mutable_spec()->set_window_size_ms(kWindowMs);
  v1::SampleBlock* block = good.add_samples();
  block->set_stat_id(1);
  block->set_base_time_us(NowMs() * 1000);
  block->add_values(1.0);
  block->add_values(2.0);
  ASSERT_TRUE(stream->Write(good));
  ASSERT_TRUE(stream->Read(&ack));
  EXPECT_EQ(ack.sequence(), 2u);
  EXPECT_EQ(ack.errors_size(), 0);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(OnlySeries("raw.stat").counters().accepted(), 2u);
  EXPECT_EQ(Scraped(Scrape(), "torchmon_daemon_samples_refused_total", {}), 1.0);
}

TEST_F(DaemonTest, WatchWindowsStreamsEachWindowAsItCloses) {
  StartDaemon();
  auto stub = daemon_->QueryStub();
  grpc::ClientContext ctx;
  v1::WatchWindowsRequest req;
  req.mutable_selector()->set_stat("watch.*");
  auto reader = stub->WatchWindows(&ctx, req);

  Client client(Options());
  Stat s(client, "watch.me", {Aggregation::VALUE}, std::chrono::milliseconds(kWindowMs));
  Stat other(client, "ignored", {Aggregation::VALUE}, std::chrono::milliseconds(kWindowMs));
  const int64_t t0 = NextWindowStartUs();
  s.add(7.0, t0);
  other.add(1.0, t0);
  s.add(8.0, t0 + kWindowMs * 1000);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());

  v1::WindowSummary w;
  ASSERT_TRUE(reader->Read(&w));
  EXPECT_EQ(w.series().stat(), "watch.me");
  EXPECT_EQ(w.start_ms(), t0 / 1000);
  EXPECT_DOUBLE_EQ(w.aggregates(0).value(), 7.0);
  ASSERT_TRUE(reader->Read(&w));
  EXPECT_EQ(w.series().stat(), "watch.me");
  EXPECT_EQ(w.start_ms(), t0 / 1000 + kWindowMs);
  EXPECT_DOUBLE_EQ(w.aggregates(0).value(), 8.0);
  ctx.TryCancel();
}

TEST_F(DaemonTest, EventsAreQueryableAndExposedWithTheirNumericFields) {
  StartDaemon();
  Client client(Options({{"rank", "3"}, {"job", "j1"}}));
  client.LogEvent(Event("epoch_end", {{"epoch", int64_t{2}}, {"loss", 0.25}, {"tag", std::string("best")},
                                      {"saved", true}}));
  client.LogEvent(Event("epoch_end", {{"epoch", int64_t{3}}, {"loss", 0.125}}));
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());

  auto stub = daemon_->QueryStub();
  v1::GetEventsRequest req;
  req.mutable_selector()->set_name("epoch_end");
  v1::GetEventsResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->GetEvents(&ctx, req, &resp).ok());
  ASSERT_EQ(resp.events_size(), 2);
  EXPECT_EQ(resp.events(0).data().at("epoch").int_value(), 2);
  EXPECT_EQ(resp.events(0).data().at("tag").string_value(), "best");
  EXPECT_TRUE(resp.events(0).data().at("saved").bool_value());
  EXPECT_EQ(resp.events(0).labels().at("rank"), "3");
  EXPECT_LT(resp.events(0).sequence(), resp.events(1).sequence());

  const std::string scrape = Scrape();
  EXPECT_EQ(Scraped(scrape, "torchmon_events_total", {"event=\"epoch_end\"", "rank=\"3\""}), 2.0);
  EXPECT_EQ(Scraped(scrape, "torchmon_event_value",
                          {"event=\"epoch_end\"", "field=\"loss\"", "job=\"j1\""}), 0.125);
}

// Events a client drops (its queue full, or invalid) are reported to the
// daemon by name, as sample drops are, and counted on /metrics and by
// Query.ListEventTotals: received + client_dropped = logged, per name.
TEST_F(DaemonTest, EventsTheClientDroppedAreReportedAndCountedByName) {
  StartDaemon();
  ClientOptions o = Options({{"rank", "1"}});
  o.max_buffered_events = 1;  // a burst overflows the queue
  o.log_to_stderr = false;
  Client client(o);
  constexpr int kBurst = 2000;
  for (int i = 0; i < kBurst; ++i) client.LogEvent(Event("step", {{"i", int64_t{i}}}));
  // The burst sent first: then the invalid event's drop report is all the
  // client holds, and the next flush must still deliver it (it once
  // returned at once, and the daemon's totals missed the drop).
  ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
  // Invalid, whatever room the queue has: an empty data key (a key may be
  // any non-empty UTF-8 of at most protocol::kMaxKeyBytes, so "not a key",
  // which this test once logged, was valid: it was dropped only when the
  // queue happened to be full, and delivered under ASan's pace).
  client.LogEvent(Event("bad_data", {{"", int64_t{1}}}));
  ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
  const ClientStats stats = client.Stats();
  ASSERT_EQ(stats.events_logged, uint64_t{kBurst} + 1);
  ASSERT_EQ(stats.events_logged, stats.events_delivered + stats.events_dropped);
  ASSERT_GT(stats.events_dropped, 1u) << "the queue never overflowed: nothing is checked";

  std::map<std::string, std::pair<uint64_t, uint64_t>> by_name;  // received, dropped
  auto stub = daemon_->QueryStub();
  v1::ListEventTotalsRequest request;
  request.set_page_size(1);  // one page per name: paging too
  for (;;) {
    v1::ListEventTotalsResponse page;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->ListEventTotals(&context, request, &page).ok());
    for (const v1::EventTotals& t : page.events()) {
      EXPECT_EQ(t.labels().at("rank"), "1");
      by_name[t.name()].first += t.received();
      by_name[t.name()].second += t.client_dropped();
    }
    if (page.next_page_token().empty()) break;
    request.set_page_token(page.next_page_token());
  }
  EXPECT_EQ(by_name["step"].first + by_name["step"].second, uint64_t{kBurst});
  EXPECT_EQ(by_name["step"].first, stats.events_delivered);
  EXPECT_EQ(by_name["bad_data"], std::make_pair(uint64_t{0}, uint64_t{1}));
  const std::string scrape = Scrape();
  EXPECT_EQ(Scraped(scrape, "torchmon_events_dropped_total", {"event=\"step\"", "rank=\"1\""}),
            static_cast<double>(by_name["step"].second));
  EXPECT_EQ(Scraped(scrape, "torchmon_events_dropped_total", {"event=\"bad_data\""}), 1.0);
}

TEST_F(DaemonTest, LateAndSkewedSamplesAreCountedAndNeverMovedToAnotherWindow) {
  StartDaemon();
  Client client(Options());
  Stat s(client, "timing", {Aggregation::COUNT}, std::chrono::milliseconds(kWindowMs));
  const int64_t t0 = NextWindowStartUs();
  s.add(1.0, t0);
  s.add(1.0, t0 - 3600LL * 1000 * 1000);   // an hour ago: its window is long closed
  s.add(1.0, t0 + 3600LL * 1000 * 1000);   // an hour ahead: beyond --max-skew (60s)
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  auto windows = WaitForWindows("timing", 1);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_DOUBLE_EQ(windows[0].aggregates(0).value(), 1.0);
  const v1::SeriesCounters c = OnlySeries("timing").counters();
  EXPECT_EQ(c.accepted(), 1u);
  EXPECT_EQ(c.late(), 1u);
  EXPECT_EQ(c.skewed(), 1u);
  const std::string scrape = Scrape();
  EXPECT_EQ(Scraped(scrape, "torchmon_samples_dropped_total", {"stat=\"timing\"", "reason=\"late\""}), 1.0);
  EXPECT_EQ(Scraped(scrape, "torchmon_samples_dropped_total", {"stat=\"timing\"", "reason=\"skewed\""}), 1.0);
}

// Until `done()`, at most 30 s of real time (a bound for a broken build, not
// a measurement), looking every millisecond.
bool EventuallyTrue(const std::function<bool()>& done) {
  return WaitFor(done, std::chrono::seconds(30), std::chrono::milliseconds(1));
}

TEST_F(DaemonTest, TheSenderSendsByItsClocksPaceNotByRealTime) {
  StartDaemon();
  detail::ManualSenderClock clock;
  ClientOptions o = Options();
  o.send_interval = std::chrono::seconds(1);
  auto client = detail::ClientInternals::WithClock(o, clock);
  Stat s(*client, "paced", {Aggregation::COUNT}, std::chrono::seconds(10));
  s.add(1.0);
  // A flush sends at once and needs only the daemon's ack, not the clock.
  ASSERT_TRUE(client->Flush(std::chrono::seconds(30)).ok());
  ASSERT_EQ(s.counters().delivered, 1u);

  // The gap between cycles starts at 1 ms and doubles each cycle up to
  // send_interval (SendPacer): a second of the client's time at a step,
  // each step taken once the sender has waited again, brings it there.
  for (int step = 0; step < 14; ++step) {
    const uint64_t waits = clock.WaitsBegun();
    clock.Advance(std::chrono::seconds(1));
    ASSERT_TRUE(EventuallyTrue([&] { return clock.WaitsBegun() > waits; }));
  }

  s.add(2.0);
  // Half an interval of the client's time: once the sender has looked at
  // the new time and chosen to wait again, the sample is still waiting.
  const uint64_t waits = clock.WaitsBegun();
  clock.Advance(std::chrono::milliseconds(500));
  ASSERT_TRUE(EventuallyTrue([&] { return clock.WaitsBegun() > waits; }));
  EXPECT_EQ(s.counters().delivered, 1u);
  // Past the interval: the next cycle sends it, with no flush asking.
  clock.Advance(std::chrono::milliseconds(600));
  EXPECT_TRUE(EventuallyTrue([&] { return s.counters().delivered == 2; }))
      << "delivered " << s.counters().delivered;
}

TEST_F(DaemonTest, AClientRefusedAStreamTriesAgainAfterItsBackoffOnItsClock) {
  StartDaemon({"--max-streams", "1"});
  // The one stream the daemon allows, held by another client.
  Client holder(Options({{"rank", "1"}}));
  Stat held(holder, "held", {Aggregation::COUNT}, std::chrono::seconds(10));
  held.add(1);
  ASSERT_TRUE(holder.Flush(std::chrono::seconds(30)).ok());

  detail::ManualSenderClock clock;
  ClientOptions o = Options();
  o.initial_backoff = std::chrono::seconds(10);
  o.max_backoff = std::chrono::seconds(60);
  auto client = detail::ClientInternals::WithClock(o, clock);
  const auto refused = [&] { return Scraped(Scrape(), "torchmon_daemon_streams_refused_total", {}); };
  // The pause the sender waits out, once it has begun: the longest wait
  // ahead of the client's now that lies in [low, high].
  const auto pause_begun = [&](std::chrono::seconds low, std::chrono::seconds high) {
    std::chrono::nanoseconds pause{0};
    EXPECT_TRUE(EventuallyTrue([&] {
      pause = clock.LongestWaitAhead();
      return pause >= low && pause <= high;
    })) << "no pause in [" << low.count() << ", " << high.count() << "] s began";
    return pause;
  };
  ASSERT_TRUE(EventuallyTrue([&] { return refused() == 1; }));
  // After a refused stream the pause is 2 x 10 s, jittered by ±20 %.
  std::chrono::nanoseconds pause = pause_begun(std::chrono::seconds(16), std::chrono::seconds(24));
  // A second short of its end, the sender looks at the time and waits on:
  // no second try.
  uint64_t waits = clock.WaitsBegun();
  clock.Advance(pause - std::chrono::seconds(1));
  ASSERT_TRUE(EventuallyTrue([&] { return clock.WaitsBegun() > waits; }));
  EXPECT_EQ(refused(), 1);
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(EventuallyTrue([&] { return refused() == 2; })) << refused();
  // The pause doubled: 32 to 48 s.
  pause = pause_begun(std::chrono::seconds(32), std::chrono::seconds(48));
  waits = clock.WaitsBegun();
  clock.Advance(pause - std::chrono::seconds(1));
  ASSERT_TRUE(EventuallyTrue([&] { return clock.WaitsBegun() > waits; }));
  EXPECT_EQ(refused(), 2);
  clock.Advance(std::chrono::seconds(1));
  EXPECT_TRUE(EventuallyTrue([&] { return refused() == 3; })) << refused();
}

TEST_F(DaemonTest, ClientDropsAreReportedSoAccountingStaysExact) {
  StartDaemon();
  ClientOptions o = Options();
  o.buffer_bytes = ClientOptions::kMinBufferBytes;
  // The sender looks at the buffers when its clock says so or a flush asks,
  // and this clock stands still: however slowly the adds run (a TSan build
  // runs them at a rate the sender keeps up with), it takes nothing from
  // them before the flush.
  detail::ManualSenderClock clock;
  auto client = detail::ClientInternals::WithClock(o, clock);
  Stat s(*client, "bursty", {Aggregation::COUNT}, std::chrono::seconds(10));
  // A million adds: far more than one stat may hold from its first add (8
  // chunks, about 58,000 samples) before the sender's next look.
  constexpr int kAdds = 1000000;
  for (int i = 0; i < kAdds; ++i) s.add(1.0);
  // A flush sends at once and needs only the daemon's ack, not the clock.
  ASSERT_TRUE(client->Flush(std::chrono::seconds(30)).ok());
  ASSERT_GT(s.dropped(), 0u);
  const v1::SeriesCounters c = OnlySeries("bursty").counters();
  EXPECT_EQ(c.client_dropped(), s.dropped());
  EXPECT_EQ(c.accepted() + c.capped() + c.late() + c.skewed() + c.client_dropped(),
            static_cast<uint64_t>(kAdds));
}

TEST_F(DaemonTest, TenThousandStatsFromFourThreadsShareASmallBudgetAndAccountExactly) {
  StartDaemon({"--grace", "60s"});  // no sample can be late
  ClientOptions o = Options();
  // 2 MiB: less than the 10,000 stats' first chunks (256 B each), so adds
  // are refused while the sender drains, and the client must drop, count
  // and report exactly what it refuses.
  o.buffer_bytes = ClientOptions::kMinBufferBytes;
  Client client(o);
  constexpr int kStats = 10000;
  constexpr int kThreads = 4;
  constexpr int kRounds = 20;
  std::vector<std::unique_ptr<Stat>> stats;
  for (int i = 0; i < kStats; ++i) {
    stats.push_back(std::make_unique<Stat>(client, absl::StrCat("many.s", i),
                                           std::vector<StatAggregation>{Aggregation::COUNT},
                                           std::chrono::seconds(10)));
  }
  // Every thread adds to every stat, each starting at its own offset, so
  // stats see several producers at once.
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        for (int i = 0; i < kStats; ++i) stats[(i + t * kStats / kThreads) % kStats]->add(r);
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(client.Flush(std::chrono::seconds(30)).ok());

  uint64_t dropped = 0;
  std::map<std::string, StatCounters> by_name;
  for (const auto& s : stats) {
    const StatCounters c = s->counters();
    ASSERT_EQ(c.added, uint64_t{kThreads} * kRounds) << s->name();
    ASSERT_EQ(c.added, c.delivered + c.dropped) << s->name();
    ASSERT_EQ(c.drops_reported, c.dropped) << s->name();
    dropped += c.dropped;
    by_name[s->name()] = c;
  }
  EXPECT_GT(dropped, 0u) << "the budget never ran out: the test checks nothing about drops";

  const std::vector<v1::SeriesInfo> listed = ListSeries("many.*");
  ASSERT_EQ(listed.size(), static_cast<size_t>(kStats));
  for (const v1::SeriesInfo& series : listed) {
    const auto it = by_name.find(series.series().stat());
    ASSERT_NE(it, by_name.end()) << series.series().stat();
    const v1::SeriesCounters& c = series.counters();
    ASSERT_EQ(c.accepted(), it->second.delivered) << it->first;
    ASSERT_EQ(c.client_dropped(), it->second.dropped) << it->first;
    ASSERT_EQ(c.capped() + c.late() + c.skewed(), 0u) << it->first;
  }
  std::cout << "10,000 stats x 4 threads, 2 MiB budget: " << dropped << " of "
            << uint64_t{kStats} * kThreads * kRounds << " samples dropped, each counted\n";
}

// Every page of every listing, read through a channel with gRPC's default
// 4 MiB receive limit; checks each page's bound on the way.
template <typename Request, typename Response, typename Items>
void FollowPages(v1::Query::Stub& stub,
                 grpc::Status (v1::Query::Stub::*method)(grpc::ClientContext*, const Request&,
                                                         Response*),
                 Request request, Items&& items, size_t* pages) {
  *pages = 0;
  for (;;) {
    Response response;
    grpc::ClientContext context;
    const grpc::Status status = (stub.*method)(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ++*pages;
    // The page bound (2 MiB of items) with room for one more item.
    ASSERT_LE(response.ByteSizeLong(), size_t{2} << 20) << "page " << *pages;
    items(response);
    if (response.next_page_token().empty()) return;
    request.set_page_token(response.next_page_token());
  }
}

// 12,000 series with 1 KB label values answer ~27 MB to ListSeries and
// ~14 MB to GetWindows, and 24 events at the size limits ~7 MB: each comes
// in pages under the default receive limit, all of it exactly once, to a
// client that asks for no page size (as one written before paging would).
TEST_F(DaemonTest, EveryListingComesInPagesUnderTheDefaultReceiveLimit) {
  // A grace far above the time the 12,000 definitions take to reach the
  // daemon in a sanitizer build: a sample counted late leaves its series
  // without a window, and this test is about paging, not lateness.
  StartDaemon({"--grace", "10s"});
  const std::string long_value(1000, 'v');
  Client client(Options({{"rank", "0"}, {"run", long_value}}));
  constexpr int kStats = 12'000;
  std::vector<std::unique_ptr<Stat>> stats;
  for (int i = 0; i < kStats; ++i) {
    stats.push_back(std::make_unique<Stat>(client, absl::StrFormat("paged.s%05d", i),
                                           std::vector<StatAggregation>{Aggregation::COUNT},
                                           std::chrono::milliseconds(100)));
    stats.back()->add(1);
  }
  constexpr int kEvents = 24;
  for (int e = 0; e < kEvents; ++e) {
    std::map<std::string, EventValue> data;
    for (int f = 0; f < 64; ++f) data[absl::StrCat("f", f)] = std::string(4000, 'x');
    client.LogEvent(Event(absl::StrCat("paged.event", e), std::move(data)));
  }
  ASSERT_TRUE(client.Flush(std::chrono::seconds(30)).ok());
  auto stub = daemon_->QueryStub();
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::vector<v1::SeriesInfo> all = ListSeries("paged.*");
        return all.size() == kStats &&
               std::all_of(all.begin(), all.end(),
                           [](const v1::SeriesInfo& s) { return s.has_last_window(); });
      },
      std::chrono::seconds(60)));

  size_t pages = 0;
  std::vector<std::string> names;
  v1::ListSeriesRequest series;
  series.mutable_selector()->set_stat("paged.*");
  FollowPages(*stub, &v1::Query::Stub::ListSeries, series,
              [&](const v1::ListSeriesResponse& r) {
                for (const auto& s : r.series()) names.push_back(s.series().stat());
              },
              &pages);
  ASSERT_EQ(names.size(), size_t{kStats});
  for (int i = 0; i < kStats; ++i) ASSERT_EQ(names[i], absl::StrFormat("paged.s%05d", i));
  EXPECT_GE(pages, 12u);  // ~27 MB in pages of at most 2 MiB
  std::cout << "ListSeries: " << kStats << " series in " << pages << " pages\n";

  std::vector<std::string> windows;
  v1::GetWindowsRequest windows_request = v1::GetWindowsRequest();
  windows_request.mutable_selector()->set_stat("paged.*");
  FollowPages(*stub, &v1::Query::Stub::GetWindows, windows_request,
              [&](const v1::GetWindowsResponse& r) {
                for (const auto& w : r.windows()) windows.push_back(w.series().stat());
              },
              &pages);
  EXPECT_EQ(windows, names);  // one window each, in series order
  EXPECT_GE(pages, 6u);

  std::vector<uint64_t> sequences;
  v1::GetEventsRequest events;
  events.mutable_selector()->set_name("paged.*");
  FollowPages(*stub, &v1::Query::Stub::GetEvents, events,
              [&](const v1::GetEventsResponse& r) {
                for (const auto& e : r.events()) sequences.push_back(e.sequence());
              },
              &pages);
  ASSERT_EQ(sequences.size(), size_t{kEvents});
  EXPECT_TRUE(std::is_sorted(sequences.begin(), sequences.end()));
  EXPECT_GE(pages, 3u);

  // `limit` counts over all pages: the 10 most recent, oldest first.
  events.set_limit(10);
  events.set_page_size(3);
  std::vector<uint64_t> last10;
  FollowPages(*stub, &v1::Query::Stub::GetEvents, events,
              [&](const v1::GetEventsResponse& r) {
                EXPECT_LE(r.events_size(), 3);
                for (const auto& e : r.events()) last10.push_back(e.sequence());
              },
              &pages);
  EXPECT_EQ(last10, std::vector<uint64_t>(sequences.end() - 10, sequences.end()));
  EXPECT_EQ(pages, 4u);
}

// A series redefined with another window lists its windows in order of
// definition, then of start; paged one window at a time, each page resumes
// in the definition of the last window listed, so every window comes once.
TEST_F(DaemonTest, WindowPagesResumeAcrossARedefinition) {
  StartDaemon();
  Client client(Options());
  const int64_t t0 = NextWindowStartUs();
  {
    Stat first(client, "redef.paged", {Aggregation::COUNT}, std::chrono::milliseconds(kWindowMs));
    for (int i = 0; i < 3; ++i) first.add(1, t0 + int64_t{i} * kWindowMs * 1000);
    ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  }
  // Made once the first is gone: the daemon redefines the series when the
  // client's release of the first arrives.
  Stat second(client, "redef.paged", {Aggregation::COUNT},
              std::chrono::milliseconds(2 * kWindowMs));
  const int64_t later = (t0 / 1000 / (2 * kWindowMs) + 3) * (2 * kWindowMs) * 1000;
  second.add(1, later);
  second.add(1, later + 2 * kWindowMs * 1000);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  const std::vector<v1::WindowSummary> all = WaitForWindows("redef.paged", 5);
  ASSERT_EQ(all.size(), 5u);
  ASSERT_EQ(all.front().definition(), 0u);
  ASSERT_EQ(all.back().definition(), 1u);

  auto stub = daemon_->QueryStub();
  v1::GetWindowsRequest request;
  request.mutable_selector()->set_stat("redef.paged");
  request.set_page_size(1);
  std::vector<std::pair<uint32_t, int64_t>> paged;
  for (int page = 0; page < 10; ++page) {
    v1::GetWindowsResponse response;
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetWindows(&context, request, &response).ok());
    for (const v1::WindowSummary& w : response.windows()) {
      paged.emplace_back(w.definition(), w.start_ms());
    }
    if (response.next_page_token().empty()) break;
    request.set_page_token(response.next_page_token());
  }
  std::vector<std::pair<uint32_t, int64_t>> expected;
  for (const v1::WindowSummary& w : all) expected.emplace_back(w.definition(), w.start_ms());
  EXPECT_EQ(paged, expected);
}

TEST_F(DaemonTest, APageTokenIsGoodOnlyForItsOwnRequest) {
  StartDaemon();
  Client client(Options());
  std::vector<std::unique_ptr<Stat>> stats;
  for (int i = 0; i < 5; ++i) {
    stats.push_back(std::make_unique<Stat>(client, absl::StrCat("tok.s", i),
                                           std::vector<StatAggregation>{Aggregation::COUNT},
                                           std::chrono::milliseconds(kWindowMs)));
    // A sample each: a flush waits for samples (and so for their stat's
    // definition), not for a definition alone.
    stats.back()->add(1);
  }
  ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
  auto stub = daemon_->QueryStub();
  v1::ListSeriesRequest request;
  request.mutable_selector()->set_stat("tok.*");
  request.set_page_size(2);
  v1::ListSeriesResponse first;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->ListSeries(&context, request, &first).ok());
  }
  ASSERT_EQ(first.series_size(), 2);
  ASSERT_FALSE(first.next_page_token().empty());
  // Another page size is fine: the token names the last series listed.
  request.set_page_token(first.next_page_token());
  request.set_page_size(10);
  v1::ListSeriesResponse rest;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->ListSeries(&context, request, &rest).ok());
  }
  ASSERT_EQ(rest.series_size(), 3);
  EXPECT_EQ(rest.series(0).series().stat(), "tok.s2");
  EXPECT_TRUE(rest.next_page_token().empty());
  // Another selector is not.
  request.mutable_selector()->set_stat("tok.s*");
  grpc::ClientContext other;
  v1::ListSeriesResponse refused;
  const grpc::Status status = stub->ListSeries(&other, request, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("page_token belongs to another request"));
  // Nor garbage, nor a negative page size.
  request.set_page_token("not a token");
  grpc::ClientContext garbage;
  EXPECT_EQ(stub->ListSeries(&garbage, request, &refused).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::GetWindowsRequest negative;
  negative.set_page_size(-1);
  grpc::ClientContext negative_context;
  v1::GetWindowsResponse unused;
  const grpc::Status negative_status = stub->GetWindows(&negative_context, negative, &unused);
  EXPECT_EQ(negative_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(negative_status.error_message(), HasSubstr("page_size -1 is negative"));
}

// Monitoring checks and `curl -I` ask HEAD: the headers of a scrape, no body.
TEST_F(DaemonTest, HeadMetricsAnswersAScrapesHeadersWithoutABody) {
  StartDaemon();
  auto head = HttpRequest(daemon_->metrics_address(), "HEAD", "/metrics", {});
  ASSERT_TRUE(head.ok()) << head.status();
  EXPECT_EQ(head->status, 200) << head->head;
  EXPECT_THAT(head->head, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_EQ(head->body, "");
  // A HEAD is not a scrape.
  EXPECT_EQ(ScrapeValue(Scrape(), "torchmon_daemon_scrapes_total", {}).value_or(-1), 0);
}

TEST_F(DaemonTest, IdleSeriesExpireFromQueriesAndTheScrape) {
  StartDaemon({"--grace", "100ms", "--series-ttl", "1s"});
  Client client(Options());
  Stat s(client, "short.lived", {Aggregation::VALUE}, std::chrono::milliseconds(100));
  s.add(1.0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  ASSERT_THAT(Scrape(), HasSubstr("stat=\"short.lived\""));
  EXPECT_TRUE(WaitFor([&] { return !absl::StrContains(Scrape(), "short.lived"); },
                      std::chrono::seconds(10)));
  auto stub = daemon_->QueryStub();
  v1::ListSeriesResponse resp;
  grpc::ClientContext ctx;
  ASSERT_TRUE(stub->ListSeries(&ctx, v1::ListSeriesRequest(), &resp).ok());
  EXPECT_EQ(resp.series_size(), 0);
}

TEST_F(DaemonTest, SigtermClosesOpenWindowsAsPartialAndExitsZero) {
  StartDaemon({"--grace", "30s"});
  Client client(Options());
  Stat s(client, "open.window", {Aggregation::SUM}, std::chrono::seconds(10));
  s.add(1.0);
  s.add(2.0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  auto status = daemon_->Stop(SIGTERM, std::chrono::seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
  EXPECT_THAT(daemon_->Stderr(), HasSubstr("1 open windows closed as partial"));
}

TEST_F(DaemonTest, WatchersReceiveThePartialWindowsOfAShutdown) {
  StartDaemon({"--grace", "30s"});
  auto stub = daemon_->QueryStub();
  grpc::ClientContext ctx;
  auto reader = stub->WatchWindows(&ctx, v1::WatchWindowsRequest());
  Client client(Options());
  Stat s(client, "cut.short", {Aggregation::COUNT}, std::chrono::seconds(10));
  s.add(1.0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  std::vector<v1::WindowSummary> received;
  std::thread watcher([&] {
    v1::WindowSummary w;
    while (reader->Read(&w)) received.push_back(w);
  });
  auto status = daemon_->Stop(SIGTERM, std::chrono::seconds(10));
  watcher.join();
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(received.size(), 1u);
  EXPECT_EQ(received[0].series().stat(), "cut.short");
  EXPECT_TRUE(received[0].partial());
  EXPECT_DOUBLE_EQ(received[0].aggregates(0).value(), 1.0);
  EXPECT_TRUE(reader->Finish().ok());
}

TEST_F(DaemonTest, ScrapeWithEveryMetricFamilyPassesPromtool) {
  if (access("/usr/bin/promtool", X_OK) != 0) {
    GTEST_SKIP() << "promtool not installed (deploy/dev/test.sh installs it)";
  }
  StartDaemon();
  Client client(Options({{"rank", "0"}, {"job", "lint"}}));
  Stat loss(client, "train/loss with spaces \"quoted\"", {Aggregation::MEAN, Aggregation::MAX},
            std::chrono::milliseconds(kWindowMs), /*max_samples=*/2);
  const int64_t t0 = NextWindowStartUs();
  for (double v : {1.0, std::nan(""), 3.0}) loss.add(v, t0);
  loss.add(1.0, t0 - 3600LL * 1000 * 1000);
  client.LogEvent(Event("epoch_end", {{"epoch", int64_t{1}}, {"ok", true}}));
  ASSERT_TRUE(client.Flush(std::chrono::seconds(5)).ok());
  ASSERT_EQ(WaitForWindows("train/loss*", 1).size(), 1u);
  const std::string scrape = Scrape();
  ASSERT_THAT(scrape, HasSubstr("torchmon_stat{"));
  ASSERT_THAT(scrape, HasSubstr("torchmon_event_value{"));
  const std::string path = dir_.path() + "/scrape.txt";
  {
    std::ofstream out(path);
    out << scrape;
  }
  const std::string cmd = "/usr/bin/promtool check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string report;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) report.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << report;
  EXPECT_EQ(report, "") << scrape;
}

TEST_F(DaemonTest, HelpExplainsEveryFlag) {
  const std::string cmd = TorchmondPath() + " --help";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0);
  for (const char* flag : {"--listen", "--metrics-listen", "--grace", "--series-ttl", "--history",
                           "--max-skew", "--max-events", "--socket-mode", "--drain-timeout",
                           "--config", "--check-config"}) {
    EXPECT_THAT(out, HasSubstr(flag));
  }
}

}  // namespace
}  // namespace torchmon::testing

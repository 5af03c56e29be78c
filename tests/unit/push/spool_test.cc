// The push queues on disk (server/push/spool.h) in a real directory: what
// a start reads back of what the last daemon queued, what it removes (passes
// never marked published, queues of endpoints gone), what it sets aside (a
// damaged file), and an exporter that removes each request's file once its
// receiver (a real HTTP server on loopback) took it and keeps the rest at
// its stop.
#include "server/push/spool.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scripted_http_server.h"
#include "server/core/clock.h"
#include "server/push/exporter.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using testing::ScriptedHttpServer;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

PushEndpoint Endpoint(const std::string& url) {
  auto e = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url", url + " timeout=2s");
  EXPECT_TRUE(e.ok()) << e.status();
  return *e;
}

class SpoolTest : public ::testing::Test {
 protected:
  SpoolTest() {
    char tmpl[] = "/tmp/torchmon-spool-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  ~SpoolTest() override { std::system(absl::StrCat("rm -rf ", dir_).c_str()); }

  std::unique_ptr<PushSpool> Open(const std::vector<PushEndpoint>& endpoints) {
    auto spool = PushSpool::Open(dir_, endpoints, /*sync=*/false,
                                 [this](const std::string& line) { log_ += line + "\n"; }, stats_);
    EXPECT_TRUE(spool.ok()) << spool.status();
    return spool.ok() ? *std::move(spool) : nullptr;
  }

  std::string dir_;
  std::string log_;
  DaemonStats stats_;
  const PushEndpoint a_ = Endpoint("http://127.0.0.1:1/api/v1/write");
  const PushEndpoint b_ = Endpoint("http://127.0.0.1:2/api/v1/write");
};

TEST_F(SpoolTest, AStartReadsBackWhatWasMarkedAndRemovesThePassAfterTheMark) {
  std::vector<std::string> files;
  {
    auto spool = Open({a_});
    ASSERT_NE(spool, nullptr);
    EXPECT_FALSE(spool->published().has_value());
    // Pass 100: two window ends, the first of two requests.
    files.push_back(spool->Write(0, 100, 0, 1000, 5, EncodedRequest{"r1", 3}));
    files.push_back(spool->Write(0, 100, 1, 1000, 5, EncodedRequest{"r2", 4}));
    files.push_back(spool->Write(0, 100, 2, 2000, 5, EncodedRequest{"r3", 1}));
    spool->MarkPublished(100);
    // Pass 250, written but not marked (killed before): its windows are
    // closed again by the restore.
    files.push_back(spool->Write(0, 250, 0, 3000, 6, EncodedRequest{"r4", 2}));
  }
  for (const std::string& f : files) EXPECT_TRUE(Exists(f)) << f;
  auto spool = Open({a_});
  ASSERT_NE(spool, nullptr);
  EXPECT_EQ(spool->published(), 100u);
  const std::vector<PushSpool::Queued> queued = spool->Load(0);
  ASSERT_THAT(queued, SizeIs(2));
  EXPECT_EQ(queued[0].end_ms, 1000);
  EXPECT_EQ(queued[0].queued_ms, 5);
  ASSERT_THAT(queued[0].requests, SizeIs(2));
  EXPECT_EQ(queued[0].requests[0].body, "r1");
  EXPECT_EQ(queued[0].requests[1].windows, 4u);
  EXPECT_THAT(queued[0].files, ElementsAre(files[0], files[1]));
  EXPECT_EQ(queued[1].end_ms, 2000);
  EXPECT_FALSE(Exists(files[3]));
  EXPECT_EQ(stats_.state_skipped.load(), 0u);
}

TEST_F(SpoolTest, ADamagedRequestIsSetAsideSaidAndCountedAndTheRestRead) {
  std::string damaged;
  {
    auto spool = Open({a_});
    damaged = spool->Write(0, 10, 0, 1000, 1, EncodedRequest{"first request", 1});
    spool->Write(0, 10, 1, 2000, 1, EncodedRequest{"second request", 1});
    spool->MarkPublished(10);
  }
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('X');
  }
  auto spool = Open({a_});
  const std::vector<PushSpool::Queued> queued = spool->Load(0);
  ASSERT_THAT(queued, SizeIs(1));
  EXPECT_EQ(queued[0].requests[0].body, "second request");
  EXPECT_EQ(stats_.state_skipped.load(), 1u);
  EXPECT_THAT(log_, HasSubstr("its check does not match its content"));
  EXPECT_FALSE(Exists(damaged));
  EXPECT_TRUE(Exists(dir_ + "/skipped"));
}

TEST_F(SpoolTest, TheQueueOfAnEndpointNoLongerConfiguredIsRemovedAndSaid) {
  std::string file;
  {
    auto spool = Open({a_, b_});
    file = spool->Write(1, 10, 0, 1000, 1, EncodedRequest{"for b", 1});
    spool->MarkPublished(10);
  }
  auto spool = Open({a_});
  EXPECT_FALSE(Exists(file));
  EXPECT_THAT(log_, HasSubstr("removed the queue of http://127.0.0.1:2/api/v1/write, no longer "
                              "an endpoint: 1 requests unsent"));
  EXPECT_THAT(spool->Load(0), IsEmpty());
}

TEST_F(SpoolTest, AnExporterRemovesWhatItsReceiverTookAndKeepsTheRestAtItsStop) {
  ScriptedHttpServer server({{204, "", ""}, {503, "", "busy"}});
  auto spool = Open({Endpoint(server.url())});
  PushOptions options;
  options.min_backoff_ms = 10;
  options.max_backoff_ms = 40;
  SystemClock clock;
  DaemonStats::Exporter stats;
  Exporter exporter(Endpoint(server.url()), options, stats, clock, [](const std::string&) {},
                    spool.get());
  auto window = std::make_shared<EncodedWindow>();
  window->end_ms = 1000;
  std::vector<std::string> files;
  for (int i = 0; i < 2; ++i) {
    window->requests.push_back(EncodedRequest{absl::StrCat("body", i), 5});
    files.push_back(spool->Write(0, 7, static_cast<uint32_t>(i), 1000, 1, window->requests.back()));
    window->bytes += 5;
    window->windows += 5;
  }
  spool->MarkPublished(7);
  exporter.Enqueue(window, files);
  // The first taken (204), the second refused for now (503) until the stop.
  ASSERT_TRUE(server.AwaitRequests(3));
  exporter.Finish(absl::Now());
  EXPECT_FALSE(Exists(files[0]));
  EXPECT_TRUE(Exists(files[1]));
  EXPECT_EQ(stats.sent_windows.load(), 5u);
  EXPECT_EQ(stats.dropped[DaemonStats::kExportShutdown].load(), 0u);
  // The next daemon's start finds the second.
  auto again = Open({Endpoint(server.url())});
  const std::vector<PushSpool::Queued> queued = again->Load(0);
  ASSERT_THAT(queued, SizeIs(1));
  EXPECT_EQ(queued[0].requests[0].body, "body1");
}

}  // namespace
}  // namespace torchmon::server

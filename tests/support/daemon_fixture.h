// A GoogleTest fixture around DaemonProcess: start the real daemon, make
// clients for it, query it over gRPC and scrape it over HTTP.
#ifndef TORCHMON_TESTS_SUPPORT_DAEMON_FIXTURE_H_
#define TORCHMON_TESTS_SUPPORT_DAEMON_FIXTURE_H_

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/daemon_process.h"
#include "torchmon/client.h"

namespace torchmon::testing {

// Short windows so tests finish quickly; the daemon's grace matches.
inline constexpr int64_t kWindowMs = 500;

class DaemonFixture : public ::testing::Test {
 protected:
  static std::vector<std::string> FastWindows() { return {"--grace", "500ms"}; }

  void StartDaemon(std::vector<std::string> flags = FastWindows()) {
    auto d = DaemonProcess::Start(dir_, flags);
    ASSERT_TRUE(d.ok()) << d.status();
    daemon_ = *std::move(d);
  }

  ClientOptions Options(Labels labels = {{"rank", "0"}}) const {
    ClientOptions o;
    o.target = daemon_->unix_target();
    o.labels = std::move(labels);
    o.labels_from_environment = false;
    return o;
  }

  // Start (Unix µs) of a window that opens after now: samples stamped there
  // are neither late nor skewed, and it closes within ~2 windows + grace.
  static int64_t NextWindowStartUs() { return (NowMs() / kWindowMs + 1) * kWindowMs * 1000; }

  std::vector<v1::WindowSummary> WaitForWindows(const std::string& stat, size_t count) {
    std::vector<v1::WindowSummary> windows;
    auto stub = daemon_->QueryStub();
    WaitFor(
        [&] {
          v1::GetWindowsRequest req;
          req.mutable_selector()->set_stat(stat);
          v1::GetWindowsResponse resp;
          grpc::ClientContext ctx;
          if (!stub->GetWindows(&ctx, req, &resp).ok()) return false;
          windows.assign(resp.windows().begin(), resp.windows().end());
          return windows.size() >= count;
        },
        std::chrono::seconds(10));
    return windows;
  }

  // The series whose stat name matches `stat` (exact or a glob), every page.
  std::vector<v1::SeriesInfo> ListSeries(const std::string& stat) {
    auto stub = daemon_->QueryStub();
    v1::ListSeriesRequest req;
    req.mutable_selector()->set_stat(stat);
    std::vector<v1::SeriesInfo> out;
    for (;;) {
      v1::ListSeriesResponse resp;
      grpc::ClientContext ctx;
      const grpc::Status status = stub->ListSeries(&ctx, req, &resp);
      EXPECT_TRUE(status.ok()) << status.error_message();
      out.insert(out.end(), resp.series().begin(), resp.series().end());
      if (!status.ok() || resp.next_page_token().empty()) return out;
      req.set_page_token(resp.next_page_token());
    }
  }

  v1::SeriesInfo OnlySeries(const std::string& stat) {
    const std::vector<v1::SeriesInfo> series = ListSeries(stat);
    EXPECT_EQ(series.size(), 1u);
    return series.empty() ? v1::SeriesInfo() : series[0];
  }

  std::string Scrape() {
    auto body = HttpGet(daemon_->metrics_address(), "/metrics");
    EXPECT_TRUE(body.ok()) << body.status();
    return body.ok() ? *body : "";
  }

  // The scraped value, or NaN (and a test failure) if the sample is absent.
  static double Scraped(const std::string& scrape, const std::string& name,
                        const std::vector<std::string>& labels) {
    auto v = ScrapeValue(scrape, name, labels);
    if (!v.ok()) {
      ADD_FAILURE() << v.status() << "\n" << scrape;
      return std::nan("");
    }
    return *v;
  }

  static double Aggregate(const v1::WindowSummary& w, v1::Aggregation a) {
    for (const auto& v : w.aggregates()) {
      if (v.aggregation() == a) return v.value();
    }
    ADD_FAILURE() << "aggregation " << a << " missing";
    return 0;
  }

  TempDir dir_;
  std::unique_ptr<DaemonProcess> daemon_;
};

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_DAEMON_FIXTURE_H_

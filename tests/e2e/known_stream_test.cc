// End to end: a known stream from three ranks — several stats, a max_samples
// cap, NaN and ±Inf, a late and a skewed sample — through the real client and
// the real daemon, checked exactly in the query answer and in the scrape.
// Expected values are computed here by hand from the stream, independently
// of the daemon's code.
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_fixture.h"

namespace torchmon::testing {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kRanks = 3;

struct Expected {
  double value, mean, count, sum, max, min;
};

// Compares with NaN equal to NaN: a NaN loss must show up as NaN.
void ExpectSame(double actual, double expected, const std::string& what) {
  if (std::isnan(expected)) {
    EXPECT_TRUE(std::isnan(actual)) << what << " = " << actual << ", expected NaN";
  } else {
    EXPECT_EQ(actual, expected) << what;
  }
}

class KnownStreamTest : public DaemonFixture {
 protected:
  std::vector<v1::WindowSummary> Windows(const std::string& stat, int rank) {
    auto stub = daemon_->QueryStub();
    v1::GetWindowsRequest req;
    req.mutable_selector()->set_stat(stat);
    v1::LabelMatcher* m = req.mutable_selector()->add_labels();
    m->set_key("rank");
    m->set_value(std::to_string(rank));
    v1::GetWindowsResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub->GetWindows(&ctx, req, &resp).ok());
    return {resp.windows().begin(), resp.windows().end()};
  }

  v1::SeriesCounters Counters(const std::string& stat, int rank) {
    auto stub = daemon_->QueryStub();
    v1::ListSeriesRequest req;
    req.mutable_selector()->set_stat(stat);
    v1::LabelMatcher* m = req.mutable_selector()->add_labels();
    m->set_key("rank");
    m->set_value(std::to_string(rank));
    v1::ListSeriesResponse resp;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub->ListSeries(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.series_size(), 1) << stat << " rank " << rank;
    return resp.series_size() == 1 ? resp.series(0).counters() : v1::SeriesCounters();
  }

  void ExpectWindow(const v1::WindowSummary& w, const Expected& e, const std::string& what) {
    for (const auto& a : w.aggregates()) {
      const std::string name = what + " " + v1::Aggregation_Name(a.aggregation());
      switch (a.aggregation()) {
        case v1::VALUE: ExpectSame(a.value(), e.value, name); break;
        case v1::MEAN: ExpectSame(a.value(), e.mean, name); break;
        case v1::COUNT: ExpectSame(a.value(), e.count, name); break;
        case v1::SUM: ExpectSame(a.value(), e.sum, name); break;
        case v1::MAX: ExpectSame(a.value(), e.max, name); break;
        case v1::MIN: ExpectSame(a.value(), e.min, name); break;
        default: ADD_FAILURE() << "unexpected aggregation in " << what;
      }
    }
  }

  void ExpectScraped(const std::string& scrape, const std::string& stat, int rank,
                     const char* agg, double expected) {
    auto v = ScrapeValue(scrape, "torchmon_stat",
                         {"stat=\"" + stat + "\"", std::string("agg=\"") + agg + "\"",
                          "rank=\"" + std::to_string(rank) + "\"", "job=\"e2e\""});
    ASSERT_TRUE(v.ok()) << stat << " " << agg << " rank " << rank << ": " << v.status();
    ExpectSame(*v, expected, stat + " scraped " + agg + " rank " + std::to_string(rank));
  }

  double Dropped(const std::string& scrape, const std::string& stat, int rank, const char* reason) {
    auto v = ScrapeValue(scrape, "torchmon_samples_dropped_total",
                         {"stat=\"" + stat + "\"", "rank=\"" + std::to_string(rank) + "\"",
                          std::string("reason=\"") + reason + "\""});
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }
};

TEST_F(KnownStreamTest, EveryAggregateAndEveryAccountingCounterIsExact) {
  StartDaemon();
  const auto window = std::chrono::milliseconds(kWindowMs);
  const int64_t a = NextWindowStartUs();   // window A
  const int64_t b = a + kWindowMs * 1000;  // window B
  const int64_t hour_us = 3600LL * 1000 * 1000;
  using Agg = Aggregation;
  const std::vector<StatAggregation> all = {Agg::VALUE, Agg::MEAN, Agg::COUNT, Agg::SUM, Agg::MAX, Agg::MIN};

  std::vector<std::unique_ptr<Client>> clients;
  for (int r = 0; r < kRanks; ++r) {
    clients.push_back(std::make_unique<Client>(
        Options({{"rank", std::to_string(r)}, {"job", "e2e"}})));
    Client& c = *clients.back();
    Stat loss(c, "train.loss", all, window);
    Stat step(c, "step_time", {Agg::MEAN, Agg::COUNT, Agg::MAX}, window, /*max_samples=*/3);
    Stat grad(c, "grad_norm", {Agg::MIN, Agg::MAX, Agg::SUM, Agg::MEAN}, window);
    // train.loss, window A: r+3, r+1, r+4, r+2 in that arrival order.
    for (double v : {3.0, 1.0, 4.0, 2.0}) loss.add(r + v, a + 1000);
    // train.loss, window B: one sample.
    loss.add(10.0 * r, b + 2000);
    // One late train.loss sample, an hour in the past.
    loss.add(99.0, a - hour_us);
    // step_time, window A: five samples, cap 3.
    for (double v : {5.0, 6.0, 7.0, 8.0, 9.0}) step.add(v, a + 3000);
    // Rank 0 also sends one skewed step_time sample, an hour ahead.
    if (r == 0) step.add(1.0, a + hour_us);
    // grad_norm, window A: NaN on rank 1, ±Inf on ranks 0 and 2.
    const std::vector<double> grads[kRanks] = {{1.0, kInf}, {1.0, kNaN, 3.0}, {-kInf, kInf}};
    for (double v : grads[r]) grad.add(v, a + 4000);
    ASSERT_TRUE(c.Flush(std::chrono::seconds(5)).ok());
    EXPECT_TRUE(c.TakeErrors().empty());
  }

  // Wait for window B of every rank's train.loss to close.
  ASSERT_TRUE(WaitFor([&] { return Windows("train.loss", kRanks - 1).size() == 2; },
                      std::chrono::seconds(10)));

  const std::string scrape = Scrape();
  for (int r = 0; r < kRanks; ++r) {
    const std::string rank = "rank " + std::to_string(r);
    const auto loss = Windows("train.loss", r);
    ASSERT_EQ(loss.size(), 2u) << rank;
    EXPECT_EQ(loss[0].start_ms(), a / 1000);
    EXPECT_EQ(loss[1].start_ms(), b / 1000);
    EXPECT_EQ(loss[0].accepted(), 4u);
    ExpectWindow(loss[0], {r + 2.0, r + 2.5, 4, 4.0 * r + 10, r + 4.0, r + 1.0}, "loss A " + rank);
    ExpectWindow(loss[1], {10.0 * r, 10.0 * r, 1, 10.0 * r, 10.0 * r, 10.0 * r}, "loss B " + rank);
    v1::SeriesCounters c = Counters("train.loss", r);
    EXPECT_EQ(c.accepted(), 5u);
    EXPECT_EQ(c.late(), 1u);
    EXPECT_EQ(c.capped() + c.skewed() + c.client_dropped(), 0u);
    // The scrape shows the last closed window (B).
    ExpectScraped(scrape, "train.loss", r, "value", 10.0 * r);
    ExpectScraped(scrape, "train.loss", r, "mean", 10.0 * r);
    ExpectScraped(scrape, "train.loss", r, "count", 1);
    EXPECT_EQ(Dropped(scrape, "train.loss", r, "late"), 1.0);

    const auto step = Windows("step_time", r);
    ASSERT_EQ(step.size(), 1u) << rank;
    EXPECT_EQ(step[0].accepted(), 3u);
    EXPECT_EQ(step[0].capped(), 2u);
    ExpectWindow(step[0], {0, 6.0, 3, 0, 7.0, 0}, "step_time " + rank);
    c = Counters("step_time", r);
    EXPECT_EQ(c.accepted(), 3u);
    EXPECT_EQ(c.capped(), 2u);
    EXPECT_EQ(c.skewed(), r == 0 ? 1u : 0u);
    EXPECT_EQ(c.accepted() + c.capped() + c.late() + c.skewed() + c.client_dropped(),
              r == 0 ? 6u : 5u);
    ExpectScraped(scrape, "step_time", r, "mean", 6.0);
    ExpectScraped(scrape, "step_time", r, "max", 7.0);
    EXPECT_EQ(Dropped(scrape, "step_time", r, "capped"), 2.0);
    EXPECT_EQ(Dropped(scrape, "step_time", r, "skewed"), r == 0 ? 1.0 : 0.0);
    EXPECT_EQ(Dropped(scrape, "step_time", r, "client"), 0.0);
  }

  const Expected grads[kRanks] = {
      {0, kInf, 0, kInf, kInf, 1.0},       // 1, +Inf
      {0, kNaN, 0, kNaN, kNaN, kNaN},      // 1, NaN, 3: NaN everywhere
      {0, kNaN, 0, kNaN, kInf, -kInf}};    // -Inf + +Inf = NaN; min/max stay infinite
  for (int r = 0; r < kRanks; ++r) {
    const auto grad = Windows("grad_norm", r);
    ASSERT_EQ(grad.size(), 1u);
    ExpectWindow(grad[0], grads[r], "grad_norm rank " + std::to_string(r));
    ExpectScraped(scrape, "grad_norm", r, "max", grads[r].max);
    ExpectScraped(scrape, "grad_norm", r, "min", grads[r].min);
    ExpectScraped(scrape, "grad_norm", r, "sum", grads[r].sum);
  }
}

}  // namespace
}  // namespace torchmon::testing

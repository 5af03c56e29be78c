// End to end: per-window quantiles through the real client and the real
// daemon. Samples drawn from several distributions, heavy tails included,
// go in; the daemon's p50/p90/p99/p99.9 must be within the documented 1%
// relative error of the exact quantiles computed here by sorting the same
// samples, in the query answer and in the scrape alike. Also: NaN and ±Inf,
// the max_samples cap, conflicting definitions, invalid quantiles, and the
// cross-rank comparison of a quantile.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_fixture.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::testing {
namespace {

using ::testing::HasSubstr;

constexpr double kQuantileNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kQuantileInf = std::numeric_limits<double>::infinity();
// The bound docs/semantics.md promises.
constexpr double kRelativeError = 0.01;
const std::vector<double> kQuantiles = {0.5, 0.9, 0.99, 0.999};

// The exact q-quantile as the daemon defines it: the sample of rank
// floor(q·(n−1)) in sorted order.
double Exact(std::vector<double> samples, double q) {
  std::sort(samples.begin(), samples.end());
  return samples[static_cast<size_t>(std::floor(q * static_cast<double>(samples.size() - 1)))];
}

// The window's value of quantile q; NaN and a failure if missing.
double QuantileOf(const v1::WindowSummary& w, double q) {
  for (const v1::AggregateValue& a : w.aggregates()) {
    if (a.aggregation() == v1::QUANTILE && a.quantile() == q) return a.value();
  }
  ADD_FAILURE() << "quantile " << q << " missing from " << w.ShortDebugString();
  return kQuantileNaN;
}

std::vector<StatAggregation> WithQuantiles(std::vector<StatAggregation> aggregations) {
  for (double q : kQuantiles) aggregations.push_back(Quantile(q));
  return aggregations;
}

class QuantileTest : public DaemonFixture {
 protected:
  // Adds `samples` stamped inside the window starting at `start_us`,
  // flushing between chunks so that no sample is dropped by a full buffer.
  static void AddAll(Client& client, Stat& stat, const std::vector<double>& samples,
                     int64_t start_us) {
    for (size_t i = 0; i < samples.size(); ++i) {
      stat.add(samples[i], start_us + 1000 + static_cast<int64_t>(i % 1000));
      if (i % 4096 == 4095) {
        ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
      }
    }
    ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
    EXPECT_EQ(stat.dropped(), 0u);
  }

  std::string ScrapedQuantileLabel(double q) {
    return "agg=\"" + protocol::QuantileName(q) + "\"";
  }
};

TEST_F(QuantileTest, EstimatesAreWithinTheBoundOfExactQuantilesOnEveryDistribution) {
  StartDaemon();
  std::mt19937_64 rng(20261122);
  struct Distribution {
    std::string name;
    std::function<double()> draw;
  };
  std::uniform_real_distribution<double> uniform(1.0, 2.0);
  std::normal_distribution<double> normal(100.0, 15.0);
  std::exponential_distribution<double> exponential(1.0);
  std::lognormal_distribution<double> lognormal(0.0, 2.0);
  std::cauchy_distribution<double> cauchy(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const std::vector<Distribution> distributions = {
      {"uniform", [&] { return uniform(rng); }},
      {"normal", [&] { return normal(rng); }},
      {"exponential", [&] { return exponential(rng); }},
      {"lognormal", [&] { return lognormal(rng); }},
      // Pareto(α = 1.1, x_m = 1): infinite variance, a tail 4 decades long.
      {"pareto", [&] { return std::pow(1.0 - unit(rng), -1.0 / 1.1); }},
      // Cauchy: heavy tails on both sides, negative samples.
      {"cauchy", [&] { return cauchy(rng); }},
      // Step times in ms with a rare 100x stall, and exact zeros.
      {"stalls", [&] {
         const double u = unit(rng);
         return u < 0.005 ? 0.0 : (u > 0.985 ? 1000.0 + unit(rng) : 10.0 + unit(rng));
       }},
  };
  constexpr size_t kSamples = 20000;

  Client client(Options({{"rank", "0"}}));
  const int64_t start_us = NextWindowStartUs();
  std::vector<std::vector<double>> drawn;
  for (const Distribution& d : distributions) {
    std::vector<double> samples(kSamples);
    for (double& v : samples) v = d.draw();
    Stat stat(client, "q." + d.name, WithQuantiles({Aggregation::MIN, Aggregation::MAX}),
              std::chrono::milliseconds(kWindowMs));
    AddAll(client, stat, samples, start_us);
    drawn.push_back(std::move(samples));
  }
  EXPECT_TRUE(client.TakeErrors().empty());

  const std::string scrape_after = [&] {
    for (const Distribution& d : distributions) {
      if (WaitForWindows("q." + d.name, 1).size() != 1) ADD_FAILURE() << d.name << ": no window";
    }
    return Scrape();
  }();
  for (size_t i = 0; i < distributions.size(); ++i) {
    const std::string& name = distributions[i].name;
    const auto windows = WaitForWindows("q." + name, 1);
    ASSERT_EQ(windows.size(), 1u) << name;
    const v1::WindowSummary& w = windows[0];
    EXPECT_EQ(w.accepted(), kSamples) << name;
    // The quantiles follow the six, smallest first.
    ASSERT_EQ(w.aggregates_size(), 2 + static_cast<int>(kQuantiles.size())) << name;
    for (size_t k = 0; k < kQuantiles.size(); ++k) {
      EXPECT_EQ(w.aggregates(2 + static_cast<int>(k)).quantile(), kQuantiles[k]) << name;
    }
    for (double q : kQuantiles) {
      const double exact = Exact(drawn[i], q);
      const double estimate = QuantileOf(w, q);
      EXPECT_LE(std::fabs(estimate - exact), kRelativeError * std::fabs(exact) + 1e-12)
          << name << " " << protocol::QuantileName(q) << ": estimate " << estimate << ", exact "
          << exact;
      // The scrape shows the same number under agg="pNN".
      EXPECT_EQ(Scraped(scrape_after, "torchmon_stat",
                        {"stat=\"q." + name + "\"", ScrapedQuantileLabel(q)}),
                estimate)
          << name << " " << protocol::QuantileName(q);
    }
  }
}

TEST_F(QuantileTest, NanMakesEveryQuantileNanAndInfinitiesSortToTheEnds) {
  StartDaemon();
  Client client(Options({{"rank", "0"}}));
  const int64_t start_us = NextWindowStartUs();
  const auto window = std::chrono::milliseconds(kWindowMs);
  Stat with_nan(client, "q.nan", WithQuantiles({Aggregation::MEAN}), window);
  Stat with_inf(client, "q.inf", WithQuantiles({}), window);
  AddAll(client, with_nan, {1.0, 2.0, kQuantileNaN, 3.0}, start_us);
  // Sorted: 1, +Inf, +Inf: rank floor(0.5·2) = 1 is +Inf; a -Inf is lowest.
  AddAll(client, with_inf, {kQuantileInf, 1.0, kQuantileInf}, start_us);

  const auto nan_windows = WaitForWindows("q.nan", 1);
  const auto inf_windows = WaitForWindows("q.inf", 1);
  ASSERT_EQ(nan_windows.size(), 1u);
  ASSERT_EQ(inf_windows.size(), 1u);
  for (double q : kQuantiles) {
    EXPECT_TRUE(std::isnan(QuantileOf(nan_windows[0], q))) << protocol::QuantileName(q);
    EXPECT_EQ(QuantileOf(inf_windows[0], q), kQuantileInf) << protocol::QuantileName(q);
  }
  const std::string scrape = Scrape();
  EXPECT_TRUE(std::isnan(
      Scraped(scrape, "torchmon_stat", {"stat=\"q.nan\"", ScrapedQuantileLabel(0.99)})));
  EXPECT_EQ(Scraped(scrape, "torchmon_stat", {"stat=\"q.inf\"", ScrapedQuantileLabel(0.5)}), kQuantileInf);
}

TEST_F(QuantileTest, QuantilesCoverOnlyTheSamplesTheCapAccepted) {
  StartDaemon();
  Client client(Options({{"rank", "0"}}));
  Stat capped(client, "q.capped", {Aggregation::MAX, Quantile(0.99)},
              std::chrono::milliseconds(kWindowMs), /*max_samples=*/3);
  AddAll(client, capped, {1.0, 2.0, 3.0, 1000.0, 1000.0}, NextWindowStartUs());
  const auto windows = WaitForWindows("q.capped", 1);
  ASSERT_EQ(windows.size(), 1u);
  EXPECT_EQ(windows[0].capped(), 2u);
  // Of 1, 2, 3: rank floor(0.99·2) = 1, the 2; with the capped 1000s it would be 1000.
  EXPECT_NEAR(QuantileOf(windows[0], 0.99), 2.0, 2.0 * kRelativeError);
}

TEST_F(QuantileTest, ADefinitionWithOtherQuantilesIsRefusedNamingBoth) {
  StartDaemon();
  Client first(Options({{"rank", "0"}}));
  Stat p99(first, "q.conflict", {Aggregation::MEAN, Quantile(0.99)},
           std::chrono::milliseconds(kWindowMs));
  p99.add(1.0);
  ASSERT_TRUE(first.Flush(std::chrono::seconds(5)).ok());
  Client second(Options({{"rank", "0"}}));
  Stat p90(second, "q.conflict", {Aggregation::MEAN, Quantile(0.9)},
           std::chrono::milliseconds(kWindowMs));
  p90.add(1.0);
  (void)second.Flush(std::chrono::seconds(5));
  const std::vector<std::string> errors = second.TakeErrors();
  ASSERT_FALSE(errors.empty());
  EXPECT_THAT(errors[0], HasSubstr("aggregations=[mean,p99]"));
  EXPECT_THAT(errors[0], HasSubstr("aggregations=[mean,p90]"));
  // The same definition spelled another way is the same definition.
  Client third(Options({{"rank", "0"}}));
  Stat again(third, "q.conflict", {Quantile(0.990), Aggregation::MEAN, Quantile(0.99)},
             std::chrono::milliseconds(kWindowMs));
  again.add(2.0);
  ASSERT_TRUE(third.Flush(std::chrono::seconds(5)).ok());
  EXPECT_TRUE(third.TakeErrors().empty());
}

TEST_F(QuantileTest, AnInvalidQuantileIsRefusedByTheClientNamingIt) {
  StartDaemon();
  Client client(Options({{"rank", "0"}}));
  Stat bad(client, "q.bad", {Quantile(1.5)}, std::chrono::milliseconds(kWindowMs));
  bad.add(1.0);
  EXPECT_EQ(bad.dropped(), 1u);
  const std::vector<std::string> errors = client.TakeErrors();
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_THAT(errors[0], HasSubstr("quantile 1.5"));
}

TEST_F(QuantileTest, CompareRanksComparesAQuantile) {
  StartDaemon();
  const int64_t start_us = NextWindowStartUs();
  // Rank r's step times: 100 samples of 10 ms, 2r of them 100 ms stalls.
  for (int r = 0; r < 3; ++r) {
    Client client(Options({{"rank", std::to_string(r)}, {"job", "j"}}));
    Stat step(client, "q.step", {Aggregation::MEAN, Quantile(0.5), Quantile(0.99)},
              std::chrono::milliseconds(kWindowMs));
    std::vector<double> samples(100, 10.0);
    for (int s = 0; s < 2 * r; ++s) samples[s] = 100.0;
    AddAll(client, step, samples, start_us);
  }
  ASSERT_EQ(WaitForWindows("q.step", 3).size(), 3u);
  auto stub = daemon_->QueryStub();
  v1::CompareRanksRequest request;
  request.mutable_selector()->set_stat("q.step");
  request.set_aggregation(v1::QUANTILE);
  request.set_quantile(0.99);
  v1::CompareRanksResponse response;
  grpc::ClientContext context;
  ASSERT_TRUE(stub->CompareRanks(&context, request, &response).ok());
  ASSERT_EQ(response.comparisons_size(), 1);
  const v1::RankComparison& c = response.comparisons(0);
  ASSERT_EQ(c.ranks_size(), 3);
  // p99 of 100 samples is rank 98: 100 ms once two samples stalled (ranks
  // 1 and 2), 10 ms for rank 0.
  EXPECT_EQ(c.ranks(2).rank(), "0");
  EXPECT_NEAR(c.ranks(2).value(), 10.0, 10.0 * kRelativeError);
  EXPECT_NEAR(c.max(), 100.0, 100.0 * kRelativeError);
  EXPECT_NEAR(c.median(), 100.0, 100.0 * kRelativeError);

  // A quantile no series estimates compares nothing; an invalid one is refused.
  request.set_quantile(0.9);
  v1::CompareRanksResponse none;
  grpc::ClientContext context2;
  ASSERT_TRUE(stub->CompareRanks(&context2, request, &none).ok());
  EXPECT_EQ(none.comparisons_size(), 0);
  request.set_quantile(1.0);
  grpc::ClientContext context3;
  const grpc::Status refused = stub->CompareRanks(&context3, request, &none);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("quantile 1"));
}

// Rank 0 is slow: 90 steps of 30.0 to 38.9 ms and 10 stalls of 1 s to 10 s;
// ranks 1 to 3 take 10.0 to 29.8 ms. Pooled, the 400 samples have their p50
// at rank floor(0.5·399) = 199, 23.2 ms, where the ranks' own p50s are 34.9
// ms and 19.8 ms (the median); and their p99 at rank 395, the sixth stall,
// 6 s, where the ranks' p99s are 9 s (rank 0, the max) and 29.6 ms (the
// median). No statistic of the ranks' quantiles is the job's quantile.
TEST_F(QuantileTest, CompareRanksGivesTheQuantileOfEveryRanksSamplesPooled) {
  StartDaemon();
  // A series keeps its newest closed window's sketch until it has been
  // idle for the grace and three windows: with 2 s windows the queries
  // below have at least 2 s after the close, however slow the build.
  constexpr int64_t kPooledWindowMs = 2000;
  const int64_t start_us = (NowMs() / kPooledWindowMs + 1) * kPooledWindowMs * 1000;
  std::vector<std::vector<double>> samples(4);
  for (int i = 0; i < 90; ++i) samples[0].push_back(30.0 + 0.1 * i);
  for (int k = 1; k <= 10; ++k) samples[0].push_back(1000.0 * k);
  for (int r = 1; r < 4; ++r) {
    for (int i = 0; i < 100; ++i) samples[r].push_back(10.0 + 0.2 * i);
  }
  std::vector<double> pooled;
  for (int r = 0; r < 4; ++r) {
    Client client(Options({{"rank", std::to_string(r)}, {"job", "j"}}));
    Stat step(client, "q.pooled", {Aggregation::MEAN, Quantile(0.5), Quantile(0.99)},
              std::chrono::milliseconds(kPooledWindowMs));
    AddAll(client, step, samples[r], start_us);
    pooled.insert(pooled.end(), samples[r].begin(), samples[r].end());
  }
  ASSERT_EQ(WaitForWindows("q.pooled", 4).size(), 4u);
  ASSERT_NEAR(Exact(pooled, 0.5), 23.2, 1e-9);
  ASSERT_EQ(Exact(pooled, 0.99), 6000.0);

  auto stub = daemon_->QueryStub();
  auto compare = [&](v1::Aggregation aggregation, double q, int64_t window_start_ms) {
    v1::CompareRanksRequest request;
    request.mutable_selector()->set_stat("q.pooled");
    request.set_aggregation(aggregation);
    request.set_quantile(q);
    request.set_window_start_ms(window_start_ms);
    v1::CompareRanksResponse response;
    grpc::ClientContext context;
    const grpc::Status status = stub->CompareRanks(&context, request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.comparisons_size(), 1);
    return response.comparisons().empty() ? v1::RankComparison() : response.comparisons(0);
  };
  for (const double q : {0.5, 0.99}) {
    SCOPED_TRACE(q);
    const double exact = Exact(pooled, q);
    const v1::RankComparison c = compare(v1::QUANTILE, q, 0);
    ASSERT_EQ(c.ranks_size(), 4);
    EXPECT_EQ(c.start_ms(), start_us / 1000);
    ASSERT_TRUE(c.has_all_ranks());
    EXPECT_NEAR(c.all_ranks(), exact, exact * kRelativeError);
    // Farther from the median and the max of the ranks' quantiles than
    // the error of the estimates.
    EXPECT_GT(std::abs(c.all_ranks() - c.median()), 5 * kRelativeError * exact) << c.median();
    EXPECT_GT(std::abs(c.all_ranks() - c.max()), 5 * kRelativeError * exact) << c.max();
    // The same window asked for by its start.
    const v1::RankComparison by_start = compare(v1::QUANTILE, q, start_us / 1000);
    ASSERT_TRUE(by_start.has_all_ranks());
    EXPECT_NEAR(by_start.all_ranks(), exact, exact * kRelativeError);
  }
  // Only a quantile has one.
  EXPECT_FALSE(compare(v1::MEAN, 0, 0).has_all_ranks());
}

}  // namespace
}  // namespace torchmon::testing

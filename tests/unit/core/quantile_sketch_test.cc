// QuantileSketch: the relative-error bound against exact quantiles on
// several distributions (heavy tails included), merging, the memory bound,
// NaN and infinities.
#include "server/core/quantile_sketch.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

constexpr double kQuantiles[] = {0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1};

// The exact q-quantile as the sketch defines it: the sample of rank
// floor(q · (n - 1)) in sorted order.
double Exact(std::vector<double> sorted, double q) {
  return sorted[static_cast<size_t>(std::floor(q * static_cast<double>(sorted.size() - 1)))];
}

// `max_buckets` large enough that nothing collapses: the bound holds exactly.
void ExpectWithinBound(const std::vector<double>& samples, const std::string& name,
                       size_t max_buckets = QuantileSketch::kDefaultMaxBuckets) {
  QuantileSketch sketch(0.01, max_buckets);
  for (double x : samples) sketch.Add(x);
  std::vector<double> sorted = samples;
  std::sort(sorted.begin(), sorted.end());
  ASSERT_FALSE(sketch.collapsed()) << name;
  for (double q : kQuantiles) {
    const double exact = Exact(sorted, q);
    const double estimate = sketch.Quantile(q);
    EXPECT_LE(std::fabs(estimate - exact), 0.01 * std::fabs(exact) * (1 + 1e-12))
        << name << " q=" << q << " exact=" << exact << " estimate=" << estimate;
  }
}

std::vector<double> Draw(size_t n, const std::function<double(std::mt19937_64&)>& draw) {
  std::mt19937_64 rng(42);
  std::vector<double> out(n);
  for (double& x : out) x = draw(rng);
  return out;
}

TEST(QuantileSketchTest, RelativeErrorBoundOnLightAndHeavyTails) {
  constexpr size_t n = 100000;
  ExpectWithinBound(Draw(n, [](auto& r) { return std::uniform_real_distribution<>(0, 1)(r); }),
                    "uniform(0,1)");
  ExpectWithinBound(Draw(n, [](auto& r) { return std::normal_distribution<>(100, 15)(r); }),
                    "normal(100,15), a step time in ms");
  ExpectWithinBound(Draw(n, [](auto& r) { return std::exponential_distribution<>(0.1)(r); }),
                    "exponential");
  // Spanning ~1e10 (lognormal, Cauchy): more buckets than the default 1024.
  ExpectWithinBound(Draw(n, [](auto& r) { return std::lognormal_distribution<>(0, 2.5)(r); }),
                    "lognormal(0,2.5)", 4096);
  // Pareto with α = 1.1: infinite variance, the 99.9th percentile ~500× the median.
  ExpectWithinBound(Draw(n,
                         [](auto& r) {
                           const double u = std::uniform_real_distribution<>(0, 1)(r);
                           return 1.0 / std::pow(1 - u, 1 / 1.1);
                         }),
                    "pareto(1.1)");
  ExpectWithinBound(
      Draw(n, [](auto& r) { return std::cauchy_distribution<>(0, 1)(r); }),
      "cauchy: negative, positive, heavy on both sides", 4096);
}

TEST(QuantileSketchTest, ZerosNegativesAndFewSamples) {
  ExpectWithinBound({0, 0, 0, -1, 1}, "zeros and signs");
  ExpectWithinBound({-5, -3, -2.5}, "negatives only");
  ExpectWithinBound({42}, "one sample");
  ExpectWithinBound({1e-30, 1e30, 3}, "extreme magnitudes", 8192);
}

TEST(QuantileSketchTest, MergeIsTheSketchOfBothSampleSets) {
  auto samples = Draw(20000, [](auto& r) { return std::lognormal_distribution<>(3, 1)(r); });
  QuantileSketch whole, left, right;
  for (size_t i = 0; i < samples.size(); ++i) {
    whole.Add(samples[i]);
    (i % 3 == 0 ? left : right).Add(samples[i]);
  }
  left.Merge(right);
  EXPECT_EQ(left.count(), whole.count());
  for (double q : kQuantiles) EXPECT_EQ(left.Quantile(q), whole.Quantile(q)) << q;
}

TEST(QuantileSketchTest, MemoryIsBoundedAndTheTailKeepsItsAccuracy) {
  // 1e-12 .. 1e12: a dynamic range the 1024 buckets cannot cover.
  std::vector<double> samples;
  for (int e = -120; e <= 120; ++e) {
    for (int k = 1; k <= 50; ++k) samples.push_back(std::pow(10.0, e / 10.0) * (1 + k / 100.0));
  }
  QuantileSketch sketch;
  for (double x : samples) sketch.Add(x);
  EXPECT_TRUE(sketch.collapsed());
  EXPECT_LE(sketch.bucket_count(), QuantileSketch::kDefaultMaxBuckets);
  std::sort(samples.begin(), samples.end());
  // The kept buckets cover the top 7.5e8 of the range (1.3e3 .. 1.3e12): the
  // quantiles there keep the bound.
  for (double q : {0.9, 0.99, 0.999, 1.0}) {
    const double exact = Exact(samples, q);
    ASSERT_GT(exact, 1e4);
    EXPECT_LE(std::fabs(sketch.Quantile(q) - exact), 0.01 * exact * (1 + 1e-12)) << q;
  }
  // Below it, samples count in the lowest kept bucket: an estimate above the
  // exact value, never below, and the order of quantiles is kept.
  EXPECT_GT(sketch.Quantile(0.5), Exact(samples, 0.5));
  EXPECT_LE(sketch.Quantile(0), sketch.Quantile(0.5));
}

TEST(QuantileSketchTest, NaNMakesEveryQuantileNaNAsMinAndMaxDo) {
  QuantileSketch sketch;
  EXPECT_TRUE(std::isnan(sketch.Quantile(0.5)));  // empty
  sketch.Add(1);
  sketch.Add(2);
  EXPECT_FALSE(std::isnan(sketch.Quantile(0.5)));
  sketch.Add(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(sketch.count(), 3u);
  for (double q : kQuantiles) EXPECT_TRUE(std::isnan(sketch.Quantile(q))) << q;
}

TEST(QuantileSketchTest, InfinitiesSortAtTheEnds) {
  QuantileSketch sketch;
  const double inf = std::numeric_limits<double>::infinity();
  for (double x : {-inf, 1.0, 2.0, 3.0, inf}) sketch.Add(x);
  EXPECT_EQ(sketch.Quantile(0), -inf);
  EXPECT_EQ(sketch.Quantile(1), inf);
  EXPECT_NEAR(sketch.Quantile(0.5), 2.0, 0.02);
}

}  // namespace
}  // namespace torchmon::server

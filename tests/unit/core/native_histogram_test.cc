// NativeHistogram: every sample in the bucket Prometheus defines for it at
// every schema, the bucket bound and coarsening, NaN, infinities and zero.
#include "server/core/native_histogram.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

// Bucket → count, as the exposition sees it.
std::map<int32_t, uint64_t> Buckets(const NativeHistogram& h, bool positive) {
  std::map<int32_t, uint64_t> out;
  h.ForEachBucket(positive, [&](int32_t index, uint64_t n) { out[index] += n; });
  return out;
}

uint64_t Total(const std::map<int32_t, uint64_t>& buckets) {
  uint64_t total = 0;
  for (const auto& [index, n] : buckets) total += n;
  return total;
}

TEST(NativeHistogramTest, EveryMagnitudeLiesInItsBucketAtEverySchema) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> exponent(-120, 120);
  for (int32_t schema = NativeHistogram::kMinSchema; schema <= 8; ++schema) {
    for (int i = 0; i < 20000; ++i) {
      const double m = std::exp2(exponent(rng));
      const int32_t index = NativeHistogram::Index(m, schema);
      ASSERT_LT(NativeHistogram::UpperBound(index - 1, schema), m) << "schema " << schema;
      ASSERT_LE(m, NativeHistogram::UpperBound(index, schema)) << "schema " << schema;
    }
  }
}

TEST(NativeHistogramTest, BoundsAreInclusiveAndMatchPrometheusIndices) {
  // Powers of two are bucket bounds at every schema: the bound's own bucket.
  for (int32_t schema = NativeHistogram::kMinSchema; schema <= 8; ++schema) {
    const int32_t per_power = schema >= 0 ? 1 << schema : 1;
    if (schema >= 0) {
      EXPECT_EQ(NativeHistogram::Index(1.0, schema), 0);
      EXPECT_EQ(NativeHistogram::Index(2.0, schema), per_power);
      EXPECT_EQ(NativeHistogram::Index(0.5, schema), -per_power);
    }
  }
  EXPECT_EQ(NativeHistogram::Index(1.5, 5), 19);  // ceil(32 · log2 1.5) = ceil(18.72)
  EXPECT_EQ(NativeHistogram::Index(3, 0), 2);      // (2, 4]
  EXPECT_EQ(NativeHistogram::Index(3, -1), 1);     // (1, 4]
  EXPECT_EQ(NativeHistogram::Index(5, -1), 2);     // (4, 16]
  EXPECT_EQ(NativeHistogram::Index(0.3, -1), 0);   // (1/4, 1]
  EXPECT_EQ(NativeHistogram::Index(0.2, -1), -1);  // (1/16, 1/4]
  EXPECT_DOUBLE_EQ(NativeHistogram::UpperBound(19, 5), std::exp2(19.0 / 32));
  EXPECT_DOUBLE_EQ(NativeHistogram::UpperBound(-5, 5), std::exp2(-5.0 / 32));
}

TEST(NativeHistogramTest, EveryBoundIsInItsOwnBucketAndTheNextDoubleInTheNext) {
  for (int32_t schema = 1; schema <= 8; ++schema) {
    // Bounds from 2^-120 to 2^120, every bucket of some powers of two.
    const int32_t per_power = 1 << schema;
    for (int32_t index = -120 * per_power; index <= 120 * per_power; index += 1 + per_power / 3) {
      const double bound = NativeHistogram::UpperBound(index, schema);
      ASSERT_EQ(NativeHistogram::Index(bound, schema), index) << "schema " << schema;
      const double above = std::nextafter(bound, 2 * bound);
      ASSERT_EQ(NativeHistogram::Index(above, schema), index + 1) << "schema " << schema;
    }
  }
}

TEST(NativeHistogramTest, TheBucketMidpointIsWithinTheStatedRelativeError) {
  // Schema 5: base 2^(1/32); (base - 1) / (base + 1) = 1.0836 %.
  const double base = std::exp2(1.0 / 32);
  const double bound = (base - 1) / (base + 1);
  EXPECT_LT(bound, 0.011);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> exponent(-20, 20);
  for (int i = 0; i < 100000; ++i) {
    const double m = std::exp2(exponent(rng));
    const int32_t index = NativeHistogram::Index(m, 5);
    const double lower = NativeHistogram::UpperBound(index - 1, 5);
    const double upper = NativeHistogram::UpperBound(index, 5);
    const double mid = 2 * lower * upper / (lower + upper);  // equal relative distance to both ends
    ASSERT_LE(std::fabs(mid - m), bound * m * (1 + 1e-12)) << m;
  }
}

TEST(NativeHistogramTest, CountsEverySampleOnceWithSumAndSigns) {
  NativeHistogram h;
  const std::vector<double> samples = {0.1, 0.1, 0.2, 3, -3, -0.5, 0, -0.0, 1e-300, 7};
  double sum = 0;
  for (double x : samples) {
    h.Add(x);
    sum += x;
  }
  EXPECT_EQ(h.schema(), NativeHistogram::kInitialSchema);
  EXPECT_EQ(h.count(), samples.size());
  EXPECT_DOUBLE_EQ(h.sum(), sum);
  EXPECT_EQ(h.zero_count(), 3u);  // 0, -0 and a magnitude below 2^-128
  const auto positive = Buckets(h, true);
  const auto negative = Buckets(h, false);
  EXPECT_EQ(Total(positive), 5u);
  EXPECT_EQ(Total(negative), 2u);
  EXPECT_EQ(positive.at(NativeHistogram::Index(0.1, 5)), 2u);
  EXPECT_EQ(negative.at(NativeHistogram::Index(3, 5)), 1u);
  EXPECT_EQ(negative.at(NativeHistogram::Index(0.5, 5)), 1u);
}

TEST(NativeHistogramTest, NaNIsCountedInNoBucketAndInfinitiesInTheTopBucket) {
  NativeHistogram h;
  h.Add(1);
  h.Add(std::numeric_limits<double>::quiet_NaN());
  h.Add(std::numeric_limits<double>::infinity());
  h.Add(std::numeric_limits<double>::infinity());
  h.Add(-std::numeric_limits<double>::infinity());
  EXPECT_EQ(h.count(), 5u);
  EXPECT_TRUE(std::isnan(h.sum()));
  const int32_t top = NativeHistogram::InfiniteIndex(h.schema());
  EXPECT_EQ(Buckets(h, true), (std::map<int32_t, uint64_t>{{0, 1}, {top, 2}}));
  EXPECT_EQ(Buckets(h, false), (std::map<int32_t, uint64_t>{{top, 1}}));
  // The top bucket is the first whose upper bound is infinite.
  EXPECT_TRUE(std::isinf(NativeHistogram::UpperBound(top, h.schema())));
  EXPECT_TRUE(std::isfinite(NativeHistogram::UpperBound(top - 1, h.schema())));
  // The largest double shares it: its magnitude is past the bound below.
  EXPECT_EQ(NativeHistogram::Index(std::numeric_limits<double>::max(), 5), top);
  // Bucket 0 and the top one are too far apart for schema 5: coarsened.
  h.Add(std::numeric_limits<double>::max());
  EXPECT_LT(h.schema(), 5);
  EXPECT_EQ(Buckets(h, true).at(NativeHistogram::InfiniteIndex(h.schema())), 3u);
  EXPECT_EQ(Buckets(h, true).at(0), 1u);
}

TEST(NativeHistogramTest, AWideRangeCoarsensTheSchemaKeepingEverySampleInItsBucket) {
  NativeHistogram h;
  std::vector<double> samples;
  // Step times from 1 ms to 1000 s, both signs: a range of 10^6 per sign.
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> exponent(std::log2(1e-3), std::log2(1e3));
  for (int i = 0; i < 50000; ++i) {
    const double m = std::exp2(exponent(rng));
    samples.push_back(i % 3 == 0 ? -m : m);
  }
  for (double x : samples) {
    h.Add(x);
    const size_t width = h.positive().counts.size() + h.negative().counts.size();
    ASSERT_LE(width, NativeHistogram::kMaxBuckets);
  }
  // Coarsened no further than needed: one schema finer would not fit.
  // (2 × log2(10^6) ≈ 40 powers of two in 320 buckets: about 8 per power.)
  EXPECT_LT(h.schema(), 5);
  auto width_at = [&](int32_t schema) {
    int32_t low[2] = {INT32_MAX, INT32_MAX}, high[2] = {INT32_MIN, INT32_MIN};
    for (double x : samples) {
      const int32_t i = NativeHistogram::Index(std::fabs(x), schema);
      const int sign = x > 0 ? 0 : 1;
      low[sign] = std::min(low[sign], i);
      high[sign] = std::max(high[sign], i);
    }
    return static_cast<size_t>(high[0] - low[0] + 1 + high[1] - low[1] + 1);
  };
  EXPECT_GT(width_at(h.schema() + 1), NativeHistogram::kMaxBuckets);
  std::map<int32_t, uint64_t> expect_positive, expect_negative;
  for (double x : samples) {
    ++(x > 0 ? expect_positive : expect_negative)[NativeHistogram::Index(std::fabs(x), h.schema())];
  }
  EXPECT_EQ(Buckets(h, true), expect_positive);
  EXPECT_EQ(Buckets(h, false), expect_negative);
  EXPECT_EQ(h.count(), samples.size());
}

TEST(NativeHistogramTest, ARangeWithinAThousandfoldKeepsSchemaFive) {
  NativeHistogram h;
  for (double x = 0.1; x < 100; x *= 1.01) h.Add(x);
  EXPECT_EQ(h.schema(), 5);
  EXPECT_LE(h.positive().counts.size(), NativeHistogram::kMaxBuckets);
}

}  // namespace
}  // namespace torchmon::server

// The distribution of a series' accepted samples since the series was
// created, in the buckets of a Prometheus native histogram (exposed as
// torchmon_stat_distribution; docs/metrics.md).
//
// Buckets are exponential, base 2^(2^-schema): positive bucket i holds
// the samples in (base^(i-1), base^i], negative bucket i those in
// [-base^i, -base^(i-1)), and the zero bucket those with |x| ≤
// kZeroThreshold. At kInitialSchema (5) a bucket spans a factor of
// 2^(1/32) ≈ 1.0219: any value of the bucket is within 1.09 % of the
// bucket's midpoint (base - 1) / (base + 1), and a quantile interpolated
// inside the bucket, as PromQL's histogram_quantile does, is within
// base - 1 ≈ 2.2 % of the exact one.
//
// Bounded: the buckets of both signs together span at most kMaxBuckets
// indices. A sample that would widen them past that first coarsens the
// schema by one, merging each pair of neighbouring buckets (as Prometheus'
// client libraries do), as many times as needed. At schema 5 that happens
// once the samples of one sign span more than a factor of 2^(320/32) = 1024.
// Coarsening is never undone (the histogram is cumulative); the schema
// each scrape shows says what the buckets are.
//
// NaN samples are counted (count) and make the sum NaN but go into no
// bucket; +Inf and -Inf go into the highest positive and negative bucket
// (InfiniteIndex), whose upper bound is infinite: both as Prometheus'
// client libraries do.
//
// Not thread-safe; guarded by the series' lock, as the window's sketch.
#ifndef TORCHMON_SERVER_CORE_NATIVE_HISTOGRAM_H_
#define TORCHMON_SERVER_CORE_NATIVE_HISTOGRAM_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchmon::server {
namespace state {
class Writer;
class Reader;
}  // namespace state

class NativeHistogram {
 public:
  static constexpr int32_t kInitialSchema = 5;
  // The coarsest schema Prometheus defines.
  static constexpr int32_t kMinSchema = -4;
  static constexpr size_t kMaxBuckets = 320;
  // Prometheus' client libraries' default: 2^-128.
  static constexpr double kZeroThreshold = 2.938735877055719e-39;

  // Contiguous buckets [offset, offset + counts.size()) of one sign, by
  // magnitude.
  struct Buckets {
    int32_t offset = 0;
    std::vector<uint64_t> counts;
  };

  void Add(double x);

  int32_t schema() const { return schema_; }
  // Every sample added, NaN included.
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }
  uint64_t zero_count() const { return zero_count_; }
  const Buckets& positive() const { return positive_; }
  const Buckets& negative() const { return negative_; }
  // Samples of +Inf and -Inf: in bucket InfiniteIndex(schema()) of their sign.
  uint64_t positive_infinities() const { return positive_inf_; }
  uint64_t negative_infinities() const { return negative_inf_; }

  // Calls fn(index, count) for each bucket of one sign with a count, in
  // index order, the infinities of that sign in bucket InfiniteIndex.
  template <typename Fn>
  void ForEachBucket(bool positive, Fn&& fn) const {
    const Buckets& store = positive ? positive_ : negative_;
    ForEachBucketIn(store.offset, store.counts.data(), store.counts.size(),
                    positive ? positive_inf_ : negative_inf_, schema_, fn);
  }
  // The same over a copy of one sign's state: dense counts from `offset`,
  // and its infinities.
  template <typename Fn>
  static void ForEachBucketIn(int32_t offset, const uint64_t* counts, size_t size,
                              uint64_t infinities, int32_t schema, Fn&& fn) {
    const int32_t inf_index = InfiniteIndex(schema);
    bool inf_written = infinities == 0;
    for (size_t j = 0; j < size; ++j) {
      const int32_t index = offset + static_cast<int32_t>(j);
      uint64_t n = counts[j];
      if (index == inf_index) {  // the largest finite doubles share the bucket
        n += infinities;
        inf_written = true;
      }
      if (n != 0) fn(index, n);
    }
    if (!inf_written) fn(inf_index, infinities);
  }

  // The bucket of magnitude `m` (finite, > kZeroThreshold) at `schema`.
  static int32_t Index(double m, int32_t schema);
  // The lowest bucket index at `schema` whose upper bound overflows a double
  // (+Inf): where ±Inf samples are counted.
  static int32_t InfiniteIndex(int32_t schema);
  // Upper bound base^index of bucket `index` at `schema`.
  static double UpperBound(int32_t index, int32_t schema);

  // The whole histogram, for the daemon's state (state_wire.h); Load
  // replaces this one's content and fails on the reader when the bytes are
  // not a histogram this build can hold.
  void Save(state::Writer& out) const;
  bool Load(state::Reader& in);

  // Heap bytes held by the buckets.
  size_t bucket_bytes() const {
    return (positive_.counts.capacity() + negative_.counts.capacity()) * sizeof(uint64_t);
  }

 private:
  // Adds one sample to bucket `index` of `store` (the other sign's buckets
  // are `other`), coarsening first if the buckets would span too many.
  void AddToBucket(Buckets& store, int32_t index);
  // One schema coarser: each pair of neighbouring buckets becomes one.
  void Coarsen();

  int32_t schema_ = kInitialSchema;
  Buckets positive_, negative_;
  uint64_t count_ = 0;
  uint64_t zero_count_ = 0;
  uint64_t positive_inf_ = 0, negative_inf_ = 0;
  double sum_ = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_NATIVE_HISTOGRAM_H_

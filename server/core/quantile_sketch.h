// A mergeable quantile sketch with a relative-error guarantee (DDSketch:
// Masson, Rim, Lee, "DDSketch: A Fast and Fully-Mergeable Quantile Sketch
// with Relative-Error Guarantees", VLDB 2019), the base of the per-window
// quantile aggregations of issue 7 (p50, p90, p99, ...).
//
// A sample x ≠ 0 goes to bucket ceil(log_γ |x|) of the positive or the
// negative store, γ = (1 + α) / (1 - α). Every value of a bucket is within
// relative error α of the bucket's representative 2γ^i / (γ + 1), so the
// q-quantile returned is within α·|exact| of the exact sample of rank
// floor(q · (count - 1)) — as long as no bucket was collapsed (below).
//
// Memory is bounded: each store keeps at most `max_buckets` contiguous
// buckets. When the samples of a store span more, its buckets of the
// smallest magnitudes are merged into one (the lowest quantiles of a store
// lose their accuracy first; the tail the sketch exists for keeps it). With
// α = 1% and 1024 buckets (8 KiB at most per store) a store covers a
// dynamic range of 7.5e8 (e.g. 1 µs to 12 min of step time) before anything
// is collapsed.
//
// NaN samples are counted apart: a sketch that saw one answers NaN, as MIN
// and MAX do (docs/semantics.md). ±Inf sort below/above everything finite.
// Not thread-safe; a window's sketch is guarded by the series' lock.
#ifndef TORCHMON_SERVER_CORE_QUANTILE_SKETCH_H_
#define TORCHMON_SERVER_CORE_QUANTILE_SKETCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace torchmon::server {
namespace state {
class Writer;
class Reader;
}  // namespace state

class QuantileSketch {
 public:
  static constexpr double kDefaultRelativeAccuracy = 0.01;
  static constexpr size_t kDefaultMaxBuckets = 1024;

  explicit QuantileSketch(double relative_accuracy = kDefaultRelativeAccuracy,
                          size_t max_buckets = kDefaultMaxBuckets);

  void Add(double x);
  // Adds every sample of `other`, which must have the same accuracy and
  // bucket limit. The result is the sketch of both sample sets.
  void Merge(const QuantileSketch& other);

  // Forgets every sample; keeps the bucket storage for reuse.
  void Clear();

  // The q-quantile, 0 ≤ q ≤ 1 (clamped); NaN if empty or a NaN was added.
  double Quantile(double q) const;

  uint64_t count() const { return count_; }
  double relative_accuracy() const { return alpha_; }
  // Buckets held now, both stores: 8 bytes of memory each.
  size_t bucket_count() const { return positive_.counts.size() + negative_.counts.size(); }
  bool collapsed() const { return positive_.collapsed || negative_.collapsed; }

  // The whole sketch, for the daemon's state (state_wire.h); Load replaces
  // this one's content, and fails on the reader (nothing kept) when the
  // bytes are not a sketch this build can hold.
  void Save(state::Writer& out) const;
  bool Load(state::Reader& in);
  // Bucket storage allocated, used or kept by Clear for reuse (8 bytes each).
  size_t bucket_capacity() const {
    return positive_.counts.capacity() + negative_.counts.capacity();
  }

 private:
  // Contiguous buckets [offset, offset + counts.size()).
  struct Store {
    int32_t offset = 0;
    std::vector<uint64_t> counts;
    bool collapsed = false;

    void Add(int32_t index, uint64_t n, size_t max_buckets);
    void Clear() {
      offset = 0;
      counts.clear();
      collapsed = false;
    }
  };

  int32_t Index(double magnitude) const;
  double Value(int32_t index) const;

  double alpha_;
  double gamma_;
  double log_gamma_;
  size_t max_buckets_;
  Store positive_, negative_;
  uint64_t zeros_ = 0, positive_inf_ = 0, negative_inf_ = 0, nans_ = 0, count_ = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_QUANTILE_SKETCH_H_

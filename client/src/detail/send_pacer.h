// When the sender thread sends its next batch. Pure: the caller passes the
// time elapsed and what it found in the rings.
#ifndef TORCHMON_CLIENT_DETAIL_SEND_PACER_H_
#define TORCHMON_CLIENT_DETAIL_SEND_PACER_H_

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>

namespace torchmon::detail {

// Every batch costs ~0.25 ms of CPU in gRPC whatever it carries, so a quiet
// client should send rarely; a busy one must send before its rings fill.
//
// The gap to the next batch is what the fullest ring takes to reach
// kTargetFill at the highest fill rate seen lately (decaying by e every
// kPeakDecay), so a client that was busy keeps its busy pace through a quiet
// patch and a burst after it (a producer catching up, a dump at the end of
// an epoch) finds room; pacing by the last cycle alone let one quiet look
// stretch the gap to the maximum while a stat took 200k samples/s. The gap
// grows at most twofold per cycle, because empty rings a moment after the
// previous cycle (after the hello, a flush, a retry) prove little, and never
// past `max_gap`. A new pacer starts at kInitialGap.
//
// Between batches the sender looks at the rings every kLookInterval (a few
// loads per stat, no I/O) and sends at once when IsBurst.
//
// Thread-compatible: one pacer per stream, used by the sender thread.
class SendPacer {
 public:
  using Duration = std::chrono::steady_clock::duration;
  static constexpr double kTargetFill = 0.25;
  static constexpr std::chrono::milliseconds kInitialGap{1};
  static constexpr std::chrono::milliseconds kLookInterval{25};
  static constexpr double kPeakDecaySeconds = 2.0;
  // Shorter intervals say too little about a rate to learn from.
  static constexpr double kMinRateSampleSeconds = 0.001;

  explicit SendPacer(Duration max_gap) : max_gap_(max_gap) {}

  // After a complete cycle that found the fullest ring `max_fill` full
  // (0..1), `since_last` after the previous cycle began: the gap from this
  // cycle's start to the next.
  Duration NextGap(Duration since_last, double max_fill) {
    const double seconds = std::chrono::duration<double>(since_last).count();
    if (seconds >= kMinRateSampleSeconds) {
      peak_fill_rate_ =
          std::max(max_fill / seconds, peak_fill_rate_ * std::exp(-seconds / kPeakDecaySeconds));
    }
    Duration gap = std::min<Duration>(max_gap_, 2 * last_gap_);
    if (peak_fill_rate_ > 0) {
      // Compared as seconds first: a peak decayed through minutes of quiet
      // (a rank that stopped) gives a time past what Duration holds (or
      // +inf), and converting that is undefined.
      const double fill_seconds = kTargetFill / peak_fill_rate_;
      if (fill_seconds < std::chrono::duration<double>(gap).count()) {
        gap = std::chrono::duration_cast<Duration>(std::chrono::duration<double>(fill_seconds));
      }
    }
    last_gap_ = gap;
    return gap;
  }

  // Whether a ring holding `buffered` of `capacity` samples should be sent
  // now rather than at the paced gap.
  static bool IsBurst(uint64_t buffered, size_t capacity) {
    return static_cast<double>(buffered) >= kTargetFill / 2 * static_cast<double>(capacity);
  }

 private:
  const Duration max_gap_;
  Duration last_gap_ = kInitialGap;
  // Highest fraction of a ring filled per second lately.
  double peak_fill_rate_ = 0;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_SEND_PACER_H_

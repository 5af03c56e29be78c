// torch::monitor's windows of one Stat, as torch's counters.h keeps them:
// the state behind count(), get() and the "torch.monitor.Stat" events, for
// the two Stats that behave as torch.monitor's in process (the C++
// torchmon::monitor::Stat<T> in torchmon/monitor.h and the Python client's
// Stat).
//
// Windows are multiples of the window length on the steady clock (id =
// now / window + 1). add() first logs a window that ended; a sample that
// arrives after its window was logged early (max_samples reached) is not
// counted; a sample that reaches max_samples logs its window at once.
// Logging makes the window being filled the last logged one, even when it
// is empty (get() then answers zeros); only a window with samples makes an
// event. MAX and MIN use torch's comparisons (a NaN never replaces them).
//
// Not thread-safe: the C++ Stat holds a mutex, the Python one the GIL.
#ifndef TORCHMON_MONITOR_WINDOWS_H_
#define TORCHMON_MONITOR_WINDOWS_H_

#include <chrono>
#include <cstdint>
#include <limits>

namespace torchmon::monitor {

// torch::monitor::Aggregation, numbered as the wire is (checked in
// torchmon/monitor.h; protocol::AggregationAs converts).
enum class Aggregation { NONE = 0, VALUE = 1, MEAN = 2, COUNT = 3, SUM = 4, MAX = 5, MIN = 6 };

// torch.monitor's "no cap", its max_samples default (INT64_MAX), and what
// the daemon is sent for a cap (StatOptions::max_samples: 0 is none).
inline constexpr int64_t kNoCap = std::numeric_limits<int64_t>::max();
inline constexpr int64_t DaemonMaxSamples(int64_t max_samples) {
  return max_samples == kNoCap ? 0 : max_samples;
}

template <typename T>
class StatWindows {
 public:
  // One window's running aggregates: zeros when value-initialized
  // (Values(), Values{}), as a window starts; left as they are otherwise,
  // so that a Logged on add()'s stack costs no stores.
  struct Values {
    T value;
    T sum;
    T min;
    T max;
    int64_t count;

    void Add(T v) {
      value = v;
      sum += v;
      if (max < v || count == 0) max = v;
      if (min > v || count == 0) min = v;
      count += 1;
    }

    // Aggregation `a` of this window as torch::monitor reports it: MEAN 0
    // for an empty window, and an integer division for integer stats;
    // NONE is 0.
    T Get(Aggregation a) const {
      switch (a) {
        case Aggregation::VALUE: return value;
        case Aggregation::MEAN: return count == 0 ? T{0} : static_cast<T>(sum / count);
        case Aggregation::COUNT: return static_cast<T>(count);
        case Aggregation::SUM: return sum;
        case Aggregation::MAX: return max;
        case Aggregation::MIN: return min;
        case Aggregation::NONE: break;
      }
      return T{0};
    }
  };

  // The windows with samples one Add or Close logged, oldest first: the
  // caller's, so that a stat keeps no copy of them (40 bytes a stat).
  struct Logged {
    Values windows[2];
    int count = 0;
  };

  // Windows of `window` (one below 1 ms is taken as 1 ms), each closed
  // early once it holds `max_samples` (kNoCap: never). Every member is O(1).
  StatWindows(std::chrono::milliseconds window, int64_t max_samples)
      : window_ms_(window.count() > 0 ? window.count() : 1), max_samples_(max_samples) {}

  // Adds `v` at the steady clock's now. Puts the windows with samples it
  // logged (0 to 2) in `logged`, and returns how many.
  int Add(T v, Logged& logged) { return AddAt(v, SteadyNowMs(), logged); }

  // Add at `now_ms` on the steady clock (tests drive time through it).
  // Calls must not go back in time.
  int AddAt(T v, int64_t now_ms, Logged& logged) {
    logged.count = 0;
    const uint64_t window = static_cast<uint64_t>(now_ms / window_ms_) + 1;
    MaybeLog(window, logged);
    if (last_logged_ != window) {
      current_.Add(v);
      MaybeLog(window, logged);
    }
    return logged.count;
  }

  // Logs the window being filled, as a Stat's destructor does. Returns 1 if
  // it held samples (then in logged.windows[0]), else 0.
  int Close(Logged& logged) {
    logged.count = 0;
    Log(logged);
    return logged.count;
  }

  // Samples in the window being filled (count()).
  int64_t count() const { return current_.count; }
  // The last logged window (get()).
  const Values& last_logged() const { return prev_; }

 private:
  static int64_t SteadyNowMs() {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void MaybeLog(uint64_t window, Logged& logged) {
    const bool should = window_id_ != window || current_.count >= max_samples_;
    if (!should || last_logged_ == window) return;
    Log(logged);
    last_logged_ = window_id_;
    window_id_ = window;
  }

  void Log(Logged& logged) {
    prev_ = current_;
    current_ = Values();
    if (prev_.count > 0) logged.windows[logged.count++] = prev_;
  }

  int64_t window_ms_;
  int64_t max_samples_;
  Values current_{};
  Values prev_{};
  uint64_t window_id_ = 0;
  uint64_t last_logged_ = 0;
};

}  // namespace torchmon::monitor

#endif  // TORCHMON_MONITOR_WINDOWS_H_

// Reconnect delays of the client's sender thread.
#ifndef TORCHMON_CLIENT_DETAIL_BACKOFF_H_
#define TORCHMON_CLIENT_DETAIL_BACKOFF_H_

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>

namespace torchmon::detail {

// Doubling from `initial` to `max`, each delay drawn with ±20% jitter so
// that the ranks of a job, which lose their daemon together, do not
// reconnect in lockstep. Never less than 1 ms. Pure apart from the seed;
// thread-compatible.
class Backoff {
 public:
  using milliseconds = std::chrono::milliseconds;

  Backoff(milliseconds initial, milliseconds max, uint32_t seed)
      : initial_(initial), max_(std::max(max, initial)), current_(initial), rng_(seed) {}

  // The next delay: the current step, jittered.
  milliseconds Next() {
    std::uniform_real_distribution<double> jitter(0.8, 1.2);
    return milliseconds(std::max<int64_t>(
        1, static_cast<int64_t>(static_cast<double>(current_.count()) * jitter(rng_))));
  }
  // After a failure: the step doubles, up to max.
  void Grow() { current_ = std::min(current_ * 2, max_); }
  // After a success: back to initial.
  void Reset() { current_ = initial_; }
  milliseconds current() const { return current_; }

 private:
  const milliseconds initial_;
  const milliseconds max_;
  milliseconds current_;
  std::minstd_rand rng_;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_BACKOFF_H_

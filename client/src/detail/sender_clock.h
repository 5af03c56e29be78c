// The client's elapsed time: what the sender paces, backs off and times out
// by, and what Flush's deadline is measured on. Injected into ClientCore so
// that tests of pacing, backoff and flush deadlines run on a ManualSenderClock
// instead of sleeping; a client in production uses SenderClock::Real(),
// std::chrono::steady_clock.
#ifndef TORCHMON_CLIENT_DETAIL_SENDER_CLOCK_H_
#define TORCHMON_CLIENT_DETAIL_SENDER_CLOCK_H_

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torchmon::detail {

// Thread-safe.
class SenderClock {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  using duration = std::chrono::steady_clock::duration;

  virtual ~SenderClock() = default;
  virtual time_point Now() const = 0;
  // Waits on `cv`, `mu` held, until it is signalled or Now() reaches
  // `deadline`. May return early: callers check their condition and the
  // time again.
  virtual void WaitUntil(absl::CondVar& cv, absl::Mutex& mu, time_point deadline) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // std::chrono::steady_clock and absl::CondVar's own timeout.
  static const SenderClock& Real();
};

// Time that moves only by Advance(). A wait for a later time returns when
// Advance() reaches it (or is signalled as usual); it never waits on real
// time, but for a safety bound of one real second per wait, so that a test
// that forgets to advance is slow rather than hung.
class ManualSenderClock final : public SenderClock {
 public:
  time_point Now() const override ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return now_;
  }

  void WaitUntil(absl::CondVar& cv, absl::Mutex& mu, time_point deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) ABSL_LOCKS_EXCLUDED(mu_) {
    {
      absl::MutexLock lock(&mu_);
      if (now_ >= deadline) return;
      waiters_.push_back(Waiter{&cv, &mu, deadline});
      ++waits_begun_;
    }
    cv.WaitWithTimeout(&mu, absl::Seconds(1));
    absl::MutexLock lock(&mu_);
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
      if (it->cv == &cv) {
        waiters_.erase(it);
        break;
      }
    }
  }

  // Waits in WaitUntil now, and begun ever: for tests that must know that
  // a waiter has looked at the time and chosen to wait.
  size_t Waiting() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return waiters_.size();
  }
  uint64_t WaitsBegun() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    return waits_begun_;
  }
  // How far ahead of now the latest deadline waited for lies (zero if none
  // waits): a test sees, e.g., that a backoff pause has begun and when it
  // ends. (A wait also ends after a second of real time and begins again
  // with the same deadline, so WaitsBegun alone cannot tell.)
  duration LongestWaitAhead() const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    duration longest{0};
    for (const Waiter& w : waiters_) longest = std::max(longest, w.deadline - now_);
    return longest;
  }

  // Moves time on and wakes every waiter, which then looks at the time. A
  // waiter's mutex is taken to signal it, so none misses the move: call it
  // from a thread that holds none of them, while the waiters' owners live.
  void Advance(duration d) ABSL_LOCKS_EXCLUDED(mu_) {
    std::vector<Waiter> waiters;
    {
      absl::MutexLock lock(&mu_);
      now_ += d;
      waiters = waiters_;
    }
    for (const Waiter& w : waiters) {
      absl::MutexLock lock(w.mu);
      w.cv->SignalAll();
    }
  }

 private:
  mutable absl::Mutex mu_;
  // Starts far from the epoch, as steady_clock does.
  time_point now_ ABSL_GUARDED_BY(mu_) = time_point(std::chrono::hours(1000));
  struct Waiter {
    absl::CondVar* cv;
    absl::Mutex* mu;
    time_point deadline;
  };
  mutable std::vector<Waiter> waiters_ ABSL_GUARDED_BY(mu_);
  mutable uint64_t waits_begun_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_SENDER_CLOCK_H_

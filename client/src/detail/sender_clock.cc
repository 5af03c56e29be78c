#include "detail/sender_clock.h"

#include <algorithm>

namespace torchmon::detail {
namespace {

class RealSenderClock final : public SenderClock {
 public:
  time_point Now() const override { return std::chrono::steady_clock::now(); }
  void WaitUntil(absl::CondVar& cv, absl::Mutex& mu, time_point deadline) const override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    const duration left = deadline - Now();
    if (left <= duration::zero()) return;
    cv.WaitWithTimeout(&mu, absl::FromChrono(left));
  }
};

}  // namespace

const SenderClock& SenderClock::Real() {
  // Never destroyed: a client still alive at exit (one a Python traceback
  // kept, a leaked default client) has a sender thread reading it after
  // static destructors ran, and a destroyed clock's Now() is a pure virtual
  // call that aborts the process.
  static const RealSenderClock* clock = new RealSenderClock();
  return *clock;
}

}  // namespace torchmon::detail

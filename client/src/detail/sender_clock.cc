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
  static const RealSenderClock clock;
  return clock;
}

}  // namespace torchmon::detail

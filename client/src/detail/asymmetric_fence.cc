#include "detail/asymmetric_fence.h"

#if defined(__linux__)
#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace torchmon::detail {

std::atomic<bool> AsymmetricFence::available_{false};

bool AsymmetricFence::Register() noexcept {
#if defined(__linux__) && defined(SYS_membarrier)
  static const bool registered = [] {
    const long commands = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (commands < 0 || (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) return false;
    return syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
  }();
  if (registered) available_.store(true, std::memory_order_release);
  return registered;
#else
  return false;
#endif
}

bool AsymmetricFence::HeavyFence() noexcept {
#if defined(__linux__) && defined(SYS_membarrier)
  return syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0;
#else
  return false;
#endif
}

}  // namespace torchmon::detail

// Asymmetric fences: a Dekker handshake between a side that runs on every
// add() and a side that runs a few times a second, where only the rare side
// pays for the full barrier.
//
// The hot side writes its flag, calls LightFence() (a compiler barrier, no
// instruction) and reads the other side's flag. The rare side writes its
// flag, calls HeavyFence() and reads the hot side's. HeavyFence() is
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED): the kernel runs a full
// memory barrier on every CPU that is running a thread of this process, so
// either the hot side's flag is visible to the rare side or the rare side's
// flag is visible to the hot side's read, as with two full fences (the
// pattern of Linux's rseq users and folly's asymmetric fences).
//
// Available() is false where the kernel (before Linux 4.14) or a seccomp
// filter refuses membarrier; callers then keep to full atomic operations on
// both sides. Thread-safe.
#ifndef TORCHMON_CLIENT_DETAIL_ASYMMETRIC_FENCE_H_
#define TORCHMON_CLIENT_DETAIL_ASYMMETRIC_FENCE_H_

#include <atomic>

namespace torchmon::detail {

class AsymmetricFence {
 public:
  // Registers this process for expedited membarriers, once (one system
  // call, the first time). True if HeavyFence() works from now on.
  static bool Register() noexcept;
  // Register()'s answer, without registering: false until a Register()
  // has succeeded.
  static bool Available() noexcept { return available_.load(std::memory_order_acquire); }

  static void LightFence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }
  // Only once Available(). False if the kernel refused the barrier this
  // time (the caller must then assume the hot side may be mid-way).
  static bool HeavyFence() noexcept;

 private:
  static std::atomic<bool> available_;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_ASYMMETRIC_FENCE_H_

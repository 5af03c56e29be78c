// torchmon::WaitCounter: time spent waiting, by key, as torch.monitor's
// _WaitCounter and c10's WaitCounter count it. The one home of the rule
// that turns a key into series: torchmon._WaitCounter (Python) and the
// backend that receives PyTorch's own wait counters (torchmon.torch's
// enable_metrics, docs/torch-metrics.md) both make their series here.
//
// A key is two stats in the daemon, in windows of kWindow:
//   <key>.wait_s   COUNT (waits ended), SUM (seconds waited), MAX (longest
//                  wait), and a native histogram of the waits (seconds);
//   <key>.active   VALUE and MAX of the waits in flight, sampled at each
//                  begin and end.
// A key is named as a stat is, with a stat name's limits: a key that makes
// an invalid name makes invalid Stats, which drop and count their samples
// and report why (Client::TakeErrors), as any invalid Stat does.
//
// Thread-safety: Begin and End may be called from any number of threads at
// once. Neither blocks, throws, allocates nor makes a syscall (Stat::add's
// guarantees): the cost of a pair is in docs/performance.md.
#ifndef TORCHMON_WAIT_COUNTER_H_
#define TORCHMON_WAIT_COUNTER_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

#include "torchmon/client.h"

namespace torchmon {

class WaitCounter {
 public:
  // The windows of a key's series.
  static constexpr std::chrono::milliseconds kWindow{10000};

  // The names of a key's two stats.
  static std::string WaitStatName(std::string_view key);
  static std::string ActiveStatName(std::string_view key);

  // Defines the key's two stats on `client` (Stats: the counter may outlive
  // the client, and then counts its samples as dropped).
  WaitCounter(Client& client, std::string_view key);
  // Uses Client::Default().
  explicit WaitCounter(std::string_view key);
  WaitCounter(const WaitCounter&) = delete;
  WaitCounter& operator=(const WaitCounter&) = delete;

  // A wait begins: one more in flight.
  void Begin() noexcept;
  // A wait that began with Begin() ends, having lasted `waited` (a negative
  // duration, from a clock that went back, counts as 0).
  void End(std::chrono::nanoseconds waited) noexcept;

  // Waits in flight now.
  int64_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }

 private:
  Stat wait_;
  Stat active_;
  std::atomic<int64_t> in_flight_{0};
};

}  // namespace torchmon

#endif  // TORCHMON_WAIT_COUNTER_H_

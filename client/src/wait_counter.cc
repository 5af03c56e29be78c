#include "torchmon/wait_counter.h"

#include <algorithm>

namespace torchmon {
namespace {

StatOptions WaitOptions() {
  StatOptions options;
  options.histogram = true;
  return options;
}

}  // namespace

std::string WaitCounter::WaitStatName(std::string_view key) {
  return std::string(key) + ".wait_s";
}

std::string WaitCounter::ActiveStatName(std::string_view key) {
  return std::string(key) + ".active";
}

WaitCounter::WaitCounter(Client& client, std::string_view key)
    : wait_(client, WaitStatName(key), {Aggregation::COUNT, Aggregation::SUM, Aggregation::MAX},
            kWindow, WaitOptions()),
      active_(client, ActiveStatName(key), {Aggregation::VALUE, Aggregation::MAX}, kWindow) {}

WaitCounter::WaitCounter(std::string_view key) : WaitCounter(Client::Default(), key) {}

void WaitCounter::Begin() noexcept {
  const int64_t now_in_flight = in_flight_.fetch_add(1, std::memory_order_relaxed) + 1;
  active_.add(static_cast<double>(now_in_flight));
}

void WaitCounter::End(std::chrono::nanoseconds waited) noexcept {
  wait_.add(static_cast<double>(std::max<int64_t>(waited.count(), 0)) * 1e-9);
  const int64_t now_in_flight = in_flight_.fetch_sub(1, std::memory_order_relaxed) - 1;
  active_.add(static_cast<double>(now_in_flight));
}

}  // namespace torchmon

#include <time.h>

#include <utility>

#include "detail/client_core.h"
#include "detail/stat_state.h"
#include "torchmon/client.h"

namespace torchmon {
namespace {

// CLOCK_REALTIME through the vDSO: no syscall, ~20 ns with a TSC clocksource.
int64_t NowMicros() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace

Stat::Stat(Client& client, std::string name, std::vector<Aggregation> aggregations,
           std::chrono::milliseconds window_size, int64_t max_samples, Labels labels)
    : state_(client.core_->RegisterStat(std::move(name), aggregations, window_size, max_samples,
                                        labels)) {}

Stat::Stat(std::string name, std::vector<Aggregation> aggregations,
           std::chrono::milliseconds window_size, int64_t max_samples, Labels labels)
    : Stat(Client::Default(), std::move(name), std::move(aggregations), window_size, max_samples,
           std::move(labels)) {}

Stat::~Stat() { state_->closed.store(true, std::memory_order_release); }

void Stat::add(double value) noexcept { state_->Add(value, NowMicros()); }

void Stat::add(double value, int64_t timestamp_us) noexcept { state_->Add(value, timestamp_us); }

const std::string& Stat::name() const { return state_->definition.name(); }

uint64_t Stat::added() const { return state_->added(); }

uint64_t Stat::dropped() const { return state_->dropped(); }

}  // namespace torchmon

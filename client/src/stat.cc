#include <utility>

#include "detail/client_core.h"
#include "detail/stat_state.h"
#include "detail/wall_clock.h"
#include "torchmon/client.h"

namespace torchmon {

Stat::Stat(Client& client, std::string name, std::vector<StatAggregation> aggregations,
           std::chrono::milliseconds window_size, int64_t max_samples, Labels labels)
    : Stat(client, std::move(name), std::move(aggregations), window_size,
           StatOptions{max_samples, std::move(labels), false}) {}

Stat::Stat(std::string name, std::vector<StatAggregation> aggregations,
           std::chrono::milliseconds window_size, int64_t max_samples, Labels labels)
    : Stat(Client::Default(), std::move(name), std::move(aggregations), window_size,
           StatOptions{max_samples, std::move(labels), false}) {}

Stat::Stat(Client& client, std::string name, std::vector<StatAggregation> aggregations,
           std::chrono::milliseconds window_size, StatOptions options)
    : state_(client.core_->RegisterStat(std::move(name), aggregations, window_size, options)),
      buffers_(state_->valid ? state_->buffers.get() : nullptr),
      id_(state_->id) {}

Stat::Stat(std::string name, std::vector<StatAggregation> aggregations,
           std::chrono::milliseconds window_size, StatOptions options)
    : Stat(Client::Default(), std::move(name), std::move(aggregations), window_size,
           std::move(options)) {}

Stat::~Stat() {
  state_->closed.store(true, std::memory_order_release);
  state_->buffers->closed_stats.fetch_add(1, std::memory_order_release);
}

int64_t WallMicros() noexcept { return detail::WallClock::NowMicros(); }

void Stat::add(double value) noexcept {
  // The clock is read once the log has a cell for the sample
  // (ClientBuffers::TryAddNow).
  if (buffers_ == nullptr ||
      !buffers_->TryAddNow(id_, value, [] { return detail::WallClock::NowMicros(); }))
      [[unlikely]] {
    state_->Reject();
  }
}

void Stat::add(double value, int64_t timestamp_us) noexcept {
  if (buffers_ == nullptr || !buffers_->TryAdd(id_, value, timestamp_us)) [[unlikely]] {
    state_->Reject();
  }
}

const std::string& Stat::name() const { return state_->name; }

uint64_t Stat::added() const { return state_->added(); }

uint64_t Stat::dropped() const { return state_->dropped(); }

StatCounters Stat::counters() const {
  const detail::StatState& s = *state_;
  const detail::StatCounts& counts = s.counts;
  StatCounters c;
  // Acknowledged counts first: they only grow, and never past what was added.
  c.delivered_to_current_daemon = counts.delivered_current.load(std::memory_order_relaxed);
  c.drops_reported_to_current_daemon = counts.drops_acked_current.load(std::memory_order_relaxed);
  c.delivered = counts.delivered.load(std::memory_order_relaxed);
  c.drops_reported = counts.drops_acked.load(std::memory_order_relaxed);
  c.dropped = s.dropped();
  c.added = s.added();
  return c;
}

}  // namespace torchmon

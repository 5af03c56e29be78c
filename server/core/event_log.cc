#include "server/core/event_log.h"

#include <algorithm>
#include <iterator>

namespace torchmon::server {

EventLog::EventLog(size_t capacity, int64_t ttl_ms, const Clock& clock)
    : capacity_(std::max<size_t>(capacity, 1)), ttl_ms_(ttl_ms), clock_(clock) {}

uint64_t EventLog::Append(EventRecord event) {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  event.sequence = next_sequence_++;
  Totals& totals = totals_[SeriesKey{event.name, event.labels}];
  ++totals.count;
  totals.last_seen_ms = now;
  for (const auto& [field, value] : event.data) {
    double numeric;
    if (const double* d = std::get_if<double>(&value)) {
      numeric = *d;
    } else if (const int64_t* i = std::get_if<int64_t>(&value)) {
      numeric = static_cast<double>(*i);
    } else if (const bool* b = std::get_if<bool>(&value)) {
      numeric = *b ? 1 : 0;
    } else {
      continue;
    }
    auto pos = std::lower_bound(totals.last_numeric.begin(), totals.last_numeric.end(), field,
                                [](const auto& kv, const std::string& f) { return kv.first < f; });
    if (pos != totals.last_numeric.end() && pos->first == field) {
      pos->second = numeric;
    } else {
      totals.last_numeric.insert(pos, {field, numeric});
    }
  }
  const uint64_t sequence = event.sequence;
  events_.push_back(std::move(event));
  while (events_.size() > capacity_) events_.pop_front();
  return sequence;
}

std::vector<EventRecord> EventLog::Get(const Selector& selector, uint64_t after_sequence,
                                       size_t limit) const {
  std::vector<EventRecord> out;
  absl::MutexLock lock(&mu_);
  for (auto it = events_.rbegin(); it != events_.rend(); ++it) {
    if (it->sequence <= after_sequence) break;
    if (limit != 0 && out.size() >= limit) break;
    if (selector.Matches(it->name, it->labels)) out.push_back(*it);
  }
  std::reverse(out.begin(), out.end());
  return out;
}

uint64_t EventLog::StartOfMostRecent(const Selector& selector, uint64_t after_sequence,
                                     size_t limit) const {
  if (limit == 0) return after_sequence;
  absl::MutexLock lock(&mu_);
  size_t found = 0;
  for (auto it = events_.rbegin(); it != events_.rend() && it->sequence > after_sequence; ++it) {
    if (selector.Matches(it->name, it->labels) && ++found == limit) return it->sequence - 1;
  }
  return after_sequence;
}

EventLog::Chunk EventLog::GetChunk(const Selector& selector, uint64_t after_sequence,
                                   size_t max_events) const {
  const size_t max_items = std::clamp<size_t>(max_events, 1, kChunk);
  Chunk chunk;
  chunk.resume_after = after_sequence;
  absl::MutexLock lock(&mu_);
  // Sequences are consecutive in the log: the first one to look at is found
  // by subtraction.
  size_t i = 0;
  if (!events_.empty() && after_sequence >= events_.front().sequence) {
    i = static_cast<size_t>(after_sequence - events_.front().sequence + 1);
  }
  for (size_t visited = 0; i < events_.size(); ++i) {
    const EventRecord& e = events_[i];
    chunk.resume_after = e.sequence;
    if (selector.Matches(e.name, e.labels)) chunk.events.push_back(e);
    if (chunk.events.size() >= max_items || ++visited >= kVisitPerChunk) {
      chunk.done = i + 1 == events_.size();
      return chunk;
    }
  }
  chunk.done = true;
  return chunk;
}

void EventLog::AddClientDrops(const std::string& name, const Labels& labels, uint64_t dropped) {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  Totals& totals = totals_[SeriesKey{name, labels}];
  // Saturates, as the series' client_dropped does: a client's count is not
  // to be trusted, and a counter must never go back.
  totals.client_dropped += std::min(dropped, ~uint64_t{0} - totals.client_dropped);
  totals.last_seen_ms = now;
}

EventLog::TotalsChunk EventLog::GetTotalsChunk(const Selector& selector, const SeriesKey* after,
                                               size_t max_entries) const {
  const size_t max_items = std::clamp<size_t>(max_entries, 1, kChunk);
  TotalsChunk chunk;
  absl::MutexLock lock(&mu_);
  auto it = after != nullptr ? totals_.upper_bound(*after) : totals_.begin();
  for (size_t visited = 0; it != totals_.end(); ++it) {
    if (selector.Matches(it->first)) chunk.totals.emplace_back(it->first, it->second);
    if (chunk.totals.size() >= max_items || ++visited >= kVisitPerChunk) {
      if (std::next(it) != totals_.end()) chunk.resume_after = it->first;
      return chunk;
    }
  }
  return chunk;
}

void EventLog::ForEachTotals(
    absl::FunctionRef<void(const SeriesKey&, const Totals&)> fn) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [key, totals] : totals_) fn(key, totals);
}

size_t EventLog::ExpireIdle() {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  size_t removed = 0;
  for (auto it = totals_.begin(); it != totals_.end();) {
    if (it->second.last_seen_ms + ttl_ms_ <= now) {
      it = totals_.erase(it);
      ++removed;
    } else {
      ++it;
    }
  }
  return removed;
}

uint64_t EventLog::total_appended() const {
  absl::MutexLock lock(&mu_);
  return next_sequence_ - 1;
}

size_t EventLog::size() const {
  absl::MutexLock lock(&mu_);
  return events_.size();
}

}  // namespace torchmon::server

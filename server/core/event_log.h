// A bounded log of events plus, per event name and label set, the counters
// and last numeric field values the exposition shows. Pure; thread-safe.
#ifndef TORCHMON_SERVER_CORE_EVENT_LOG_H_
#define TORCHMON_SERVER_CORE_EVENT_LOG_H_

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/functional/function_ref.h"
#include "absl/synchronization/mutex.h"
#include "server/core/clock.h"
#include "server/core/selector.h"
#include "server/core/types.h"

namespace torchmon::server {

using EventValue = std::variant<std::string, double, int64_t, bool>;

struct EventRecord {
  uint64_t sequence = 0;  // assigned by EventLog::Append
  std::string name;
  int64_t timestamp_us = 0;
  Labels labels;  // sorted by key
  std::vector<std::pair<std::string, EventValue>> data;
};

class EventLog {
 public:
  // Keeps the `capacity` most recent events (≥ 1). Per-name counters expire
  // like series: after `ttl_ms` without an event.
  EventLog(size_t capacity, int64_t ttl_ms, const Clock& clock);

  // Appends an event, assigning and returning its sequence number.
  uint64_t Append(EventRecord event) ABSL_LOCKS_EXCLUDED(mu_);

  // Retained events matching `selector` with sequence > after_sequence, the
  // `limit` most recent (0 = all), oldest first.
  std::vector<EventRecord> Get(const Selector& selector, uint64_t after_sequence,
                               size_t limit) const ABSL_LOCKS_EXCLUDED(mu_);

  // Paging (Query.GetEvents). The sequence after which the `limit` most
  // recent matching events with sequence > after_sequence begin (0 = all:
  // after_sequence itself).
  uint64_t StartOfMostRecent(const Selector& selector, uint64_t after_sequence,
                             size_t limit) const ABSL_LOCKS_EXCLUDED(mu_);
  struct Chunk {
    std::vector<EventRecord> events;  // oldest first
    uint64_t resume_after = 0;        // the last sequence looked at
    bool done = false;                // no retained event after it
  };
  // Up to max_events (≥ 1, ≤ kChunk) matching events with sequence >
  // after_sequence, oldest first, looking at no more than kVisitPerChunk:
  // the lock is held once, for a bounded time.
  Chunk GetChunk(const Selector& selector, uint64_t after_sequence, size_t max_events) const
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kChunk = 1024;
  static constexpr size_t kVisitPerChunk = 4096;

  // Per (name, labels): events seen and the last value of each numeric field
  // (bools as 0/1).
  struct Totals {
    uint64_t count = 0;
    // Events the clients reported dropping before sending.
    uint64_t client_dropped = 0;
    std::vector<std::pair<std::string, double>> last_numeric;  // sorted by field
    int64_t last_seen_ms = 0;
  };
  // Calls `fn` for every (name, labels) holding the lock; `fn` must be quick.
  void ForEachTotals(absl::FunctionRef<void(const SeriesKey&, const Totals&)> fn) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Records `dropped` events named `name` that a client with identity
  // `labels` (sorted) dropped before sending.
  void AddClientDrops(const std::string& name, const Labels& labels, uint64_t dropped)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Up to max_entries (≥ 1, ≤ kChunk) totals matching `selector` with keys
  // after *after (from the first if null), in key order (name, then
  // labels), looking at no more than kVisitPerChunk.
  struct TotalsChunk {
    std::vector<std::pair<SeriesKey, Totals>> totals;
    // The last key looked at: the next chunk resumes after it. Empty when
    // the walk reached the end.
    std::optional<SeriesKey> resume_after;
  };
  TotalsChunk GetTotalsChunk(const Selector& selector, const SeriesKey* after,
                             size_t max_entries) const ABSL_LOCKS_EXCLUDED(mu_);

  size_t ExpireIdle() ABSL_LOCKS_EXCLUDED(mu_);

  uint64_t total_appended() const ABSL_LOCKS_EXCLUDED(mu_);
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  const size_t capacity_;
  const int64_t ttl_ms_;
  const Clock& clock_;
  mutable absl::Mutex mu_;
  uint64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  std::deque<EventRecord> events_ ABSL_GUARDED_BY(mu_);
  // Ordered, so that ListEventTotals pages resume after a key.
  absl::btree_map<SeriesKey, Totals> totals_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_EVENT_LOG_H_

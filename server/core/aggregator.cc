#include "server/core/aggregator.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace torchmon::server {
namespace {

// Floor division: window indices must be right for timestamps before 1970
// too (a client with a broken clock), not truncated towards zero.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

}  // namespace

Aggregator::Aggregator(AggregatorOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

absl::StatusOr<SeriesId> Aggregator::Define(const SeriesKey& key, const StatSpec& spec) {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  if (auto it = ids_.find(key); it != ids_.end()) {
    Series& s = *series_.at(it->second);
    if (s.spec != spec) {
      return absl::AlreadyExistsError(absl::StrCat(
          "stat ", key.ToString(), " is already defined with ", s.spec.ToString(),
          "; refusing the conflicting definition with ", spec.ToString()));
    }
    s.last_update_ms = now;
    return s.id;
  }
  auto s = std::make_unique<Series>();
  s->id = next_id_++;
  s->key = std::make_shared<const SeriesKey>(key);
  s->spec = spec;
  s->last_update_ms = now;
  s->last_closed_index = std::numeric_limits<int64_t>::min();
  const SeriesId id = s->id;
  ids_.emplace(s->key.get(), id);
  series_.emplace(id, std::move(s));
  return id;
}

absl::StatusOr<AddResult> Aggregator::AddSamples(SeriesId id, absl::Span<const double> values,
                                                 absl::Span<const int64_t> timestamps_us) {
  if (values.size() != timestamps_us.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", values.size(), " values but ",
                                                   timestamps_us.size(), " timestamps"));
  }
  const int64_t now = clock_.NowMs();
  // floor(ts_us / 1000) > now + skew  ⟺  ts_us ≥ (now + skew + 1) · 1000.
  const int64_t skew_limit_us = (now + options_.max_future_skew_ms + 1) * 1000;
  AddResult result;
  absl::MutexLock lock(&mu_);
  auto it = series_.find(id);
  if (it == series_.end()) return absl::NotFoundError(absl::StrCat("series ", id, " expired"));
  Series& s = *it->second;
  const int64_t w = s.spec.window_ms;
  // Samples of a block almost always share a window: while they fall in
  // [cached_start_us, cached_end_us) no division is needed.
  OpenWindow* cached = nullptr;
  int64_t cached_start_us = 0, cached_end_us = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t ts_us = timestamps_us[i];
    if (ts_us >= skew_limit_us) {
      ++result.skewed;
      continue;
    }
    if (cached == nullptr || ts_us < cached_start_us || ts_us >= cached_end_us) {
      const int64_t index = FloorDiv(FloorDiv(ts_us, 1000), w);
      if (index <= s.last_closed_index || DeadlineMs(s, index) <= now) {
        ++result.late;
        continue;
      }
      auto pos = std::lower_bound(s.open.begin(), s.open.end(), index,
                                  [](const OpenWindow& o, int64_t k) { return o.index < k; });
      if (pos == s.open.end() || pos->index != index) {
        pos = s.open.insert(pos, OpenWindow{index, WindowStats{}});
        deadlines_.emplace(DeadlineMs(s, index), s.id);
      }
      cached = &*pos;
      // Not late, so the window is near now and these cannot overflow.
      cached_start_us = index * w * 1000;
      cached_end_us = cached_start_us + w * 1000;
    }
    if (cached->stats.Add(values[i], s.spec.max_samples)) {
      ++result.accepted;
    } else {
      ++result.capped;
    }
  }
  s.counters.accepted += result.accepted;
  s.counters.capped += result.capped;
  s.counters.late += result.late;
  s.counters.skewed += result.skewed;
  s.last_update_ms = now;
  return result;
}

absl::Status Aggregator::AddClientDrops(SeriesId id, uint64_t dropped) {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  auto it = series_.find(id);
  if (it == series_.end()) return absl::NotFoundError(absl::StrCat("series ", id, " expired"));
  it->second->counters.client_dropped += dropped;
  it->second->last_update_ms = now;
  return absl::OkStatus();
}

ClosedWindow Aggregator::ToClosedWindow(const Series& s, const WindowRecord& r) {
  ClosedWindow w;
  w.series = s.key;
  w.aggregations = s.spec.aggregations;
  w.start_ms = r.start_ms;
  w.end_ms = r.start_ms + s.spec.window_ms;
  w.stats = r.stats;
  w.partial = r.partial;
  return w;
}

void Aggregator::CloseWindows(Series& s, int64_t now_ms, bool everything,
                              std::vector<ClosedWindow>& out) {
  size_t closed = 0;
  for (const OpenWindow& o : s.open) {
    if (!everything && DeadlineMs(s, o.index) > now_ms) break;
    s.history.push_back(WindowRecord{o.index * s.spec.window_ms, o.stats, everything});
    out.push_back(ToClosedWindow(s, s.history.back()));
    s.last_closed_index = std::max(s.last_closed_index, o.index);
    ++closed;
  }
  s.open.erase(s.open.begin(), s.open.begin() + closed);
  while (s.history.size() > std::max<size_t>(options_.history_windows, 1)) s.history.pop_front();
}

std::vector<ClosedWindow> Aggregator::CloseDueWindows() {
  const int64_t now = clock_.NowMs();
  std::vector<ClosedWindow> out;
  absl::MutexLock lock(&mu_);
  auto end = deadlines_.upper_bound(now);
  for (auto it = deadlines_.begin(); it != end; ++it) {
    auto s = series_.find(it->second);
    if (s != series_.end()) CloseWindows(*s->second, now, /*everything=*/false, out);
  }
  deadlines_.erase(deadlines_.begin(), end);
  // One series may contribute several windows: order across series too.
  std::stable_sort(out.begin(), out.end(), [](const ClosedWindow& a, const ClosedWindow& b) {
    return a.end_ms < b.end_ms;
  });
  return out;
}

std::vector<ClosedWindow> Aggregator::CloseAllWindows() {
  const int64_t now = clock_.NowMs();
  std::vector<ClosedWindow> out;
  absl::MutexLock lock(&mu_);
  for (auto& [id, s] : series_) CloseWindows(*s, now, /*everything=*/true, out);
  deadlines_.clear();
  return out;
}

size_t Aggregator::ExpireIdleSeries() {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  std::vector<SeriesId> idle;
  for (const auto& [id, s] : series_) {
    if (s->open.empty() && s->last_update_ms + options_.series_ttl_ms <= now) idle.push_back(id);
  }
  for (SeriesId id : idle) {
    auto it = series_.find(id);
    ids_.erase(it->second->key.get());
    series_.erase(it);
  }
  return idle.size();
}

SeriesSnapshot Aggregator::Snapshot(const Series& s) {
  SeriesSnapshot snap;
  snap.key = s.key;
  snap.spec = s.spec;
  snap.counters = s.counters;
  if (!s.history.empty()) {
    snap.has_last_window = true;
    snap.last_window = ToClosedWindow(s, s.history.back());
  }
  snap.last_update_ms = s.last_update_ms;
  return snap;
}

std::vector<SeriesSnapshot> Aggregator::ListSeries(const Selector& selector) const {
  std::vector<SeriesSnapshot> out;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : series_) {
      if (selector.Matches(*s->key)) out.push_back(Snapshot(*s));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const SeriesSnapshot& a, const SeriesSnapshot& b) { return *a.key < *b.key; });
  return out;
}

std::vector<ClosedWindow> Aggregator::GetWindows(const Selector& selector, int64_t start_ms,
                                                 int64_t end_ms, size_t limit_per_series) const {
  std::vector<std::vector<ClosedWindow>> per_series;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [id, s] : series_) {
      if (!selector.Matches(*s->key)) continue;
      std::vector<ClosedWindow> windows;
      // Walk newest first so the limit keeps the most recent windows.
      for (auto r = s->history.rbegin(); r != s->history.rend(); ++r) {
        if (limit_per_series != 0 && windows.size() >= limit_per_series) break;
        const int64_t end = r->start_ms + s->spec.window_ms;
        if (start_ms != 0 && r->start_ms < start_ms) break;
        if (end_ms != 0 && end > end_ms) continue;
        windows.push_back(ToClosedWindow(*s, *r));
      }
      if (windows.empty()) continue;
      std::reverse(windows.begin(), windows.end());
      per_series.push_back(std::move(windows));
    }
  }
  std::sort(per_series.begin(), per_series.end(),
            [](const auto& a, const auto& b) { return *a.front().series < *b.front().series; });
  std::vector<ClosedWindow> out;
  for (auto& windows : per_series) {
    std::move(windows.begin(), windows.end(), std::back_inserter(out));
  }
  return out;
}

void Aggregator::ForEachSeries(absl::FunctionRef<void(const SeriesView&)> fn) const {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, s] : series_) {
    fn(SeriesView{*s->key, s->spec, s->counters, s->history.empty() ? nullptr : &s->history.back()});
  }
}

size_t Aggregator::series_count() const {
  absl::MutexLock lock(&mu_);
  return series_.size();
}

}  // namespace torchmon::server

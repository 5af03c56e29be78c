#include "server/core/aggregator.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "server/core/state_wire.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/protocol/windows.h"

namespace torchmon::server {
namespace {

constexpr uint64_t kSlotMask = 0xffffffffu;

SeriesId MakeId(uint32_t slot, uint32_t generation) {
  return (uint64_t{generation} << 32) | slot;
}

}  // namespace

Aggregator::Aggregator(AggregatorOptions options, const Clock& clock)
    : options_(std::move(options)), clock_(clock) {}

void Aggregator::SetJournal(StateJournal* journal) {
  absl::MutexLock lock(&mu_);
  journal_ = journal;
}


Aggregator::Series* Aggregator::FindLocked(SeriesId id) const {
  const uint64_t slot = id & kSlotMask;
  if (slot >= slots_.size()) return nullptr;
  const Slot& s = slots_[slot];
  if (s.generation != (id >> 32)) return nullptr;
  return s.series.get();
}

void Aggregator::RemoveLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  ids_.erase(&s.series->key);
  s.series.reset();
  ++s.generation;
  if (s.generation == 0) s.generation = 1;  // keeps ids non-zero
  free_slots_.push_back(slot);
  --series_count_;
}

LabelSet Aggregator::InternLocked(const LabelSet& labels) {
  if (labels.empty()) return labels;
  return *label_sets_.insert(labels).first;
}

const StatSpec& Aggregator::Series::SpecOf(uint32_t def) const {
  if (def != definition && past != nullptr) {
    for (const auto& [d, old] : past->specs) {
      if (d == def) return old;
    }
  }
  return spec;
}

absl::StatusOr<SeriesId> Aggregator::Define(const SeriesKey& key, const StatSpec& asked,
                                            DefineDetail* detail) {
  // A series with quantiles always has a histogram (v1.StatSpec.histogram).
  StatSpec spec = asked;
  spec.histogram = spec.histogram || !spec.quantiles.empty();
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  if (journal_ != nullptr && !journal_images_.empty()) {
    // A redefinition closes windows: they must be replayed with every
    // sample journaled so far in them.
    if (auto it = ids_.find(key); it != ids_.end() && journal_images_.erase(it->second) != 0) {
      JournalImageOfLocked(it->second);
    }
  }
  absl::StatusOr<SeriesId> id = DefineLocked(key, spec, now, detail);
  if (journal_ != nullptr && id.ok()) {
    journal_->gate().AssertHeld();
    state::Writer w(journal_->record());
    JournalDefine(w, now, key, spec, *id);
  }
  return id;
}

absl::StatusOr<SeriesId> Aggregator::DefineLocked(const SeriesKey& key, const StatSpec& spec,
                                                  int64_t now, DefineDetail* detail) {
  if (auto it = ids_.find(key); it != ids_.end()) {
    const std::shared_ptr<Series>& series = slots_[it->second & kSlotMask].series;
    Series& s = *series;
    if (s.spec != spec) {
      if (s.holders != 0) {
        if (detail != nullptr) {
          detail->conflict_id = it->second;
          detail->holders = s.holders;
        }
        return absl::AlreadyExistsError(absl::StrCat(
            "stat ", key.ToString(), " is already defined with ", s.spec.ToString(),
            "; refusing the conflicting definition with ", spec.ToString(), " while ",
            s.holders,
            s.holders == 1 ? " Stat of the first definition is alive"
                           : " Stats of the first definition are alive",
            " (it can be redefined once none is)"));
      }
      if (detail != nullptr) {
        detail->redefined = true;
        detail->previous = s.spec;
      }
      RedefineLocked(series, spec, now);
    }
    ++s.holders;
    s.last_update_ms = now;
    return it->second;
  }
  if (series_count_ >= options_.max_series) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "series ", protocol::Quote(key.ToString(), 512), " refused: the daemon holds ",
        series_count_, " series, its limit (torchmond --max-series)"));
  }
  uint32_t slot;
  if (!free_slots_.empty()) {
    slot = free_slots_.back();
    free_slots_.pop_back();
  } else {
    if (slots_.size() > kSlotMask) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot hold more than ", kSlotMask, " series; refusing ", key.ToString()));
    }
    slot = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  }
  auto s = std::make_shared<Series>();
  s->key.stat = key.stat;
  s->key.labels = InternLocked(key.labels);
  const SeriesId id = MakeId(slot, slots_[slot].generation);
  s->spec = spec;
  if (spec.histogram) s->distribution = std::make_unique<SeriesDistribution>();
  s->history = WindowHistory(static_cast<uint16_t>(spec.quantiles.size()));
  s->last_update_ms = now;
  s->created_ms = now;
  s->defined_ms = now;
  s->holders = 1;
  s->last_closed_index = std::numeric_limits<int64_t>::min();
  ids_.emplace(&s->key, id);
  slots_[slot].series = std::move(s);
  ++series_count_;
  return id;
}

void Aggregator::Release(SeriesId id) {
  absl::MutexLock lock(&mu_);
  Series* s = FindLocked(id);
  if (s != nullptr && s->holders > 0) {
    --s->holders;
    if (journal_ != nullptr) {
      journal_->gate().AssertHeld();
      state::Writer w(journal_->record());
      w.U8(static_cast<uint8_t>(JournalOp::kRelease));
      w.Varint(id);
    }
  }
}

uint64_t Aggregator::redefinitions() const {
  absl::ReaderMutexLock lock(&mu_);
  return redefinitions_;
}

void Aggregator::RedefineLocked(const std::shared_ptr<Series>& series, const StatSpec& spec,
                                int64_t now) {
  Series& s = *series;
  // Closed under the old spec, before it goes: what the old definition
  // aggregated is exported as it was.
  CloseWindows(series, now, Close::kAllAt, &closed_early_);
  if (!s.history.empty()) {
    if (s.past == nullptr) s.past = std::make_unique<PastDefinitions>();
    s.past->specs.emplace_back(s.definition, s.spec);
  }
  s.history.Widen(static_cast<uint16_t>(spec.quantiles.size()));
  s.spec = spec;
  ++s.definition;
  s.defined_ms = now;
  // Window indices of the old window length mean nothing now.
  s.last_closed_index = std::numeric_limits<int64_t>::min();
  if (!spec.histogram) {
    s.distribution.reset();
  } else if (s.distribution == nullptr) {
    s.distribution = std::make_unique<SeriesDistribution>();
  } else {
    // The histogram goes on (it is of every sample since the series was
    // created); the closed window's sketch is of the old window length.
    s.distribution->last_closed.reset();
  }
  ++redefinitions_;
}

absl::StatusOr<AddResult> Aggregator::AddSamples(SeriesId id, absl::Span<const double> values,
                                                 absl::Span<const int64_t> timestamps_us) {
  const int64_t now = clock_.NowMs();
  writers_waiting_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  writers_waiting_.fetch_sub(1, std::memory_order_relaxed);
  const SampleRun run{id, values, timestamps_us};
  absl::StatusOr<AddResult> result = AddRunLocked(run, now);
  if (result.ok()) JournalRunLocked(run, now);
  return result;
}

void Aggregator::JournalRunLocked(const SampleRun& run, int64_t now) {
  if (journal_ == nullptr) return;
  journal_->gate().AssertHeld();
  const size_t n = run.values.size();
  if (n >= kImageRunSamples) {
    const Series* s = FindLocked(run.id);
    if (s != nullptr && s->distribution == nullptr) {
      journal_images_.insert(run.id);
      return;
    }
  }
  // Sized once for the worst case and written through a pointer: appending
  // piece by piece cost more than the encoding.
  std::string& out = journal_->record();
  const size_t at = out.size();
  out.resize(at + 1 + 30 + 1 + 10 + 10 + 10 + n * (sizeof(double) + 10));
  char* p = out.data() + at;
  RunBase& base = journal_base_;
  if (base.record != journal_->records_sealed()) {
    // The record's first run: what the runs after it are encoded against.
    base = RunBase{journal_->records_sealed(), now, run.id,
                   n > 0 ? run.timestamps_us[0] : 0};
    *p++ = static_cast<char>(JournalOp::kRunBase);
    p = state::PutSigned(p, base.now);
    p = state::PutVarint(p, base.id);
    p = state::PutSigned(p, base.timestamp_us);
  }
  *p++ = static_cast<char>(JournalOp::kRun);
  p = state::PutSigned(p, now - base.now);
  p = state::PutSigned(p, static_cast<int64_t>(run.id - base.id));
  p = state::PutVarint(p, n);
  if (n > 0) std::memcpy(p, run.values.data(), n * sizeof(double));
  p += n * sizeof(double);
  int64_t previous = base.timestamp_us;
  for (int64_t t : run.timestamps_us) {
    p = state::PutSigned(p, t - previous);
    previous = t;
  }
  base.now = now;
  base.id = run.id;
  base.timestamp_us = previous;
  out.resize(static_cast<size_t>(p - out.data()));
}

void Aggregator::JournalImagesLocked() {
  if (journal_images_.empty()) return;
  for (SeriesId id : journal_images_) JournalImageOfLocked(id);
  journal_images_.clear();
}

void Aggregator::BeforeSeal() {
  absl::MutexLock lock(&mu_);
  JournalImagesLocked();
}

void Aggregator::AddSampleRuns(absl::Span<const SampleRun> runs,
                               absl::Span<absl::StatusOr<AddResult>> results) {
  for (size_t begin = 0; begin < runs.size(); begin += kRunsPerLock) {
    const size_t end = std::min(runs.size(), begin + kRunsPerLock);
    const int64_t now = clock_.NowMs();
    writers_waiting_.fetch_add(1, std::memory_order_relaxed);
    absl::MutexLock lock(&mu_);
    writers_waiting_.fetch_sub(1, std::memory_order_relaxed);
    for (size_t i = begin; i < end; ++i) {
      results[i] = AddRunLocked(runs[i], now);
      if (results[i].ok()) JournalRunLocked(runs[i], now);
    }
  }
}

absl::StatusOr<AddResult> Aggregator::AddRunLocked(const SampleRun& run, int64_t now) {
  const absl::Span<const double> values = run.values;
  const absl::Span<const int64_t> timestamps_us = run.timestamps_us;
  if (values.size() != timestamps_us.size()) {
    return absl::InvalidArgumentError(absl::StrCat("got ", values.size(), " values but ",
                                                   timestamps_us.size(), " timestamps"));
  }
  Series* found = FindLocked(run.id);
  if (found == nullptr) return absl::NotFoundError(absl::StrCat("series ", run.id, " expired"));
  Series& s = *found;
  const SeriesId id = run.id;
  // floor(ts_us / 1000) > now + skew  ⟺  ts_us ≥ (now + skew + 1) · 1000.
  const int64_t skew_limit_us = (now + options_.max_future_skew_ms + 1) * 1000;
  AddResult result;
  const int64_t w = s.spec.window_ms;
  // Samples of a block almost always share a window: while they fall in
  // [cached_start_us, cached_end_us) no division is needed.
  OpenWindow* cached = nullptr;
  QuantileSketch* cached_sketch = nullptr;  // cached's, for a series with quantiles
  const bool sketched = !s.spec.quantiles.empty();
  NativeHistogram* histogram = s.distribution != nullptr ? &s.distribution->histogram : nullptr;
  int64_t cached_start_us = 0, cached_end_us = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t ts_us = timestamps_us[i];
    if (ts_us >= skew_limit_us) {
      ++result.skewed;
      continue;
    }
    if (cached == nullptr || ts_us < cached_start_us || ts_us >= cached_end_us) {
      // Most samples fall in a window the series already has open (a run
      // of one sample is common with many series): found by its bounds,
      // without the two divisions that compute a sample's window.
      const int64_t w_us = w * 1000;
      OpenWindow* open = nullptr;
      for (OpenWindow& o : s.open) {
        const int64_t start_us = protocol::WindowStartUs(o.index, w);  // near now: no overflow
        if (ts_us >= start_us && ts_us - start_us < w_us) {
          open = &o;
          break;
        }
      }
      if (open != nullptr && DeadlineMs(s, open->index) > now) {
        cached = open;
        cached_sketch = sketched ? &s.distribution->SketchFor(open->index) : nullptr;
        cached_start_us = protocol::WindowStartUs(open->index, w);
        cached_end_us = cached_start_us + w_us;
      }
    }
    if (cached == nullptr || ts_us < cached_start_us || ts_us >= cached_end_us) {
      const int64_t index = protocol::WindowIndex(ts_us, w);
      if (index <= s.last_closed_index || DeadlineMs(s, index) <= now) {
        ++result.late;
        continue;
      }
      auto pos = std::lower_bound(s.open.begin(), s.open.end(), index,
                                  [](const OpenWindow& o, int64_t k) { return o.index < k; });
      if (pos == s.open.end() || pos->index != index) {
        pos = s.open.insert(pos, OpenWindow{index, WindowStats{}});
        // A replay leaves them to FinishRestore: the closes it replays
        // remove none, and a tree of every window ever opened costs a cache
        // miss per level at each insert.
        if (!replaying_) deadlines_.emplace(DeadlineMs(s, index), id);
      }
      cached = &*pos;
      cached_sketch = sketched ? &s.distribution->SketchFor(index) : nullptr;
      // Not late, so the window is near now and these cannot overflow.
      cached_start_us = protocol::WindowStartUs(index, w);
      cached_end_us = protocol::WindowStartUs(index + 1, w);
    }
    if (cached->stats.Add(values[i], s.spec.max_samples)) {
      ++result.accepted;
      if (cached_sketch != nullptr) cached_sketch->Add(values[i]);
      if (histogram != nullptr) histogram->Add(values[i]);
    } else {
      ++result.capped;
    }
  }
  s.counters.accepted += result.accepted;
  s.counters.capped += result.capped;
  s.counters.late += result.late;
  s.counters.skewed += result.skewed;
  totals_.accepted += result.accepted;
  totals_.capped += result.capped;
  totals_.late += result.late;
  totals_.skewed += result.skewed;
  s.last_update_ms = now;
  return result;
}

absl::Status Aggregator::AddClientDrops(SeriesId id, uint64_t dropped) {
  const int64_t now = clock_.NowMs();
  absl::MutexLock lock(&mu_);
  // An image due for the series goes first: the drops are journaled as
  // what changes it after.
  if (journal_ != nullptr && journal_images_.erase(id) != 0) JournalImageOfLocked(id);
  absl::Status status = AddClientDropsLocked(id, dropped, now);
  if (journal_ != nullptr && status.ok()) {
    journal_->gate().AssertHeld();
    state::Writer w(journal_->record());
    w.U8(static_cast<uint8_t>(JournalOp::kClientDrops));
    w.Signed(now);
    w.Varint(id);
    w.Varint(dropped);
  }
  return status;
}

absl::Status Aggregator::AddClientDropsLocked(SeriesId id, uint64_t dropped, int64_t now) {
  Series* s = FindLocked(id);
  if (s == nullptr) return absl::NotFoundError(absl::StrCat("series ", id, " expired"));
  // Saturates: a client's counts are not to be trusted, and a counter that
  // wrapped around would go back, which Prometheus reads as a reset.
  const uint64_t room = std::numeric_limits<uint64_t>::max() - s->counters.client_dropped;
  const uint64_t added = std::min(dropped, room);
  s->counters.client_dropped += added;
  totals_.client_dropped +=
      std::min(added, std::numeric_limits<uint64_t>::max() - totals_.client_dropped);
  s->last_update_ms = now;
  return absl::OkStatus();
}

// SeriesDistribution::Close's buffer holds every quantile of a spec inline.
static_assert(protocol::kMaxQuantiles <= 16);

QuantileSketch& Aggregator::SeriesDistribution::SketchFor(int64_t index) {
  auto pos = Find(index);
  if (pos == open.end() || pos->first != index) {
    pos = open.insert(pos, {index, spare != nullptr ? std::move(spare)
                                                    : std::make_unique<QuantileSketch>()});
  }
  return *pos->second;
}

void Aggregator::SeriesDistribution::Close(int64_t index, const QuantileList& quantiles,
                                        absl::InlinedVector<double, 16>& out) {
  out.clear();
  auto pos = Find(index);
  if (pos == open.end() || pos->first != index) {
    // Cannot happen: every open window got its sketch with its first sample.
    out.assign(quantiles.size(), std::numeric_limits<double>::quiet_NaN());
    return;
  }
  for (double q : quantiles) out.push_back(pos->second->Quantile(q));
  if (last_closed != nullptr) {
    last_closed->Clear();
    if (spare == nullptr) spare = std::move(last_closed);
  }
  last_closed = std::move(pos->second);
  last_closed_index = index;
  open.erase(pos);
}

ClosedWindow Aggregator::ToClosedWindow(const std::shared_ptr<Series>& s, size_t i) {
  const WindowHistory::Entry entry = s->history[i];
  const WindowRecord& r = entry.record;
  const StatSpec& spec = s->SpecOf(r.definition);
  ClosedWindow w;
  w.series = std::shared_ptr<const SeriesKey>(s, &s->key);
  w.aggregations = spec.aggregations;
  w.start_ms = r.start_ms;
  w.end_ms = r.start_ms + spec.window_ms;
  w.stats = r.stats;
  w.partial = r.partial;
  w.definition = r.definition;
  w.counters = s->counters;
  w.series_created_ms = s->created_ms;
  // A row is as wide as the widest definition's quantiles; its own come first.
  const size_t n = std::min(spec.quantiles.size(), entry.quantiles.size());
  w.quantiles.reserve(n);
  for (size_t q = 0; q < n; ++q) {
    w.quantiles.push_back(QuantileValue{spec.quantiles[q], entry.quantiles[q]});
  }
  return w;
}

size_t Aggregator::CloseWindows(const std::shared_ptr<Series>& series, int64_t ms, Close mode,
                                std::vector<ClosedWindow>* out) {
  Series& s = *series;
  const size_t limit = std::max<size_t>(options_.history_windows, 1);
  size_t closed = 0;
  absl::InlinedVector<double, 16> quantiles;
  const int64_t now = clock_.NowMs();
  for (const OpenWindow& o : s.open) {
    if (mode == Close::kDue && DeadlineMs(s, o.index) > ms) break;
    quantiles.clear();
    if (!s.spec.quantiles.empty()) s.distribution->Close(o.index, s.spec.quantiles, quantiles);
    const int64_t start_ms = protocol::WindowStartMs(o.index, s.spec.window_ms);
    const bool partial = mode == Close::kAllPartial ||
                         (mode == Close::kAllAt && start_ms + s.spec.window_ms > ms);
    s.history.Push(WindowRecord{start_ms, o.stats, partial, s.definition}, quantiles, limit);
    ++s.pushed;
    if (out != nullptr) {
      out->push_back(ToClosedWindow(series, s.history.size() - 1));
      out->back().counters_ms = now;
      if (options_.histograms_on_close && s.spec.histogram) {
        out->back().histogram = std::make_shared<const NativeHistogram>(s.distribution->histogram);
      }
    }
    s.last_closed_index = std::max(s.last_closed_index, o.index);
    ++closed;
  }
  s.open.erase(s.open.begin(), s.open.begin() + closed);
  if (s.past != nullptr && closed != 0) {
    // Past definitions no kept window was aggregated under any more.
    const uint32_t oldest = s.history[0].record.definition;
    auto& specs = s.past->specs;
    specs.erase(std::remove_if(specs.begin(), specs.end(),
                               [oldest](const auto& p) { return p.first < oldest; }),
                specs.end());
    if (specs.empty()) s.past.reset();
  }
  return closed;
}

size_t Aggregator::CloseDueWindows(absl::FunctionRef<void(const ClosedWindow&)> fn) {
  const int64_t now = clock_.NowMs();
  size_t closed = 0;
  std::vector<ClosedWindow> chunk;
  for (bool first = true, more = true; more; first = false) {
    if (!first) YieldToWriters();
    chunk.clear();
    {
      JournalGate gate(journal_);
      absl::MutexLock lock(&mu_);
      if (first) {
        chunk.swap(closed_early_);
        if (journal_ != nullptr && !chunk.empty()) {
          state::Writer(journal_->record()).U8(static_cast<uint8_t>(JournalOp::kTakeEarly));
        }
      }
      // Every open window has its own entry, and an entry closes only what
      // is due by its own deadline (end + grace), so windows come out in
      // order of end across chunks; an entry whose window already closed
      // (or whose series expired) finds nothing.
      auto it = deadlines_.begin();
      for (size_t n = 0; it != deadlines_.end() && it->first <= now && n < kWalkChunk;
           ++it, ++n) {
        if (FindLocked(it->second) == nullptr) continue;
        const size_t closed_now =
            CloseWindows(slots_[it->second & kSlotMask].series, it->first, Close::kDue, &chunk);
        if (journal_ != nullptr && closed_now != 0) {
          state::Writer w(journal_->record());
          w.U8(static_cast<uint8_t>(JournalOp::kClose));
          w.Varint(it->second);
          w.Signed(it->first);
        }
      }
      more = it != deadlines_.end() && it->first <= now;
      deadlines_.erase(deadlines_.begin(), it);
    }
    for (const ClosedWindow& w : chunk) fn(w);
    closed += chunk.size();
  }
  return closed;
}

std::vector<ClosedWindow> Aggregator::CloseDueWindows() {
  std::vector<ClosedWindow> out;
  CloseDueWindows([&out](const ClosedWindow& w) { out.push_back(w); });
  return out;
}

std::vector<ClosedWindow> Aggregator::CloseAllWindows() {
  const int64_t now = clock_.NowMs();
  std::vector<ClosedWindow> out;
  JournalGate gate(journal_);
  absl::MutexLock lock(&mu_);
  if (journal_ != nullptr) {
    // In the order they are handed out: the windows closed early, then
    // every open one.
    state::Writer w(journal_->record());
    if (!closed_early_.empty()) w.U8(static_cast<uint8_t>(JournalOp::kTakeEarly));
    w.U8(static_cast<uint8_t>(JournalOp::kCloseAll));
    w.Signed(now);
  }
  out.swap(closed_early_);
  for (const Slot& slot : slots_) {
    if (slot.series != nullptr) CloseWindows(slot.series, now, Close::kAllPartial, &out);
  }
  deadlines_.clear();
  return out;
}

size_t Aggregator::ExpireIdleSeries() {
  const int64_t now = clock_.NowMs();
  size_t removed = 0;
  // Chunked like ForEachSeries: a million series must not stall ingestion
  // for the whole scan.
  for (size_t begin = 0;; begin += kWalkChunk) {
    if (begin > 0) YieldToWriters();
    JournalGate gate(journal_);
    absl::MutexLock lock(&mu_);
    if (begin >= slots_.size()) break;
    const size_t end = std::min(slots_.size(), begin + kWalkChunk);
    for (size_t i = begin; i < end; ++i) {
      if (ExpireSlotLocked(static_cast<uint32_t>(i), now) && slots_[i].series == nullptr) {
        ++removed;
      }
    }
  }
  absl::MutexLock lock(&mu_);
  // A label set only the table still holds belongs to no series. One still
  // held elsewhere (a removed series pinned by a ClosedWindow in flight, a
  // stream's binding) stays until a later scan; with more sets than series
  // some are surely unused, so the sweep runs then too.
  if (removed > 0 || label_sets_.size() > series_count_) {
    absl::erase_if(label_sets_, [](const LabelSet& l) { return l.use_count() == 1; });
  }
  return removed;
}

bool Aggregator::ExpireSlotLocked(uint32_t slot, int64_t now) {
  Series* s = slots_[slot].series.get();
  if (s == nullptr || !s->open.empty()) return false;
  JournalOp op;
  if (s->last_update_ms + options_.series_ttl_ms <= now) {
    RemoveLocked(slot);
    op = JournalOp::kRemove;
  } else if (s->distribution != nullptr &&
             (s->distribution->spare != nullptr || s->distribution->last_closed != nullptr) &&
             s->last_update_ms + options_.grace_ms +
                     kIdleWindowsBeforeSketchRelease * s->spec.window_ms <=
                 now) {
    // Idle for a while: the kept sketches' buckets (up to 8 KiB each)
    // go back to the heap; the next window allocates a fresh one.
    s->distribution->spare.reset();
    s->distribution->last_closed.reset();
    op = JournalOp::kFreeSketches;
  } else {
    return false;
  }
  if (journal_ != nullptr) {
    state::Writer w(journal_->record());
    w.U8(static_cast<uint8_t>(op));
    w.Varint(slot);
    w.Signed(now);
  }
  return true;
}

SeriesSnapshot Aggregator::Snapshot(const std::shared_ptr<Series>& s) {
  SeriesSnapshot snap;
  snap.key = std::shared_ptr<const SeriesKey>(s, &s->key);
  snap.spec = s->spec;
  snap.definition = s->definition;
  snap.defined_ms = s->defined_ms;
  snap.counters = s->counters;
  if (!s->history.empty()) {
    snap.has_last_window = true;
    snap.last_window = ToClosedWindow(s, s->history.size() - 1);
  }
  snap.last_update_ms = s->last_update_ms;
  return snap;
}

namespace {

// The stat name every series a selector matches has, if it names one
// exactly (no glob): its series are one run of the key order.
std::optional<absl::string_view> ExactStat(const Selector& selector) {
  if (selector.name.empty() || selector.name.find_first_of("*?") != std::string::npos) {
    return std::nullopt;
  }
  return absl::string_view(selector.name);
}

}  // namespace

bool Aggregator::PastSelector(const Selector& selector, const SeriesKey& key) {
  const std::optional<absl::string_view> stat = ExactStat(selector);
  return stat.has_value() && key.stat != *stat;
}

Aggregator::IdIterator Aggregator::FirstAfterLocked(const Selector& selector,
                                                    const SeriesKey* after) const {
  IdIterator it = after != nullptr ? ids_.upper_bound(*after) : ids_.begin();
  // An exact stat name starts at its first series: the key with no labels
  // sorts before every other key of the stat.
  if (const std::optional<absl::string_view> stat = ExactStat(selector); stat.has_value()) {
    const SeriesKey first{std::string(*stat), LabelSet()};
    if (after == nullptr || *after < first) it = ids_.lower_bound(first);
  }
  return it;
}

Aggregator::SeriesChunk Aggregator::ListSeriesChunk(const Selector& selector,
                                                    const SeriesKey* after,
                                                    size_t max_series) const {
  YieldToWriters();
  SeriesChunk chunk;
  absl::ReaderMutexLock lock(&mu_);
  IdIterator it = FirstAfterLocked(selector, after);
  const size_t max_items = std::min(std::max<size_t>(max_series, 1), kWalkChunk);
  for (size_t visited = 0; it != ids_.end(); ++it) {
    const std::shared_ptr<Series>& s = slots_[it->second & kSlotMask].series;
    if (PastSelector(selector, s->key)) return chunk;  // resume_after null: done
    if (selector.Matches(s->key)) chunk.series.push_back(Snapshot(s));
    if (chunk.series.size() >= max_items || ++visited >= kVisitPerChunk) {
      chunk.resume_after = std::shared_ptr<const SeriesKey>(s, &s->key);
      // Nothing after the end: report the end now rather than in an empty
      // chunk.
      if (std::next(it) == ids_.end()) chunk.resume_after = nullptr;
      return chunk;
    }
  }
  return chunk;
}

size_t Aggregator::sketch_buckets() const {
  size_t buckets = 0;
  absl::ReaderMutexLock lock(&mu_);
  for (const Slot& slot : slots_) {
    if (slot.series == nullptr || slot.series->distribution == nullptr) continue;
    const SeriesDistribution& q = *slot.series->distribution;
    for (const auto& [index, sketch] : q.open) buckets += sketch->bucket_capacity();
    if (q.spare != nullptr) buckets += q.spare->bucket_capacity();
    if (q.last_closed != nullptr) buckets += q.last_closed->bucket_capacity();
  }
  return buckets;
}

std::optional<double> Aggregator::MergedQuantile(
    absl::Span<const std::shared_ptr<const SeriesKey>> series, int64_t start_ms,
    double q) const {
  std::optional<QuantileSketch> merged;
  absl::ReaderMutexLock lock(&mu_);
  for (const std::shared_ptr<const SeriesKey>& key : series) {
    auto it = ids_.find(*key);
    if (it == ids_.end()) return std::nullopt;
    const Series* s = FindLocked(it->second);
    if (s == nullptr || s->distribution == nullptr || s->distribution->last_closed == nullptr ||
        protocol::WindowStartMs(s->distribution->last_closed_index, s->spec.window_ms) !=
            start_ms) {
      return std::nullopt;
    }
    if (!merged.has_value()) merged.emplace();
    merged->Merge(*s->distribution->last_closed);
  }
  if (!merged.has_value()) return std::nullopt;
  return merged->Quantile(q);
}

std::vector<SeriesSnapshot> Aggregator::ListSeries(const Selector& selector) const {
  std::vector<SeriesSnapshot> out;
  std::shared_ptr<const SeriesKey> after;
  do {
    SeriesChunk chunk = ListSeriesChunk(selector, after.get(), kWalkChunk);
    std::move(chunk.series.begin(), chunk.series.end(), std::back_inserter(out));
    after = std::move(chunk.resume_after);
  } while (after != nullptr);
  return out;
}

Aggregator::WindowsChunk Aggregator::GetWindowsChunk(const Selector& selector,
                                                     const WindowFilter& filter,
                                                     const WindowCursor* from,
                                                     size_t max_windows) const {
  YieldToWriters();
  WindowsChunk chunk;
  const size_t max_items = std::min(std::max<size_t>(max_windows, 1), kWalkChunk);
  absl::ReaderMutexLock lock(&mu_);
  // The cursor's own series first (if it still exists), from the window
  // after the last one listed; then the series after it.
  IdIterator it;
  if (from != nullptr) {
    it = ids_.lower_bound(*from->series);
    if (it != ids_.end() && !(*it->first == *from->series)) {
      it = FirstAfterLocked(selector, from->series.get());
    }
  } else {
    it = FirstAfterLocked(selector, nullptr);
  }
  std::vector<size_t> picked;  // history indices of one series, newest first
  for (size_t visited = 0; it != ids_.end(); ++it) {
    const std::shared_ptr<Series>& s = slots_[it->second & kSlotMask].series;
    if (PastSelector(selector, s->key)) return chunk;
    if (++visited > kVisitPerChunk) {
      // Resume at this series, none of whose windows were taken.
      chunk.resume = WindowCursor{std::shared_ptr<const SeriesKey>(s, &s->key),
                                  std::numeric_limits<int64_t>::min(), 0};
      return chunk;
    }
    if (!selector.Matches(s->key)) continue;
    const bool resuming = from != nullptr && s->key == *from->series;
    // Windows are in order of (definition, start); the cursor is the last
    // one listed.
    const auto listed = [&](const WindowRecord& r) {
      if (!resuming) return false;
      if (r.definition != from->after_definition) return r.definition < from->after_definition;
      return r.start_ms <= from->after_start_ms;
    };
    // Newest first, so that the limit keeps the most recent windows.
    picked.clear();
    for (size_t i = s->history.size(); i-- > 0;) {
      const WindowRecord& r = s->history[i].record;
      if (filter.limit_per_series != 0 && picked.size() >= filter.limit_per_series) break;
      if (filter.start_ms != 0 && r.start_ms < filter.start_ms) {
        // Starts fall back only where a redefinition changed the window.
        if (s->past == nullptr) break;
        continue;
      }
      if (filter.end_ms != 0 && r.start_ms + s->SpecOf(r.definition).window_ms > filter.end_ms) {
        continue;
      }
      picked.push_back(i);
    }
    for (auto p = picked.rbegin(); p != picked.rend(); ++p) {
      if (listed(s->history[*p].record)) continue;
      chunk.windows.push_back(ToClosedWindow(s, *p));
      if (chunk.windows.size() >= max_items) {
        const bool series_done = std::next(p) == picked.rend();
        if (series_done && std::next(it) == ids_.end()) return chunk;  // the end
        chunk.resume = WindowCursor{std::shared_ptr<const SeriesKey>(s, &s->key),
                                    chunk.windows.back().start_ms,
                                    chunk.windows.back().definition};
        return chunk;
      }
    }
  }
  return chunk;
}

std::vector<ClosedWindow> Aggregator::GetWindows(const Selector& selector, int64_t start_ms,
                                                 int64_t end_ms, size_t limit_per_series) const {
  const WindowFilter filter{start_ms, end_ms, limit_per_series};
  std::vector<ClosedWindow> out;
  std::optional<WindowCursor> from;
  do {
    WindowsChunk chunk = GetWindowsChunk(selector, filter, from ? &*from : nullptr, kWalkChunk);
    std::move(chunk.windows.begin(), chunk.windows.end(), std::back_inserter(out));
    from = std::move(chunk.resume);
  } while (from.has_value());
  return out;
}

std::vector<SeriesSnapshot> Aggregator::TopSeries(const Selector& selector, size_t limit,
                                                  SeriesOrder order, size_t* matched,
                                                  size_t* with_drops) const {
  // (drops or 0, last update, the series): larger first; ties by key.
  struct Candidate {
    uint64_t drops;
    int64_t last_update_ms;
    std::shared_ptr<Series> series;
  };
  const auto better = [](const Candidate& a, const Candidate& b) {
    if (a.drops != b.drops) return a.drops > b.drops;
    if (a.last_update_ms != b.last_update_ms) return a.last_update_ms > b.last_update_ms;
    return a.series->key < b.series->key;
  };
  // A heap whose top is the worst kept.
  std::vector<Candidate> best;
  best.reserve(limit + 1);
  size_t count = 0, dropping = 0;
  for (size_t begin = 0; limit > 0; begin += kWalkChunk) {
    if (begin > 0) YieldToWriters();
    absl::ReaderMutexLock lock(&mu_);
    if (begin >= slots_.size()) break;
    const size_t end = std::min(slots_.size(), begin + kWalkChunk);
    for (size_t i = begin; i < end; ++i) {
      const std::shared_ptr<Series>& s = slots_[i].series;
      if (s == nullptr || !selector.Matches(s->key)) continue;
      ++count;
      const uint64_t drops = s->counters.not_aggregated();
      if (drops != 0) ++dropping;
      Candidate candidate{order == SeriesOrder::kMostDropsFirst ? drops : 0, s->last_update_ms, s};
      if (best.size() == limit && !better(candidate, best.front())) continue;
      best.push_back(std::move(candidate));
      std::push_heap(best.begin(), best.end(), better);
      if (best.size() > limit) {
        std::pop_heap(best.begin(), best.end(), better);
        best.pop_back();
      }
    }
  }
  if (matched != nullptr) *matched = count;
  if (with_drops != nullptr) *with_drops = dropping;
  std::sort_heap(best.begin(), best.end(), better);
  std::vector<SeriesSnapshot> out;
  out.reserve(best.size());
  absl::ReaderMutexLock lock(&mu_);
  for (const Candidate& c : best) out.push_back(Snapshot(c.series));
  return out;
}

void Aggregator::YieldToWriters() const {
  // Bounded, so that a walk still finishes under unbroken ingestion.
  constexpr auto kMaxStepAside = std::chrono::microseconds(200);
  if (writers_waiting_.load(std::memory_order_relaxed) == 0) return;
  const auto until = std::chrono::steady_clock::now() + kMaxStepAside;
  while (writers_waiting_.load(std::memory_order_relaxed) > 0 &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::yield();
  }
}

void Aggregator::ForEachSeries(absl::FunctionRef<void(const SeriesView&)> fn) const {
  for (size_t begin = 0;; begin += kWalkChunk) {
    if (begin > 0) YieldToWriters();
    // Shared: concurrent scrapes and queries walk together.
    absl::ReaderMutexLock lock(&mu_);
    if (begin >= slots_.size()) return;
    const size_t end = std::min(slots_.size(), begin + kWalkChunk);
    for (size_t i = begin; i < end; ++i) {
      const std::shared_ptr<Series>& s = slots_[i].series;
      if (s == nullptr) continue;
      const WindowRecord* last = s->history.empty() ? nullptr : &s->history.back().record;
      const StatSpec& last_spec = last != nullptr ? s->SpecOf(last->definition) : s->spec;
      fn(SeriesView{std::shared_ptr<const SeriesKey>(s, &s->key), s->spec, s->counters, last,
                    last_spec,
                    last != nullptr ? s->history.back().quantiles.first(std::min(
                                          last_spec.quantiles.size(),
                                          s->history.back().quantiles.size()))
                                    : absl::Span<const double>(),
                    s->distribution != nullptr ? &s->distribution->histogram : nullptr,
                    s->created_ms, s->definition});
    }
  }
}

size_t Aggregator::series_count() const {
  absl::ReaderMutexLock lock(&mu_);
  return series_count_;
}

SeriesCounters Aggregator::totals() const {
  absl::ReaderMutexLock lock(&mu_);
  return totals_;
}

size_t Aggregator::label_set_count() const {
  absl::ReaderMutexLock lock(&mu_);
  return label_sets_.size();
}

}  // namespace torchmon::server

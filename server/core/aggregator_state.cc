// The aggregator's state on disk: SaveState and LoadState (a whole copy),
// Replay (one journaled operation). Beside aggregator.cc, which journals
// the operations as it makes them (JournalOp).
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/core/aggregator.h"
#include "server/core/state_wire.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/protocol/windows.h"

namespace torchmon::server {
namespace {

constexpr uint64_t kIdSlotMask = 0xffffffffu;
// Bumped whenever the layout below changes: a state of another version is
// refused by name, never misread. Version 1 (without the windows a
// redefinition closed early, at the end) is still read.
constexpr uint64_t kAggregatorStateVersion = 2;

void WriteSpec(state::Writer& w, const StatSpec& spec) {
  w.U8(spec.aggregations);
  w.Signed(spec.window_ms);
  w.Signed(spec.max_samples);
  w.Varint(spec.quantiles.size());
  for (double q : spec.quantiles) w.Double(q);
  w.Bool(spec.histogram);
  w.Signed(spec.requested_window_ms);
}

StatSpec ReadSpec(state::Reader& r) {
  StatSpec spec;
  spec.aggregations = r.U8("spec aggregations");
  spec.window_ms = r.Signed("spec window");
  spec.max_samples = r.Signed("spec max_samples");
  const size_t n = r.Count("spec quantiles", 8);
  if (n > protocol::kMaxQuantiles) r.Fail(absl::StrCat("spec: ", n, " quantiles"));
  std::vector<double> quantiles;
  for (size_t i = 0; i < n && r.ok(); ++i) quantiles.push_back(r.Double("spec quantile"));
  spec.quantiles = QuantileList(std::move(quantiles));
  spec.histogram = r.Bool("spec histogram");
  spec.requested_window_ms = r.Signed("spec requested window");
  if (r.ok() && (spec.window_ms <= 0 || spec.max_samples < 0 ||
                 !std::is_sorted(spec.quantiles.begin(), spec.quantiles.end()))) {
    r.Fail(absl::StrCat("spec ", spec.ToString(), " is not one the daemon makes"));
  }
  return spec;
}

void WriteLabels(state::Writer& w, const Labels& labels) {
  w.Varint(labels.size());
  for (const auto& [k, v] : labels) {
    w.String(k);
    w.String(v);
  }
}

Labels ReadLabels(state::Reader& r) {
  const size_t n = r.Count("labels", 2);
  Labels labels;
  labels.reserve(n);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    std::string k = r.String("label name");
    std::string v = r.String("label value");
    labels.emplace_back(std::move(k), std::move(v));
  }
  if (r.ok() && !std::is_sorted(labels.begin(), labels.end())) r.Fail("labels out of order");
  return labels;
}

void WriteStats(state::Writer& w, const WindowStats& s) {
  w.Varint(s.accepted);
  w.Varint(s.capped);
  w.Double(s.sum);
  w.Double(s.min);
  w.Double(s.max);
  w.Double(s.last);
  w.Bool(s.saw_nan);
}

WindowStats ReadStats(state::Reader& r) {
  WindowStats s;
  s.accepted = r.Varint("window accepted");
  s.capped = r.Varint("window capped");
  s.sum = r.Double("window sum");
  s.min = r.Double("window min");
  s.max = r.Double("window max");
  s.last = r.Double("window last");
  s.saw_nan = r.Bool("window NaN");
  return s;
}

void WriteCounters(state::Writer& w, const SeriesCounters& c) {
  w.Varint(c.accepted);
  w.Varint(c.capped);
  w.Varint(c.late);
  w.Varint(c.skewed);
  w.Varint(c.client_dropped);
}

SeriesCounters ReadCounters(state::Reader& r) {
  SeriesCounters c;
  c.accepted = r.Varint("counter accepted");
  c.capped = r.Varint("counter capped");
  c.late = r.Varint("counter late");
  c.skewed = r.Varint("counter skewed");
  c.client_dropped = r.Varint("counter client_dropped");
  return c;
}

// A window closed but not yet handed out (closed early by a redefinition).
void WriteClosed(state::Writer& w, const ClosedWindow& c) {
  w.String(c.series->stat);
  WriteLabels(w, c.series->labels.get());
  w.U8(c.aggregations);
  w.Signed(c.start_ms);
  w.Signed(c.end_ms);
  WriteStats(w, c.stats);
  w.Varint(c.quantiles.size());
  for (const QuantileValue& q : c.quantiles) {
    w.Double(q.quantile);
    w.Double(q.value);
  }
  w.Bool(c.partial);
  w.Varint(c.definition);
  WriteCounters(w, c.counters);
  w.Signed(c.counters_ms);
  w.Signed(c.series_created_ms);
  w.Bool(c.histogram != nullptr);
  if (c.histogram != nullptr) c.histogram->Save(w);
}

ClosedWindow ReadClosed(state::Reader& r) {
  ClosedWindow c;
  auto key = std::make_shared<SeriesKey>();
  key->stat = r.String("closed window stat");
  key->labels = LabelSet(ReadLabels(r));
  c.series = std::move(key);
  c.aggregations = r.U8("closed window aggregations");
  c.start_ms = r.Signed("closed window start");
  c.end_ms = r.Signed("closed window end");
  c.stats = ReadStats(r);
  const size_t n = r.Count("closed window quantiles", 16);
  for (size_t i = 0; i < n && r.ok(); ++i) {
    const double q = r.Double("closed window quantile");
    c.quantiles.push_back(QuantileValue{q, r.Double("closed window quantile value")});
  }
  c.partial = r.Bool("closed window partial");
  c.definition = static_cast<uint32_t>(r.Varint("closed window definition"));
  c.counters = ReadCounters(r);
  c.counters_ms = r.Signed("closed window counters time");
  c.series_created_ms = r.Signed("closed window series created");
  if (r.Bool("closed window histogram")) {
    auto h = std::make_shared<NativeHistogram>();
    h->Load(r);
    c.histogram = std::move(h);
  }
  return c;
}

}  // namespace

void Aggregator::JournalDefine(state::Writer& w, int64_t now, const SeriesKey& key,
                               const StatSpec& spec, SeriesId id) {
  w.U8(static_cast<uint8_t>(JournalOp::kDefine));
  w.Signed(now);
  w.String(key.stat);
  WriteLabels(w, key.labels.get());
  WriteSpec(w, spec);
  w.Varint(id);
}

void Aggregator::JournalImageOfLocked(SeriesId id) {
  const Series* s = FindLocked(id);
  if (s == nullptr) return;
  state::Writer w(journal_->record());
  w.U8(static_cast<uint8_t>(JournalOp::kImage));
  w.Varint(id);
  w.Signed(s->last_closed_index);
  w.Signed(s->last_update_ms);
  WriteCounters(w, s->counters);
  w.Varint(s->open.size());
  for (const OpenWindow& o : s->open) {
    w.Signed(o.index);
    WriteStats(w, o.stats);
  }
}

void Aggregator::SaveState(state::Writer& w) const {
  absl::ReaderMutexLock lock(&mu_);
  w.Varint(kAggregatorStateVersion);
  WriteCounters(w, totals_);
  w.Varint(redefinitions_);
  w.Varint(slots_.size());
  for (const Slot& slot : slots_) {
    w.Varint(slot.generation);
    w.Bool(slot.series != nullptr);
    if (slot.series == nullptr) continue;
    const Series& s = *slot.series;
    w.String(s.key.stat);
    WriteLabels(w, s.key.labels.get());
    WriteSpec(w, s.spec);
    w.Signed(s.last_closed_index);
    w.Signed(s.last_update_ms);
    WriteCounters(w, s.counters);
    w.Varint(s.open.size());
    for (const OpenWindow& o : s.open) {
      w.Signed(o.index);
      WriteStats(w, o.stats);
    }
    w.Bool(s.distribution != nullptr);
    if (s.distribution != nullptr) {
      const SeriesDistribution& d = *s.distribution;
      d.histogram.Save(w);
      w.Varint(d.open.size());
      for (const auto& [index, sketch] : d.open) {
        w.Signed(index);
        sketch->Save(w);
      }
      w.Bool(d.last_closed != nullptr);
      if (d.last_closed != nullptr) d.last_closed->Save(w);
      w.Signed(d.last_closed_index);
    }
    w.Varint(s.history.width());
    w.Varint(s.history.size());
    for (size_t i = 0; i < s.history.size(); ++i) {
      const WindowHistory::Entry e = s.history[i];
      w.Signed(e.record.start_ms);
      WriteStats(w, e.record.stats);
      w.Bool(e.record.partial);
      w.Varint(e.record.definition);
      w.Doubles(e.quantiles.data(), e.quantiles.size());
    }
    w.Signed(s.created_ms);
    w.Signed(s.defined_ms);
    w.Varint(s.holders);
    w.Varint(s.definition);
    const size_t past = s.past != nullptr ? s.past->specs.size() : 0;
    w.Varint(past);
    for (size_t i = 0; i < past; ++i) {
      w.Varint(s.past->specs[i].first);
      WriteSpec(w, s.past->specs[i].second);
    }
  }
  w.Varint(free_slots_.size());
  for (uint32_t slot : free_slots_) w.Varint(slot);
  w.Varint(closed_early_.size());
  for (const ClosedWindow& c : closed_early_) WriteClosed(w, c);
}

bool Aggregator::LoadState(state::Reader& r) {
  absl::MutexLock lock(&mu_);
  const uint64_t version = r.Varint("aggregator state version");
  if (r.ok() && version != kAggregatorStateVersion && version != 1) {
    r.Fail(absl::StrCat("the aggregator's state is of version ", version, "; this build reads ",
                        kAggregatorStateVersion));
  }
  totals_ = ReadCounters(r);
  redefinitions_ = r.Varint("redefinitions");
  const size_t slots = r.Count("slots", 2);
  if (slots > kIdSlotMask) r.Fail("more slots than ids");
  std::vector<Slot> table(slots);
  size_t count = 0;
  for (size_t i = 0; i < slots && r.ok(); ++i) {
    const uint64_t generation = r.Varint("slot generation");
    if (generation == 0 || generation > 0xffffffffu) r.Fail("slot generation out of range");
    table[i].generation = static_cast<uint32_t>(generation);
    if (!r.Bool("slot used")) continue;
    auto s = std::make_shared<Series>();
    s->key.stat = r.String("stat name");
    s->key.labels = LabelSet(ReadLabels(r));
    s->spec = ReadSpec(r);
    s->last_closed_index = r.Signed("last closed window");
    s->last_update_ms = r.Signed("last update");
    s->counters = ReadCounters(r);
    const size_t open = r.Count("open windows", 16);
    for (size_t j = 0; j < open && r.ok(); ++j) {
      const int64_t index = r.Signed("open window index");
      s->open.push_back(OpenWindow{index, ReadStats(r)});
    }
    if (r.Bool("distribution")) {
      auto d = std::make_unique<SeriesDistribution>();
      d->histogram.Load(r);
      const size_t sketches = r.Count("open sketches", 16);
      for (size_t j = 0; j < sketches && r.ok(); ++j) {
        const int64_t index = r.Signed("sketch window index");
        auto sketch = std::make_unique<QuantileSketch>();
        if (sketch->Load(r)) d->open.emplace_back(index, std::move(sketch));
      }
      if (r.Bool("closed sketch")) {
        d->last_closed = std::make_unique<QuantileSketch>();
        d->last_closed->Load(r);
      }
      d->last_closed_index = r.Signed("closed sketch index");
      s->distribution = std::move(d);
    }
    const uint64_t width = r.Varint("history width");
    const size_t kept = r.Count("history", 40);
    if (width > protocol::kMaxQuantiles * 64) r.Fail("history width out of range");
    s->history = WindowHistory(static_cast<uint16_t>(width));
    const size_t limit = std::max<size_t>(options_.history_windows, 1);
    std::vector<double> row(width);
    s->history.Reserve(std::min(kept, limit));
    for (size_t j = 0; j < kept && r.ok(); ++j) {
      WindowRecord record;
      record.start_ms = r.Signed("window start");
      record.stats = ReadStats(r);
      record.partial = r.Bool("window partial");
      record.definition = static_cast<uint32_t>(r.Varint("window definition"));
      r.Doubles(row.data(), row.size(), "window quantiles");
      s->history.Push(record, row, limit);
    }
    s->created_ms = r.Signed("created");
    s->defined_ms = r.Signed("defined");
    s->holders = static_cast<uint32_t>(r.Varint("holders"));
    s->definition = static_cast<uint32_t>(r.Varint("definition"));
    const size_t past = r.Count("past definitions", 8);
    if (past > 0) s->past = std::make_unique<PastDefinitions>();
    for (size_t j = 0; j < past && r.ok(); ++j) {
      const uint32_t def = static_cast<uint32_t>(r.Varint("past definition"));
      s->past->specs.emplace_back(def, ReadSpec(r));
    }
    if (r.ok() && ((s->spec.histogram) != (s->distribution != nullptr) ||
                   (!s->spec.quantiles.empty() &&
                    s->distribution->open.size() != s->open.size()))) {
      r.Fail(absl::StrCat("series ", s->key.ToString(), ": its distribution does not match its spec"));
    }
    table[i].series = std::move(s);
    ++count;
  }
  const size_t free = r.Count("free slots", 1);
  std::vector<uint32_t> free_slots;
  for (size_t i = 0; i < free && r.ok(); ++i) {
    const uint64_t slot = r.Varint("free slot");
    if (slot >= table.size() || table[slot].series != nullptr) r.Fail("free slot in use");
    free_slots.push_back(static_cast<uint32_t>(slot));
  }
  std::vector<ClosedWindow> early;
  if (version >= 2) {
    const size_t n = r.Count("windows closed early", 40);
    for (size_t i = 0; i < n && r.ok(); ++i) early.push_back(ReadClosed(r));
  }
  if (!r.ok()) return false;
  slots_ = std::move(table);
  free_slots_ = std::move(free_slots);
  series_count_ = count;
  ids_.clear();
  label_sets_.clear();
  deadlines_.clear();
  closed_early_ = std::move(early);
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::shared_ptr<Series>& s = slots_[i].series;
    if (s == nullptr) continue;
    s->key.labels = InternLocked(s->key.labels);
    const SeriesId id = (uint64_t{slots_[i].generation} << 32) | i;
    if (!ids_.emplace(&s->key, id).second) {
      r.Fail(absl::StrCat("series ", s->key.ToString(), " is in the state twice"));
      slots_.clear();
      free_slots_.clear();
      ids_.clear();
      series_count_ = 0;
      return false;
    }
  }
  return true;
}

bool Aggregator::ReplayRecord(state::Reader& r,
                              absl::FunctionRef<void(JournalOp op, state::Reader& in)> other) {
  mu_.Lock();
  replay_base_ = RunBase{};  // unset until the record's kRunBase
  replaying_ = true;
  while (r.ok() && !r.done()) {
    const auto op = static_cast<JournalOp>(r.U8("operation"));
    if (op == JournalOp::kClientApplied) {
      mu_.Unlock();
      other(op, r);
      mu_.Lock();
    } else {
      ReplayLocked(op, r);
    }
  }
  mu_.Unlock();
  return r.ok();
}

bool Aggregator::ReplayLocked(JournalOp op, state::Reader& r) {
  switch (op) {
    case JournalOp::kDefine: {
      const int64_t now = r.Signed("define time");
      SeriesKey key;
      key.stat = r.String("define stat");
      key.labels = LabelSet(ReadLabels(r));
      const StatSpec spec = ReadSpec(r);
      const uint64_t expected = r.Varint("define id");
      if (!r.ok()) return false;
      absl::StatusOr<SeriesId> id = DefineLocked(key, spec, now, nullptr);
      if (!id.ok() || *id != expected) {
        r.Fail(absl::StrCat("defining ", key.ToString(), " gave ",
                            id.ok() ? absl::StrCat("id ", *id) : id.status().ToString(),
                            " where the journal says id ", expected));
        return false;
      }
      return true;
    }
    case JournalOp::kRelease: {
      const uint64_t id = r.Varint("release id");
      Series* s = FindLocked(id);
      if (s == nullptr || s->holders == 0) {
        r.Fail(absl::StrCat("release of series ", id, ", which nothing holds"));
        return false;
      }
      --s->holders;
      return r.ok();
    }
    case JournalOp::kRunBase: {
      replay_base_.now = r.Signed("run base time");
      replay_base_.id = r.Varint("run base id");
      replay_base_.timestamp_us = r.Signed("run base timestamp");
      replay_base_.record = 0;  // set: runs may follow
      return r.ok();
    }
    case JournalOp::kRun: {
      if (replay_base_.record != 0) {
        r.Fail("a run before its record's base");
        return false;
      }
      const int64_t now = replay_base_.now + r.Signed("run time");
      const uint64_t id = replay_base_.id + static_cast<uint64_t>(r.Signed("run id"));
      const size_t n = r.Count("run samples", 9);
      std::vector<double>& values = replay_values_;
      std::vector<int64_t>& timestamps = replay_timestamps_;
      values.resize(n);
      timestamps.resize(n);
      r.Doubles(values.data(), n, "run values");
      int64_t t = replay_base_.timestamp_us;
      for (size_t i = 0; i < n && r.ok(); ++i) {
        t += r.Signed("run timestamp");
        timestamps[i] = t;
      }
      if (!r.ok()) return false;
      replay_base_.now = now;
      replay_base_.id = id;
      replay_base_.timestamp_us = t;
      absl::StatusOr<AddResult> result = AddRunLocked(SampleRun{id, values, timestamps}, now);
      if (!result.ok()) {
        r.Fail(absl::StrCat("samples of series ", id, ": ", result.status().ToString()));
        return false;
      }
      return true;
    }
    case JournalOp::kClientDrops: {
      const int64_t now = r.Signed("drops time");
      const uint64_t id = r.Varint("drops id");
      const uint64_t dropped = r.Varint("drops count");
      if (!r.ok()) return false;
      if (absl::Status s = AddClientDropsLocked(id, dropped, now); !s.ok()) {
        r.Fail(absl::StrCat("drops of series ", id, ": ", s.ToString()));
        return false;
      }
      return true;
    }
    case JournalOp::kClose: {
      const uint64_t id = r.Varint("close id");
      const int64_t ms = r.Signed("close deadline");
      if (!r.ok()) return false;
      if (FindLocked(id) == nullptr) {
        r.Fail(absl::StrCat("close of series ", id, ", which does not exist"));
        return false;
      }
      if (CloseWindows(slots_[id & kIdSlotMask].series, ms, Close::kDue, replay_closed_) == 0) {
        r.Fail(absl::StrCat("close of series ", id, " at ", ms, " closed nothing"));
        return false;
      }
      return true;
    }
    case JournalOp::kCloseAll: {
      const int64_t now = r.Signed("close-all time");
      if (!r.ok()) return false;
      for (const Slot& slot : slots_) {
        if (slot.series != nullptr) CloseWindows(slot.series, now, Close::kAllPartial, replay_closed_);
      }
      deadlines_.clear();
      return true;
    }
    case JournalOp::kRemove:
    case JournalOp::kFreeSketches: {
      const uint64_t slot = r.Varint("expiry slot");
      const int64_t now = r.Signed("expiry time");
      if (!r.ok()) return false;
      // The journal replays what was decided: the same rule at the same
      // time must decide it again.
      const bool had = slot < slots_.size() && slots_[slot].series != nullptr;
      if (!had || !ExpireSlotLocked(static_cast<uint32_t>(slot), now) ||
          (slots_[slot].series == nullptr) != (op == JournalOp::kRemove)) {
        r.Fail(absl::StrCat("expiry of slot ", slot, " did not repeat"));
        return false;
      }
      return true;
    }
    case JournalOp::kImage: {
      const uint64_t id = r.Varint("image id");
      const int64_t last_closed = r.Signed("image last closed window");
      const int64_t last_update = r.Signed("image last update");
      const SeriesCounters counters = ReadCounters(r);
      const size_t n = r.Count("image open windows", 16);
      absl::InlinedVector<OpenWindow, 1> open;
      for (size_t i = 0; i < n && r.ok(); ++i) {
        const int64_t index = r.Signed("image window index");
        open.push_back(OpenWindow{index, ReadStats(r)});
      }
      if (!r.ok()) return false;
      Series* s = FindLocked(id);
      if (s == nullptr || s->distribution != nullptr) {
        r.Fail(absl::StrCat("image of series ", id, ", which ",
                            s == nullptr ? "does not exist" : "keeps a distribution"));
        return false;
      }
      // What the journaled samples before the image added to the totals is
      // replaced by what the image says the series counted.
      totals_.accepted += counters.accepted - s->counters.accepted;
      totals_.capped += counters.capped - s->counters.capped;
      totals_.late += counters.late - s->counters.late;
      totals_.skewed += counters.skewed - s->counters.skewed;
      totals_.client_dropped += counters.client_dropped - s->counters.client_dropped;
      s->counters = counters;
      s->last_closed_index = last_closed;
      s->last_update_ms = last_update;
      s->open = std::move(open);
      return true;  // its deadlines: FinishRestore's
    }
    case JournalOp::kTakeEarly: {
      // A pass took the windows redefinitions had closed: handed out then.
      if (replay_closed_ != nullptr) {
        for (ClosedWindow& c : closed_early_) replay_closed_->push_back(std::move(c));
      }
      closed_early_.clear();
      return true;
    }
    case JournalOp::kClientApplied:
      break;
  }
  r.Fail(absl::StrCat("operation ", static_cast<int>(op), " is not the aggregator's"));
  return false;
}

void Aggregator::CollectReplayedCloses(std::vector<ClosedWindow>* out) {
  absl::MutexLock lock(&mu_);
  replay_closed_ = out;
}

void Aggregator::FinishRestore() {
  absl::MutexLock lock(&mu_);
  replaying_ = false;
  for (const Slot& slot : slots_) {
    if (slot.series != nullptr) slot.series->holders = 0;
  }
  // closed_early_ stays: windows redefinitions closed that no pass took
  // before the stop; the first pass hands them out.
  // The deadlines of the windows open now, and no others (a replayed
  // close leaves its window's entry: all windows of an end share one
  // deadline, and finding each entry among them would cost a walk).
  deadlines_.clear();
  for (size_t i = 0; i < slots_.size(); ++i) {
    const std::shared_ptr<Series>& s = slots_[i].series;
    if (s == nullptr) continue;
    const SeriesId id = (uint64_t{slots_[i].generation} << 32) | i;
    for (const OpenWindow& o : s->open) deadlines_.emplace(DeadlineMs(*s, o.index), id);
  }
  absl::erase_if(label_sets_, [](const LabelSet& l) { return l.use_count() == 1; });
}

size_t Aggregator::open_windows() const {
  absl::ReaderMutexLock lock(&mu_);
  size_t n = 0;
  for (const Slot& slot : slots_) {
    if (slot.series != nullptr) n += slot.series->open.size();
  }
  return n;
}

}  // namespace torchmon::server

// The aggregator's state on disk: SaveState and LoadState (a whole copy),
// Replay (one journaled operation). Beside aggregator.cc, which journals
// the operations as it makes them (JournalOp).
#include <algorithm>
#include <limits>
#include <thread>
#include <utility>

#include "absl/numeric/bits.h"
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
// The same with the closed windows apart, in history files (SaveHistory).
constexpr uint64_t kAggregatorStateApartVersion = 3;
constexpr uint64_t kHistoryVersion = 1;

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

void WriteRecord(state::Writer& w, const WindowHistory::Entry& e) {
  w.Signed(e.record.start_ms);
  WriteStats(w, e.record.stats);
  w.Bool(e.record.partial);
  w.Varint(e.record.definition);
  w.Doubles(e.quantiles.data(), e.quantiles.size());
}

// Reads a record and its row of `row.size()` quantiles.
WindowRecord ReadRecord(state::Reader& r, std::vector<double>& row) {
  WindowRecord record;
  record.start_ms = r.Signed("window start");
  record.stats = ReadStats(r);
  record.partial = r.Bool("window partial");
  record.definition = static_cast<uint32_t>(r.Varint("window definition"));
  r.Doubles(row.data(), row.size(), "window quantiles");
  return record;
}

// The room a history holding `kept` windows has in a daemon that pushed
// them one by one (WindowHistory grows its ring by doubling, up to the
// limit): a restored history grows again when that one would, not at the
// journal's first close (with 100k series of 119 windows, that was
// 500 MB of fresh pages in the replay).
size_t RoomFor(size_t kept, size_t limit) {
  if (kept <= 1) return kept;
  return 1 + std::min<size_t>(limit - 1, absl::bit_ceil(kept - 1));
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

void Aggregator::SaveState(state::Writer& w, HistoryIn history) const {
  absl::ReaderMutexLock lock(&mu_);
  const bool apart = history == HistoryIn::kApart;
  w.Varint(apart ? kAggregatorStateApartVersion : kAggregatorStateVersion);
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
    if (apart) {
      w.Varint(s.pushed);
      w.Varint(s.history.size());
    } else {
      w.Varint(s.history.size());
      for (size_t i = 0; i < s.history.size(); ++i) WriteRecord(w, s.history[i]);
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
  if (r.ok() && version != kAggregatorStateVersion && version != kAggregatorStateApartVersion &&
      version != 1) {
    r.Fail(absl::StrCat("the aggregator's state is of version ", version, "; this build reads ",
                        kAggregatorStateVersion));
  }
  history_needed_.clear();
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
    if (width > protocol::kMaxQuantiles * 64) r.Fail("history width out of range");
    s->history = WindowHistory(static_cast<uint16_t>(width));
    const size_t limit = std::max<size_t>(options_.history_windows, 1);
    if (version == kAggregatorStateApartVersion) {
      // The windows come from the history files (LoadHistory).
      s->pushed = r.Varint("windows pushed");
      const uint64_t kept = r.Varint("windows kept");
      if (kept > s->pushed) r.Fail("more windows kept than pushed");
      s->segmented = 0;
      // The windows the files must hold: the newest of those it kept, as
      // many as this daemon keeps.
      const uint64_t wanted = std::min<uint64_t>(kept, limit);
      history_needed_.resize(table.size(), 0);
      history_needed_[i] = s->pushed - wanted;
      s->history.Reserve(RoomFor(static_cast<size_t>(wanted), limit));
    } else {
      const size_t kept = r.Count("history", 40);
      std::vector<double> row(width);
      s->history.Reserve(RoomFor(std::min(kept, limit), limit));
      for (size_t j = 0; j < kept && r.ok(); ++j) {
        const WindowRecord record = ReadRecord(r, row);
        s->history.Push(record, row, limit);
      }
      // No history file holds them yet.
      s->pushed = s->history.size();
      s->segmented = 0;
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

void Aggregator::SaveHistory(state::Writer& w, uint32_t part, uint32_t parts) {
  absl::MutexLock lock(&mu_);
  parts = std::max<uint32_t>(parts, 1);
  part %= parts;
  w.Varint(kHistoryVersion);
  w.Varint(part);
  w.Varint(parts);
  std::string rows;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Series* s = slots_[i].series.get();
    if (s == nullptr) continue;
    const size_t kept = s->history.size();
    const uint64_t first = s->pushed - kept;  // the oldest kept window's index
    const uint64_t from = i % parts == part ? first : std::max(first, s->segmented);
    s->segmented = s->pushed;
    if (from >= s->pushed) continue;
    // One entry: the series' id, its first window's index, its rows' width,
    // how many, their bytes; then the windows, oldest first.
    rows.clear();
    state::Writer r(rows);
    for (size_t j = static_cast<size_t>(from - first); j < kept; ++j) {
      WriteRecord(r, s->history[j]);
    }
    w.Varint((uint64_t{slots_[i].generation} << 32) | i);
    w.Varint(from);
    w.Varint(s->history.width());
    w.Varint(s->pushed - from);
    w.Varint(rows.size());
    w.out().append(rows);
  }
  w.Varint(0);  // no id is 0
}

bool Aggregator::LoadHistory(absl::Span<const absl::string_view> files, std::string* why) {
  absl::MutexLock lock(&mu_);
  struct File {
    state::Reader r;
    uint64_t part = 0, parts = 1;
  };
  std::vector<File> read;
  for (absl::string_view bytes : files) {
    File f{state::Reader(bytes)};
    const uint64_t version = f.r.Varint("history version");
    if (f.r.ok() && version != kHistoryVersion) {
      f.r.Fail(absl::StrCat("a history file of version ", version, "; this build reads ",
                            kHistoryVersion));
    }
    f.part = f.r.Varint("history part");
    f.parts = f.r.Varint("history parts");
    if (f.r.ok() && (f.parts == 0 || f.part >= f.parts)) f.r.Fail("history part out of range");
    if (!f.r.ok()) {
      *why = f.r.status().ToString();
      return false;
    }
    read.push_back(std::move(f));
  }
  // A series' windows start in the newest file with its copy of all it
  // kept: what the files before give it, that file gives again.
  auto copy_of = [&](size_t slot) {
    for (size_t k = read.size(); k-- > 0;) {
      if (slot % read[k].parts == read[k].part) return k;
    }
    return size_t{0};
  };
  // By slot, found once (each slot is one worker's: no two write one).
  std::vector<uint32_t> first_file(slots_.size(), UINT32_MAX);
  const size_t limit = std::max<size_t>(options_.history_windows, 1);
  // Series are independent: each worker takes the series of its slots
  // (slot modulo the workers) through every file, stepping over the
  // others' entries by their length. A restore has the machine to itself.
  const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 8);
  std::vector<std::string> failed(workers);
  auto work = [&](size_t worker) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<double> row;
    for (size_t k = 0; k < read.size(); ++k) {
      state::Reader r = read[k].r;  // a copy: each worker reads on its own
      while (r.ok()) {
        const uint64_t id = r.Varint("history series");
        if (id == 0) break;
        const uint64_t from = r.Varint("history first window");
        const uint64_t width = r.Varint("history width");
        const size_t n = r.Count("history windows", 40);
        const absl::string_view rows = r.Bytes(r.Varint("history bytes"), "history windows");
        if (!r.ok()) break;
        const size_t slot = static_cast<size_t>(id & kIdSlotMask);
        if (slot % workers != worker) continue;
        Series* s = FindLocked(id);
        // A series removed since, or one whose first file is later.
        if (s == nullptr) continue;
        if (first_file[slot] == UINT32_MAX) first_file[slot] = static_cast<uint32_t>(copy_of(slot));
        if (k < first_file[slot]) continue;
        if (width > s->history.width() || from + n > s->pushed) {
          r.Fail(absl::StrCat("history of series ", id, ": windows ", from, "-", from + n,
                              " of width ", width, " where it pushed ", s->pushed, " of width ",
                              s->history.width()));
          break;
        }
        const uint64_t needed = slot < history_needed_.size() ? history_needed_[slot] : 0;
        if (from + n <= std::max(needed, s->segmented)) continue;  // nothing it lacks
        if (!s->history.empty() && from > s->segmented) {
          // A hole: what came before it is not the series' run of windows
          // (FinishHistory finds it short).
          s->history = WindowHistory(s->history.width());
        }
        row.resize(width);
        state::Reader in(rows);
        for (size_t j = 0; j < n && in.ok(); ++j) {
          const WindowRecord record = ReadRecord(in, row);
          const uint64_t index = from + j;
          if (index < needed || index < s->segmented) continue;
          s->history.Push(record, row, limit);
          s->segmented = index + 1;
        }
        if (!in.ok() || !in.done()) {
          r.Fail(absl::StrCat("history of series ", id, ": ",
                              in.ok() ? "bytes left after its windows" : in.status().ToString()));
        }
      }
      if (!r.ok() || !r.done()) {
        failed[worker] = r.ok() ? "bytes left after the windows" : r.status().ToString();
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t t = 1; t < workers; ++t) threads.emplace_back(work, t);
  work(0);
  for (std::thread& t : threads) t.join();
  for (const std::string& f : failed) {
    if (!f.empty()) {
      *why = f;
      return false;
    }
  }
  return true;
}

size_t Aggregator::FinishHistory() {
  absl::MutexLock lock(&mu_);
  const size_t limit = std::max<size_t>(options_.history_windows, 1);
  size_t incomplete = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Series* s = slots_[i].series.get();
    if (s == nullptr) continue;
    const uint64_t needed = i < history_needed_.size() ? history_needed_[i] : s->pushed;
    const uint64_t wanted = std::min<uint64_t>(s->pushed - needed, limit);
    if (s->history.size() != wanted || (wanted != 0 && s->segmented != s->pushed)) {
      ++incomplete;
      s->history = WindowHistory(s->history.width());
      s->pushed = 0;
    }
    s->segmented = s->pushed;
  }
  history_needed_.clear();
  history_needed_.shrink_to_fit();
  return incomplete;
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

// The aggregation core: the table of series, their open windows, the
// per-series history of closed windows and the exact accounting of every
// sample. Pure: no I/O, no threads of its own; time comes from a Clock.
//
// Thread-safe: every method may be called concurrently (one internal mutex;
// AddSamples holds it once per block of samples, not per sample; queries
// share it; walks over every series take it per chunk).
#ifndef TORCHMON_SERVER_CORE_AGGREGATOR_H_
#define TORCHMON_SERVER_CORE_AGGREGATOR_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/hash/hash.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "server/core/clock.h"
#include "server/core/native_histogram.h"
#include "server/core/quantile_sketch.h"
#include "server/core/selector.h"
#include "server/core/state_journal.h"
#include "server/core/types.h"
#include "server/core/window_history.h"
#include "torchmon/protocol/windows.h"

namespace torchmon::server {
namespace state {
class Writer;
class Reader;
}  // namespace state

struct AggregatorOptions {
  // A window [start, end) closes once the daemon clock reaches end + grace_ms.
  int64_t grace_ms = 2000;
  // A series with no sample, drop report or definition for this long, and no
  // open window, is forgotten.
  int64_t series_ttl_ms = 10 * 60 * 1000;
  // Closed windows kept per series for queries (≥ 1).
  size_t history_windows = 120;
  // Samples stamped more than this far ahead of the daemon clock are skewed.
  int64_t max_future_skew_ms = 60 * 1000;
  // Series held at once; Define refuses new ones past it (ResourceExhausted).
  size_t max_series = 1'000'000;
  // Whether the windows CloseDueWindows and CloseAllWindows hand out carry
  // a copy of their series' histogram (ClosedWindow::histogram): the push
  // exporters send it (docs/push.md).
  bool histograms_on_close = false;
};

// Never 0, so 0 can mean "no series". A series defined again after it
// expired gets a new id (ids repeat only after one table slot has been
// reused 2^32 times).
using SeriesId = uint64_t;

// What happened to the samples of one AddSamples call.
struct AddResult {
  uint64_t accepted = 0;
  uint64_t capped = 0;
  uint64_t late = 0;
  uint64_t skewed = 0;
};

// A consistent copy of one series' state.
struct SeriesSnapshot {
  std::shared_ptr<const SeriesKey> key;
  StatSpec spec;
  // Which definition `spec` is (0 the first; Aggregator::Define) and since
  // when it holds (daemon clock, Unix ms).
  uint32_t definition = 0;
  int64_t defined_ms = 0;
  SeriesCounters counters;
  bool has_last_window = false;  // false until a window has closed
  ClosedWindow last_window;
  int64_t last_update_ms = 0;
};

class Aggregator {
 public:
  Aggregator(AggregatorOptions options, const Clock& clock);
  Aggregator(const Aggregator&) = delete;
  Aggregator& operator=(const Aggregator&) = delete;

  const AggregatorOptions& options() const { return options_; }
  const Clock& clock() const { return clock_; }

  // Finds the series `key` or creates it with `spec`, and holds it: the
  // caller (a stream's binding) must Release the id once it no longer uses
  // it. Defining an existing series identically returns its id; a new
  // series past options().max_series is ResourceExhausted naming it.
  // `key.labels` must be sorted by key; `spec` must be valid.
  //
  // A different spec redefines the series if nothing holds it (every Stat
  // of the old definition is gone): its open windows close at once, marked
  // partial, and are handed out by the next CloseDueWindows; the series
  // keeps its id, counters and history (each window records the definition
  // it was aggregated under, numbered from 0), and its histogram if the new
  // spec has one. While the old definition is held the new one is
  // AlreadyExists with a message naming the series and both definitions,
  // and `*detail` (if given) says which series and how many hold it.
  struct DefineDetail {
    // AlreadyExists: the series and how many hold its definition.
    SeriesId conflict_id = 0;
    uint32_t holders = 0;
    // Success: whether the series was redefined, and its spec before.
    bool redefined = false;
    StatSpec previous;
  };
  absl::StatusOr<SeriesId> Define(const SeriesKey& key, const StatSpec& spec,
                                  DefineDetail* detail = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // Lets go of one hold Define took. A series that expired or was removed
  // meanwhile: nothing to do.
  void Release(SeriesId id) ABSL_LOCKS_EXCLUDED(mu_);

  // Redefinitions since the daemon started (torchmon_daemon_series_redefined_total).
  uint64_t redefinitions() const ABSL_LOCKS_EXCLUDED(mu_);

  // Aggregates samples (values[i] stamped timestamps_us[i], Unix µs) into
  // series `id`, classifying each as accepted, capped, late or skewed.
  // NotFound if the series expired since Define (define it again).
  absl::StatusOr<AddResult> AddSamples(SeriesId id, absl::Span<const double> values,
                                       absl::Span<const int64_t> timestamps_us)
      ABSL_LOCKS_EXCLUDED(mu_);

  // One block's samples, for AddSampleRuns.
  struct SampleRun {
    SeriesId id;
    absl::Span<const double> values;
    absl::Span<const int64_t> timestamps_us;
  };
  // AddSamples for many blocks at once: results[i] is what
  // AddSamples(runs[i]...) returns. The clock is read and the lock taken
  // once per kRunsPerLock runs instead of once per block: with many series
  // a block carries a sample or two, and those fixed costs were most of
  // it. results.size() must equal runs.size().
  void AddSampleRuns(absl::Span<const SampleRun> runs,
                     absl::Span<absl::StatusOr<AddResult>> results) ABSL_LOCKS_EXCLUDED(mu_);
  // Runs per lock hold: a few tens of microseconds, about one chunk of a
  // walk (other writers and readers wait no longer than for one of those).
  static constexpr size_t kRunsPerLock = 256;

  // Records samples the client dropped before sending. NotFound as above.
  absl::Status AddClientDrops(SeriesId id, uint64_t dropped) ABSL_LOCKS_EXCLUDED(mu_);

  // Closes every window whose end + grace has passed and appends it to its
  // series' history; calls `fn` for each, in order of window end, outside
  // the lock (first those a redefinition closed since the last call). Works in chunks of series (the lock taken per chunk, waiting
  // AddSamples calls let in between, as ForEachSeries does), so a million
  // windows closing together neither stall ingestion nor pile up in one
  // buffer. Returns how many windows closed.
  size_t CloseDueWindows(absl::FunctionRef<void(const ClosedWindow&)> fn)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The same, collected (tests, tools).
  std::vector<ClosedWindow> CloseDueWindows() ABSL_LOCKS_EXCLUDED(mu_);

  // Closes every open window now, marked partial (shutdown).
  std::vector<ClosedWindow> CloseAllWindows() ABSL_LOCKS_EXCLUDED(mu_);

  // Forgets idle series (see AggregatorOptions::series_ttl_ms). Returns how
  // many were removed. Works in chunks of series like CloseDueWindows.
  // Also frees the sketch a series with quantiles keeps for its next window
  // once it has had no sample for the grace and then
  // kIdleWindowsBeforeSketchRelease windows.
  size_t ExpireIdleSeries() ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr int64_t kIdleWindowsBeforeSketchRelease = 3;

  // Bucket storage held by quantile sketches, open and kept (8 bytes a
  // bucket). Walks every series under the lock at once: for tests and tools.
  size_t sketch_buckets() const ABSL_LOCKS_EXCLUDED(mu_);

  // The q-quantile of the samples of `series` together in their window
  // starting at start_ms, from their merged sketches: what CompareRanks
  // gives for a whole group of ranks. Each series keeps the sketch of its
  // newest closed window only (until it has been idle for
  // kIdleWindowsBeforeSketchRelease windows): nullopt when one of them no
  // longer holds that window's sketch, has no quantiles, or is gone.
  std::optional<double> MergedQuantile(
      absl::Span<const std::shared_ptr<const SeriesKey>> series, int64_t start_ms,
      double q) const ABSL_LOCKS_EXCLUDED(mu_);

  // Series matching `selector`, sorted by stat name then labels. Walks in
  // chunks (ListSeriesChunk); a series created or removed meanwhile may or
  // may not be listed.
  std::vector<SeriesSnapshot> ListSeries(const Selector& selector) const ABSL_LOCKS_EXCLUDED(mu_);

  // Which closed windows of a series a query wants: start_ms ≥ start_ms and
  // end_ms ≤ end_ms (0 = unbounded), at most `limit_per_series` most recent
  // (0 = all).
  struct WindowFilter {
    int64_t start_ms = 0;
    int64_t end_ms = 0;
    size_t limit_per_series = 0;
  };
  // The filtered closed windows of the matching series, grouped by series
  // (sorted), oldest first. Walks in chunks, like ListSeries.
  std::vector<ClosedWindow> GetWindows(const Selector& selector, int64_t start_ms, int64_t end_ms,
                                       size_t limit_per_series) const ABSL_LOCKS_EXCLUDED(mu_);

  // The `limit` series matching `selector` that come first in `order`, in
  // that order, and how many matched in all (`*matched`). A bounded answer
  // at any number of series, for a page that shows what matters (the live
  // page): walks every series in chunks, as ForEachSeries does, keeping the
  // best `limit` seen.
  enum class SeriesOrder {
    kMostDropsFirst,  // samples not aggregated (capped, late, skewed, client), then recent
    kMostRecentFirst,  // last sample or drop report
  };
  // `*with_drops` (if given): how many of them have dropped samples.
  std::vector<SeriesSnapshot> TopSeries(const Selector& selector, size_t limit, SeriesOrder order,
                                        size_t* matched, size_t* with_drops = nullptr) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Listings in pages. Series are ordered by key (stat name, then labels),
  // and a listing resumes after a key: the key, not a position, so series
  // created or removed between two chunks shift nothing. A walk that
  // resumes after key K sees every series with a key above K that existed
  // when the walk got there; none twice.
  //
  // One chunk holds the lock (shared) once, visits at most kVisitPerChunk
  // series and copies out at most kWalkChunk items, so a listing of a
  // million series keeps ingestion waiting for one chunk at a time.
  static constexpr size_t kVisitPerChunk = 4096;  // 4 × kWalkChunk

  struct SeriesChunk {
    // Matching series, in key order.
    std::vector<SeriesSnapshot> series;
    // The last key visited: the next chunk resumes after it. Null when the
    // walk reached the end.
    std::shared_ptr<const SeriesKey> resume_after;
  };
  // The next chunk of series matching `selector` with key above *after (from
  // the first if null), at most max_series (≥ 1) of them.
  SeriesChunk ListSeriesChunk(const Selector& selector, const SeriesKey* after,
                              size_t max_series) const ABSL_LOCKS_EXCLUDED(mu_);

  // Where a window listing resumes: in series `series`, after its windows
  // of definitions before after_definition and those of after_definition
  // starting at or before after_start_ms; then after the series. (A
  // series' windows are in order of definition, then of start.)
  struct WindowCursor {
    std::shared_ptr<const SeriesKey> series;
    int64_t after_start_ms = std::numeric_limits<int64_t>::min();
    uint32_t after_definition = 0;
  };
  struct WindowsChunk {
    // Grouped by series in key order, each series' oldest first.
    std::vector<ClosedWindow> windows;
    // Where the next chunk resumes; empty when the walk reached the end.
    std::optional<WindowCursor> resume;
  };
  // The next chunk of `filter`ed windows of the series matching `selector`,
  // from `from` (the start if null), at most max_windows (≥ 1). A series'
  // windows may be split across chunks; `limit_per_series` is applied to
  // each series as the chunk finds it (a window that closed in between may
  // push an older one out of the most recent N).
  WindowsChunk GetWindowsChunk(const Selector& selector, const WindowFilter& filter,
                               const WindowCursor* from, size_t max_windows) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Read-only view of one series for the exposition; valid only during the
  // callback of ForEachSeries, except `key`, which the caller may keep (it
  // is immutable and shares ownership of the series).
  struct SeriesView {
    std::shared_ptr<const SeriesKey> key;
    const StatSpec& spec;
    const SeriesCounters& counters;
    // The last closed window, or null if none closed yet.
    const WindowRecord* last_window;
    // The definition it was aggregated under: `spec`, unless the series was
    // redefined since it closed.
    const StatSpec& last_window_spec;
    // Its quantiles' values, in the order of last_window_spec.quantiles.
    absl::Span<const double> last_quantiles;
    // The series' histogram, or null if spec.histogram is false.
    const NativeHistogram* histogram;
    // When the series was created (daemon clock, Unix ms): where its
    // counters started from 0.
    int64_t created_ms;
    // Which definition `spec` is (SeriesSnapshot::definition).
    uint32_t definition;
  };
  // Calls `fn` for every series, in no particular order, holding the lock
  // shared, one chunk of series (kWalkChunk) at a time, and letting waiting
  // AddSamples calls in between chunks: ingestion waits for about one chunk,
  // not for the walk. Each call sees one series in a consistent state; a
  // series created or removed during the walk may or may not be visited.
  // `fn` runs under the lock: it must be quick and must not call back into
  // the Aggregator.
  void ForEachSeries(absl::FunctionRef<void(const SeriesView&)> fn) const
      ABSL_LOCKS_EXCLUDED(mu_);
  static constexpr size_t kWalkChunk = 1024;

  // Distinct label sets held (interned) for the series in memory.
  size_t label_set_count() const ABSL_LOCKS_EXCLUDED(mu_);

  // The daemon's state on disk (--state-dir; server/state/state_store.h).
  //
  // Every change is journaled once SetJournal is called (before the first
  // change): each change is recorded as the operation that made it, with
  // the daemon clock it read, so that SaveState's copy plus the journal's
  // operations since, replayed in order by Replay, rebuild exactly the same
  // state. Ingest callers hold the journal's gate around their changes; the
  // aggregator takes it itself for its own closes and expiries.
  void SetJournal(StateJournal* journal) ABSL_LOCKS_EXCLUDED(mu_);
  // Where SaveState puts the series' closed windows: in the state
  // (kInline), or in the history files SaveHistory writes (kApart: the
  // state says how many each series pushed, not what they are).
  enum class HistoryIn { kInline, kApart };
  // Writes the whole state. The caller holds the journal's gate (nothing
  // changes meanwhile).
  void SaveState(state::Writer& out, HistoryIn history = HistoryIn::kInline) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // Writes the closed windows kept that no history file holds yet, and
  // every window kept by the series whose slot is `part` modulo `parts`
  // (parts = 1: all of them), and counts them as held. Under the journal's
  // gate, with the kApart SaveState it goes with.
  void SaveHistory(state::Writer& out, uint32_t part, uint32_t parts) ABSL_LOCKS_EXCLUDED(mu_);
  // After LoadState of a kApart state, before any journal record: the
  // windows of the history files `files` (their payloads, oldest first).
  // Each series' come from the newest file with its copy of all it kept,
  // and the files after it; windows of series no longer there, or older
  // than a series keeps, are skipped unread. False (with why) on bytes
  // that do not read.
  bool LoadHistory(absl::Span<const absl::string_view> files, std::string* why)
      ABSL_LOCKS_EXCLUDED(mu_);
  // After the last LoadHistory: the series whose newest windows no file
  // held (a file missing or damaged) lose their closed windows, whole,
  // rather than keep a history with holes. Returns how many.
  size_t FinishHistory() ABSL_LOCKS_EXCLUDED(mu_);
  // Replaces the state with SaveState's; fails on the reader, leaving this
  // aggregator empty, when the bytes are not a state this build can hold.
  // Before SetJournal only; the open windows' deadlines are set by
  // FinishRestore, after the journal's records are replayed.
  bool LoadState(state::Reader& in) ABSL_LOCKS_EXCLUDED(mu_);
  // Applies the operations of one journal record, in order: its own under
  // one hold of its lock, the others (`op` read, its operands next on `in`)
  // through `other`, outside it. Fails on the reader when an operation's
  // bytes are bad or its effect differs from the journaled one (the state
  // is no longer the one the journal was written against). Before
  // SetJournal.
  bool ReplayRecord(state::Reader& in,
                    absl::FunctionRef<void(JournalOp op, state::Reader& in)> other)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Where the windows that replayed closes close go (null: nowhere), for
  // what the push exporters had not yet taken when the daemon stopped.
  void CollectReplayedCloses(std::vector<ClosedWindow>* out) ABSL_LOCKS_EXCLUDED(mu_);
  // After a restore: no stream survived a restart, so no series is held;
  // windows closed by redefinitions and not yet handed out by a pass (the
  // snapshot keeps them; a replay closes them again) go with the first
  // pass.
  void FinishRestore() ABSL_LOCKS_EXCLUDED(mu_);
  // Called by the journal as it seals a record (under its gate): the images
  // of the series marked meanwhile are written into it.
  void BeforeSeal() ABSL_LOCKS_EXCLUDED(mu_);
  // Open windows held (tests, the restore's log line).
  size_t open_windows() const ABSL_LOCKS_EXCLUDED(mu_);

  size_t series_count() const ABSL_LOCKS_EXCLUDED(mu_);
  // Every series' counters summed, those of expired series included: the
  // daemon's accounting since it started.
  SeriesCounters totals() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct OpenWindow {
    int64_t index;
    WindowStats stats;
  };
  // What a series with quantiles or a histogram holds beyond the six
  // aggregations. Behind one pointer, so that the series without pay 8
  // bytes for it.
  struct SeriesDistribution {
    // Every accepted sample since the series was created (spec.histogram).
    NativeHistogram histogram;
    // With quantiles: the sketch of each open window, by window index
    // (sorted, as `open`).
    absl::InlinedVector<std::pair<int64_t, std::unique_ptr<QuantileSketch>>, 1> open;
    // The newest closed window's sketch (window last_closed_index), kept
    // for merging across ranks (MergedQuantile).
    std::unique_ptr<QuantileSketch> last_closed;
    int64_t last_closed_index = 0;
    // A closed window's sketch, cleared, for the next window to reuse: its
    // buckets are already allocated.
    std::unique_ptr<QuantileSketch> spare;

    // The entry of window `index` in `open`, or where it belongs.
    auto Find(int64_t index) {
      return std::lower_bound(open.begin(), open.end(), index,
                              [](const auto& o, int64_t k) { return o.first < k; });
    }
    // The sketch of window `index`, created if it has none.
    QuantileSketch& SketchFor(int64_t index);
    // Removes window `index`'s sketch, writing its estimates of `quantiles`
    // to `out`, and keeps it as last_closed (the one before, cleared, as
    // the spare).
    void Close(int64_t index, const QuantileList& quantiles,
               absl::InlinedVector<double, 16>& out);
  };
  // Definitions of a series before its current one that windows in its
  // history were aggregated under (oldest first; dropped once the history
  // no longer holds a window of theirs).
  struct PastDefinitions {
    std::vector<std::pair<uint32_t, StatSpec>> specs;
  };
  struct Series {
    // What adding a block reads and writes comes first, in 168 bytes (3-4
    // cache lines; spread around the key and the history it touched 4-5):
    // with 100k series every block's series is cold.
    StatSpec spec;
    // Windows at or below this index are closed: their samples are late.
    int64_t last_closed_index;
    int64_t last_update_ms;
    std::unique_ptr<SeriesDistribution> distribution;  // null without quantiles or histogram
    SeriesCounters counters;
    // Usually one, more when samples straddle a boundary within the grace.
    // Inline: allocating one per window would churn the heap (measured: an
    // idle series' RSS grows by a third from the fragmentation).
    absl::InlinedVector<OpenWindow, 1> open;  // sorted by index
    // Immutable once created, so ClosedWindow::series may read it without
    // the lock (it points here, sharing ownership of the whole Series).
    SeriesKey key;
    // Closed windows with their quantile estimates.
    WindowHistory history;
    // Windows ever pushed to `history` (the newest kept is window
    // pushed - 1), and how many of them the state directory's history
    // files hold (SaveHistory); while LoadHistory runs, the index after the
    // last window it pushed.
    uint64_t pushed = 0;
    uint64_t segmented = 0;
    int64_t created_ms = 0;  // daemon clock
    int64_t defined_ms = 0;  // when `spec` took effect (daemon clock)
    // Streams' bindings using it (Define, Release); 0: it may be redefined.
    uint32_t holders = 0;
    uint32_t definition = 0;  // of `spec`: 0, one more per redefinition
    std::unique_ptr<PastDefinitions> past;  // null until redefined

    // The spec window records of `definition` were aggregated under.
    const StatSpec& SpecOf(uint32_t def) const;
  };
  // The series table: a series lives in a slot; its id is the slot index
  // plus the slot's generation, which changes when the series is removed,
  // so an id held by a stream after its series expired finds nothing (and
  // the stream re-defines it). Lookup by id is an index, not a hash.
  struct Slot {
    std::shared_ptr<Series> series;  // null while free
    uint32_t generation = 1;
  };

  int64_t DeadlineMs(const Series& s, int64_t index) const {
    return protocol::WindowStartMs(index + 1, s.spec.window_ms) + options_.grace_ms;
  }
  // A lookup: the shared lock is enough to find a series; changing it takes
  // the exclusive one.
  Series* FindLocked(SeriesId id) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // What AddSamples does for `run`, under the lock, the clock read as `now`.
  absl::StatusOr<AddResult> AddRunLocked(const SampleRun& run, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Frees slot `slot` (which must hold a series) and forgets its key.
  void RemoveLocked(uint32_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stored copy of `labels`, shared by every series with these labels.
  LabelSet InternLocked(const LabelSet& labels) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Which open windows CloseWindows closes, and which it marks partial.
  enum class Close {
    kDue,          // deadline ≤ the time given; none partial
    kAllPartial,   // all, every one partial (shutdown)
    kAllAt,        // all, those whose end is after the time given partial (redefinition)
  };
  // Closes open windows of `s` as `mode` says, `ms` its time, appending
  // them to history and to `out` (null: a replay that hands nothing out).
  // Returns how many it closed.
  size_t CloseWindows(const std::shared_ptr<Series>& s, int64_t ms, Close mode,
                      std::vector<ClosedWindow>* out) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the open windows of `s` (partial), keeps its spec for the
  // history and puts `spec` in its place (Define).
  void RedefineLocked(const std::shared_ptr<Series>& s, const StatSpec& spec, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static SeriesSnapshot Snapshot(const std::shared_ptr<Series>& s);
  // History record i of `s`.
  static ClosedWindow ToClosedWindow(const std::shared_ptr<Series>& s, size_t i);

  // Define's work under the lock, at `now`.
  absl::StatusOr<SeriesId> DefineLocked(const SeriesKey& key, const StatSpec& spec, int64_t now,
                                        DefineDetail* detail) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddClientDropsLocked(SeriesId id, uint64_t dropped, int64_t now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Expiry of slot `slot` at `now`: true if it changed anything.
  bool ExpireSlotLocked(uint32_t slot, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The journal's record of a Define (aggregator_state.cc, beside Replay).
  static void JournalDefine(state::Writer& w, int64_t now, const SeriesKey& key,
                            const StatSpec& spec, SeriesId id);
  // Journals a run of samples (if journaling): as its samples, or, for a
  // long run of a series without quantiles or histogram, by marking the
  // series for an image (JournalImagesLocked), which costs the same however
  // many samples the run holds.
  void JournalRunLocked(const SampleRun& run, int64_t now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the image of every series marked since the last call: its
  // counters, its open windows and its clocks, which replace the series'
  // in a replay (JournalOp::kImage). Before any other operation on a marked
  // series is journaled, and when the record is sealed.
  void JournalImagesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void JournalImageOfLocked(SeriesId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs of at least this many samples are journaled as an image (about 60
  // bytes and 45 per open window) rather than as samples (9 bytes each).
  static constexpr size_t kImageRunSamples = 8;

  const AggregatorOptions options_;
  const Clock& clock_;
  // Steps aside between two chunks of a walk, a close or an expiry scan
  // while AddSamples calls wait.
  void YieldToWriters() const;

  mutable absl::Mutex mu_;
  // AddSamples calls waiting for mu_. absl::Mutex does not hand the lock to
  // the writer it wakes: a walk that re-locks at once can keep ingestion out
  // chunk after chunk, so walks check this between chunks.
  mutable std::atomic<int> writers_waiting_{0};
  std::vector<Slot> slots_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  size_t series_count_ ABSL_GUARDED_BY(mu_) = 0;
  SeriesCounters totals_ ABSL_GUARDED_BY(mu_);
  uint64_t redefinitions_ ABSL_GUARDED_BY(mu_) = 0;
  // Windows closed by redefinitions, for the next CloseDueWindows.
  std::vector<ClosedWindow> closed_early_ ABSL_GUARDED_BY(mu_);
  // Keyed by the series' own key object (no second copy of every key),
  // looked up by value.
  // Ordered, so that listings walk in key order and resume after a key
  // (ListSeriesChunk); about as compact as a hash map, and Define, the one
  // lookup by key, is rare.
  struct KeyPtrLess {
    using is_transparent = void;
    static const SeriesKey& Deref(const SeriesKey& k) { return k; }
    static const SeriesKey& Deref(const SeriesKey* k) { return *k; }
    template <typename A, typename B>
    bool operator()(const A& a, const B& b) const {
      return Deref(a) < Deref(b);
    }
  };
  absl::btree_map<const SeriesKey*, SeriesId, KeyPtrLess> ids_ ABSL_GUARDED_BY(mu_);
  // The first entry of ids_ above *after (the first if null) that can match
  // `selector`, and whether entries past `it` can match at all.
  using IdIterator = absl::btree_map<const SeriesKey*, SeriesId, KeyPtrLess>::const_iterator;
  IdIterator FirstAfterLocked(const Selector& selector, const SeriesKey* after) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  static bool PastSelector(const Selector& selector, const SeriesKey& key);
  // One stored copy per distinct label set; entries no series uses any more
  // are swept by ExpireIdleSeries.
  absl::flat_hash_set<LabelSet> label_sets_ ABSL_GUARDED_BY(mu_);
  // Close deadline (ms) → series with an open window due then. Entries may be
  // stale (series expired or window already closed); they are skipped.
  absl::btree_multimap<int64_t, SeriesId> deadlines_ ABSL_GUARDED_BY(mu_);

  // The state directory's (after the members above, which ingestion reads
  // at every run, so that their layout around mu_ is what it was before).
  StateJournal* journal_ = nullptr;  // set once, before any change
  // Series whose changes since the last seal are journaled as an image.
  absl::flat_hash_set<SeriesId> journal_images_ ABSL_GUARDED_BY(mu_);
  // What a journaled run's time, series and first timestamp are encoded
  // against: the run before it in the same record (JournalOp::kRunBase
  // starts each record's), so that a run of one sample of one of many
  // series costs about 14 bytes instead of 30. The replay keeps the same.
  struct RunBase {
    uint64_t record = ~uint64_t{0};  // StateJournal::records_sealed() when set
    int64_t now = 0;
    uint64_t id = 0;
    int64_t timestamp_us = 0;
  };
  RunBase journal_base_ ABSL_GUARDED_BY(mu_);
  RunBase replay_base_ ABSL_GUARDED_BY(mu_);
  // One operation of the aggregator's (ReplayRecord).
  bool ReplayLocked(JournalOp op, state::Reader& in) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<ClosedWindow>* replay_closed_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A replayed run's samples, decoded: reused from run to run (a run of a
  // sample or two of one of many series would otherwise cost two
  // allocations, 10 % of a replay's time).
  std::vector<double> replay_values_ ABSL_GUARDED_BY(mu_);
  std::vector<int64_t> replay_timestamps_ ABSL_GUARDED_BY(mu_);
  // Between LoadState of a kApart state and FinishHistory: by slot, the
  // index of the oldest window the history files must give its series.
  std::vector<uint64_t> history_needed_ ABSL_GUARDED_BY(mu_);
  // Between the first replayed record and FinishRestore: no deadlines are
  // kept (FinishRestore makes them from the open windows).
  bool replaying_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_AGGREGATOR_H_

// What a send cycle puts in a stream's batches: the definitions of new
// stats, the samples waiting in the logs, the drop reports of listed stats,
// events and releases, each kind in the order the daemon needs.
#ifndef TORCHMON_CLIENT_DETAIL_BATCH_FILLER_H_
#define TORCHMON_CLIENT_DETAIL_BATCH_FILLER_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "detail/event_queue.h"
#include "detail/outgoing_batch.h"
#include "detail/stat_state.h"

namespace torchmon::detail {

// Sender thread only: the sole consumer of the client's sample logs and of
// its stats' drop lists. Each Add* appends to `out`, calling `write` first
// whenever `out` is full; `write` writes `out` to the stream and leaves it
// empty, or returns false if the stream broke, and then the Add* returns
// false at once (what it had not yet put in a batch stays where it was,
// except what the caller took from the EventQueue, for it to requeue).
// `generation` names the stream: a stat is defined once per stream, before
// the first batch that uses its id.
class BatchFiller {
 public:
  using Clock = std::chrono::steady_clock;
  using Write = absl::FunctionRef<bool()>;
  // A log that has taken nothing for this long, and has been drained, gives
  // its chunk back. Long enough that a thread adding every few hundred ms
  // keeps its chunk (a chunk change costs two CAS and a cache miss or two),
  // short enough that a burst's memory, or an exited thread's, returns to
  // the budget soon after.
  static constexpr std::chrono::milliseconds kIdleRelease{1000};

  explicit BatchFiller(ClientBuffers& buffers) : buffers_(buffers) {}

  // The highest stat id registered, as the cycle starts: TakeSamples sizes
  // its scratch by it at once.
  void SetMaxStatId(uint32_t max_id) { max_stat_id_ = max_id; }

  // The memory batches are made in (recycled across batches).
  const std::shared_ptr<BatchMemory>& memory() const { return memory_; }

  // The definitions of `fresh` stats not yet defined on this stream, but
  // for those already destroyed (a Stat made and destroyed between two
  // cycles), which are set aside: so that a loop of Stats that record
  // nothing costs the daemon nothing. One set aside is defined, in the
  // order of registration, if this cycle finds a sample or a drop of it,
  // or before any later stat of its series with another spec (whose
  // definition waits for its release: after_release), or at the end of a
  // cycle that did not take every sample (EndSetAside).
  bool AddDefinitions(const std::vector<StatState*>& fresh, uint64_t generation,
                      OutgoingBatch& out, Write write);
  // After the cycle's samples and drop reports: the stats set aside and
  // still not defined need no definition if the cycle was `complete` (it
  // took every sample they had); otherwise they are defined now. Either
  // way the cycle is done with them.
  bool EndSetAside(bool complete, uint64_t generation, OutgoingBatch& out, Write write);

  struct LogsTaken {
    // False if a sample buffered at the start could not be taken yet (a
    // producer was mid-push): the cycle does not complete a flush.
    bool complete = true;
    // The largest fraction of a log, or of the client's budget, found
    // occupied, for pacing.
    double max_fill = 0;
  };
  // Every log's samples, up to what it held when looked at (samples pushed
  // later wait for the next cycle, so a busy producer cannot keep a cycle,
  // and the flush it serves, going), defining on the stream any stat not
  // yet defined there. Gives idle logs' chunks, and idle batch memory, back
  // (kIdleRelease after their last add, as of `now`).
  bool AddSamples(uint64_t generation, Clock::time_point now, OutgoingBatch& out, Write write,
                  LogsTaken* taken);
  // The drop reports of the stats listed since the last cycle (a stat that
  // dropped a sample lists itself, StatState::Wake), each unlisted once all
  // its drops so far are written.
  bool AddDropReports(uint64_t generation, OutgoingBatch& out, Write write);
  // Events, oldest first, then event drop reports (after the events: a
  // report counts what the client could not send). Those written leave
  // `taken`.
  static bool AddEvents(EventQueue::Taken& taken, OutgoingBatch& out, Write write);
  // Releases (IngestBatch.released), last in a cycle: the daemon applies
  // them after the rest of the batch.
  static bool AddReleases(const std::vector<uint32_t>& ids, OutgoingBatch& out, Write write);

  // True if a log, or all of them against the budget, are full enough that
  // the sender should not wait for its next cycle (SendPacer::IsBurst).
  // Cheap: loads only.
  bool LookForBurst() const;

 private:
  // Adds the definition of `stat` to `out` unless it went out on this
  // stream already (then the daemon knows it before `out`), after those of
  // the stats of its series set aside with another spec.
  void DefineOnStream(StatState& stat, uint64_t generation, OutgoingBatch& out);
  // Takes up to `max` samples from `log` into `out`, counts them to their
  // stats and defines any stat not yet defined on the stream. Returns how
  // many (0: none published yet).
  size_t TakeSamples(SampleLog& log, uint64_t max, uint64_t generation, OutgoingBatch& out);

  ClientBuffers& buffers_;
  // The listed stats (StatState::listed): those with drops to report. Raw
  // pointers: a listed stat is never retired.
  std::vector<StatState*> listed_;
  // Scratch for TakeSamples.
  SampleGroups groups_;
  uint32_t max_stat_id_ = 0;
  // This cycle's fresh stats set aside (AddDefinitions), by series, in
  // order, with their spec's hash if they share one. Raw pointers: emptied
  // by the end of each cycle (EndSetAside, or the next AddDefinitions
  // after a cycle a broken stream cut short), and a stat is retired only
  // between cycles.
  struct SetAside {
    std::vector<StatState*> stats;
    uint64_t spec_hash = 0;
    bool mixed = false;
  };
  absl::flat_hash_map<uint64_t, SetAside> set_aside_;
  // Freed once no thread has added for kIdleRelease (as idle logs give
  // their chunks back).
  const std::shared_ptr<BatchMemory> memory_ = std::make_shared<BatchMemory>();
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_BATCH_FILLER_H_

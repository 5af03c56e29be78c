// The daemon's state directory (torchmond --state-dir): a snapshot of the
// aggregator and the client registry, and a journal of every change made
// since, so that a daemon killed at any moment, or stopped and started
// again, rebuilds exactly the state it had acknowledged.
//
// On disk, in the directory (docs/reliability.md):
//   lock                     flock()ed by the daemon using the directory
//   snapshot-<position>      the state when the journal stood at <position>,
//                            without the series' closed windows, which are
//                            in the history files it names
//   history-<sequence>       closed windows: those closed since the snapshot
//                            before, and every one kept by one in 32 of
//                            the series, in turn; the newest 32 hold them all
//   journal-<position>       the journal's records from <position> on
// Positions are bytes of journal records since the directory was created,
// 16 hex digits. A record is [length u32][check u64][payload]: one ingest
// batch's changes (JournalOp...), or one chunk of closes or expiries.
//
// Writes: the ingest path seals each batch's record under the gate and
// commits it (write(2) to the journal file, one write for every record
// sealed meanwhile) before the batch is acknowledged; what is written is in
// the page cache, which survives the process. fsync: per --state-fsync.
// A snapshot is taken every `snapshot_bytes` of journal (or half the last
// snapshot's size, if more; at most one per `snapshot_interval`), at stop,
// and soon after a start that replayed a journal; it starts a new journal
// file, and once it is on disk the files before the previous snapshot are
// removed: that one, its journal and its history files stay, a fallback
// should the newest be found damaged. The closed windows apart, a snapshot
// costs about what the series' open state does, not their history: a kill
// replays at most about a snapshot's worth of journal.
//
// Thread-safe.
#ifndef TORCHMON_SERVER_STATE_STATE_STORE_H_
#define TORCHMON_SERVER_STATE_STATE_STORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/aggregator.h"
#include "server/core/daemon_stats.h"
#include "server/core/state_journal.h"
#include "server/ingest/client_registry.h"

namespace torchmon::server::state {

struct StateOptions {
  std::string dir;
  // fsync(2) of the journal: after every write (kAlways), every `interval`
  // (kInterval), or never (kNever: the kernel writes back when it likes).
  // A process death loses nothing written under any of them; a power loss
  // or kernel crash loses at most what was not yet synced.
  enum class Fsync { kNever, kInterval, kAlways };
  Fsync fsync = Fsync::kInterval;
  absl::Duration fsync_interval = absl::Seconds(1);
  // Journal bytes between snapshots: this, or half the last snapshot's
  // size without its history file if that is more; and at least
  // `snapshot_interval` between them (a stop's and a start's excepted).
  uint64_t snapshot_bytes = 8 << 20;
  absl::Duration snapshot_interval = absl::Seconds(1);
};

// Parses --state-fsync: "always", "never", or a duration ("1s", "200ms").
absl::StatusOr<std::pair<StateOptions::Fsync, absl::Duration>> ParseFsync(absl::string_view text);

// What the restore found and did: for the log line and the daemon's metrics.
struct RestoreReport {
  bool snapshot_loaded = false;
  uint64_t snapshot_position = 0;
  uint64_t records_replayed = 0;
  uint64_t journal_bytes_replayed = 0;
  // Files (or their tails) that could not be used, each with why: set aside
  // in the directory's "skipped" folder, never read into the state.
  std::vector<std::string> skipped;
  absl::Duration took;
  // The windows closed by the records replayed from Restore's
  // `republish_after` on, in the order they closed.
  std::vector<ClosedWindow> republish;
};

class StateStore final : public StateJournal {
 public:
  // Opens (creating) `options.dir` and locks it: Unavailable when another
  // process holds it. A directory that cannot be written (read-only
  // filesystem, permissions) is opened for reading: logged, counted, and
  // written again once a snapshot succeeds (writable_at_start()).
  // `stats` (may be null) gets the torchmon_daemon_state_* counts.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(
      StateOptions options, std::function<void(const std::string&)> log,
      DaemonStats* stats = nullptr);
  ~StateStore() override;

  // Rebuilds `aggregator` and `clients` (both fresh, not yet journaling)
  // from the newest usable snapshot and the journal after it, then starts
  // journaling them in a new journal file and starts the snapshot and
  // fsync threads (which write a snapshot soon if a journal was replayed). What could not be used
  // is moved aside, logged and reported; the rest is never built from it. The windows closed by
  // records that start at `republish_after` or later are in the report's `republish` (the push
  // spool's mark: what the exporters had not yet written).
  RestoreReport Restore(Aggregator& aggregator, ClientRegistry& clients,
                        uint64_t republish_after = UINT64_MAX);

  // Where the journal stands: the position after the last record sealed.
  uint64_t sealed_position() ABSL_LOCKS_EXCLUDED(pending_mu_);

  // Called by every snapshot before it takes the gate, and after it has
  // copied the state: the push spool's pass lock and drain (the daemon's),
  // so that no snapshot falls between a pass's closes and the moment its
  // windows are written to the spool. Set before Restore.
  void SetSnapshotBarrier(std::function<void()> enter, std::function<void()> leave) {
    barrier_enter_ = std::move(enter);
    barrier_leave_ = std::move(leave);
  }

  // Writes a snapshot now (the stop's: the window in progress is kept open
  // in it, to close whole in the next daemon). Then nothing more is written.
  absl::Status Close();

  // StateJournal.
  absl::Mutex& gate() override ABSL_LOCK_RETURNED(gate_) { return gate_; }
  std::string& record() override { return record_; }
  uint64_t Seal() override;
  uint64_t records_sealed() const override { return records_sealed_; }
  bool Commit(uint64_t position) override;

  const StateOptions& options() const { return options_; }
  // Whether the directory could be written at Open (else it is only read
  // from, and snapshots are retried until one succeeds).
  bool writable_at_start() const { return writable_at_start_; }

 private:
  StateStore(StateOptions options, int lock_fd, bool writable,
             std::function<void(const std::string&)> log, DaemonStats* stats);

  // Takes the gate, copies the state and starts a new journal file; then
  // writes the copy and removes what it makes obsolete.
  absl::Status Snapshot() ABSL_LOCKS_EXCLUDED(gate_, io_mu_);
  // Writes `bytes` (a header, 16 bytes for its length and check, then
  // what they cover) as `name`, whole: under a temporary name, synced,
  // then renamed. Fills in the length and check.
  absl::Status WriteWhole(const std::string& name, std::string& bytes);
  // Opens journal-<position> for appending (io_mu_ held).
  absl::Status StartJournalLocked(uint64_t position) ABSL_EXCLUSIVE_LOCKS_REQUIRED(io_mu_);
  void Background();
  // Moves `name` into the skipped folder, saying why.
  void SetAside(const std::string& name, const std::string& why, RestoreReport& report);

  const StateOptions options_;
  const int lock_fd_;  // -1: a directory it cannot write had no lock file
  // False when the directory could not be written at Open: the daemon
  // runs from what it restored, as on a full disk.
  const bool writable_at_start_;
  const std::function<void(const std::string&)> log_;
  DaemonStats own_stats_;  // where the counts go without a daemon's
  DaemonStats& stats_;
  Aggregator* aggregator_ = nullptr;
  std::function<void()> barrier_enter_;
  std::function<void()> barrier_leave_;
  ClientRegistry* clients_ = nullptr;

  absl::Mutex gate_;
  // Under gate_, which the journal's users lock through gate() (the
  // analysis cannot follow that, hence no annotation).
  std::string record_;
  uint64_t records_sealed_ = 0;  // under gate_ too

  // Serializes writes to the journal file.
  mutable absl::Mutex io_mu_ ABSL_ACQUIRED_AFTER(gate_);
  int journal_fd_ ABSL_GUARDED_BY(io_mu_) = -1;
  std::string writing_ ABSL_GUARDED_BY(io_mu_);  // pending_, swapped out to be written
  uint64_t written_ ABSL_GUARDED_BY(io_mu_) = 0;
  uint64_t synced_ ABSL_GUARDED_BY(io_mu_) = 0;
  uint64_t snapshot_position_ ABSL_GUARDED_BY(io_mu_) = 0;
  // A write failed: nothing more is appended to the journal until a
  // snapshot succeeds (it captures what the journal missed).
  bool broken_ ABSL_GUARDED_BY(io_mu_) = false;
  bool closed_ ABSL_GUARDED_BY(io_mu_) = false;
  // A snapshot is due at once (the restore replayed a journal).
  bool snapshot_soon_ ABSL_GUARDED_BY(io_mu_) = false;
  // The last snapshot's size without its history file: the journal
  // between snapshots is at least this (replaying it costs about what
  // writing the snapshot does).
  uint64_t last_snapshot_live_bytes_ ABSL_GUARDED_BY(io_mu_) = 0;
  absl::Time last_snapshot_ ABSL_GUARDED_BY(io_mu_) = absl::InfinitePast();

  // The history files (history-<sequence>) the newest snapshot names,
  // oldest first, and those of the one before it (its fallback: kept
  // too); the next file's sequence; whether the next file must hold every
  // closed window (the files named cannot be counted on). Touched by
  // Restore and Snapshot only, which never run at once.
  std::vector<uint64_t> chain_;
  std::vector<uint64_t> fallback_chain_;
  uint64_t next_history_ = 0;
  bool history_whole_next_ = true;

  // Records sealed but not yet written, and the position after them.
  absl::Mutex pending_mu_ ABSL_ACQUIRED_AFTER(gate_, io_mu_);
  std::string pending_ ABSL_GUARDED_BY(pending_mu_);
  uint64_t sealed_ ABSL_GUARDED_BY(pending_mu_) = 0;

  absl::Mutex wake_mu_;
  bool stop_ ABSL_GUARDED_BY(wake_mu_) = false;
  std::thread background_;
};

}  // namespace torchmon::server::state

#endif  // TORCHMON_SERVER_STATE_STATE_STORE_H_

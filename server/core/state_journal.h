// The daemon's journal as the parts that change its state see it (the
// aggregator, the ingest sessions, the client registry): a record being
// built under one gate, sealed in the order the changes happened, and
// written before anything that depends on it is acknowledged. Implemented by
// state::StateStore (server/state/state_store.h); absent without
// --state-dir, and then nothing is journaled.
#ifndef TORCHMON_SERVER_CORE_STATE_JOURNAL_H_
#define TORCHMON_SERVER_CORE_STATE_JOURNAL_H_

#include <cstdint>
#include <string>

#include "absl/synchronization/mutex.h"

namespace torchmon::server {

// Operation codes of the journal's records (one record holds one or more).
enum class JournalOp : uint8_t {
  kDefine = 1,
  kRelease = 2,
  kRun = 3,
  kClientDrops = 4,
  kClose = 5,
  kCloseAll = 6,
  kRemove = 7,
  kFreeSketches = 8,
  kClientApplied = 9,
  kImage = 10,
  kRunBase = 11,
  kTakeEarly = 12,
};

class StateJournal {
 public:
  virtual ~StateJournal() = default;
  // Held by whoever changes the journaled state, for the whole of one
  // change that must be atomic (an ingest batch, one chunk of closes), and
  // taken before any lock of the state itself: so the journal's order is
  // the order the changes were made in, and a record never holds half a
  // batch.
  virtual absl::Mutex& gate() = 0;
  // The record being built; appended to under the gate.
  virtual std::string& record() = 0;
  // Under the gate: ends the record being built (if it holds anything) and
  // queues it for writing. Returns the journal position a Commit must reach
  // for it to be written.
  virtual uint64_t Seal() = 0;
  // How many records were sealed with something in them: operations that
  // encode against a value written earlier in the same record (the first
  // run's time and series) write that value again in a new record.
  virtual uint64_t records_sealed() const = 0;
  // Writes everything sealed up to `position` to the journal's file, if
  // another caller has not already (the page cache survives the process;
  // the fsync policy decides the rest). Not under the gate. False if the
  // write failed (the store says so and counts it).
  virtual bool Commit(uint64_t position) = 0;
};

// Holds `journal`'s gate (nothing if it is null) for one atomic change;
// on leaving, seals what the change recorded, lets the gate go and commits
// the record: it is written before the caller goes on to acknowledge or
// publish anything that depends on it.
class JournalGate {
 public:
  explicit JournalGate(StateJournal* journal) ABSL_NO_THREAD_SAFETY_ANALYSIS
      : journal_(journal) {
    if (journal_ != nullptr) journal_->gate().Lock();
  }
  ~JournalGate() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (journal_ == nullptr) return;
    const uint64_t position = journal_->Seal();
    journal_->gate().Unlock();
    journal_->Commit(position);
  }
  JournalGate(const JournalGate&) = delete;
  JournalGate& operator=(const JournalGate&) = delete;

 private:
  StateJournal* const journal_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_STATE_JOURNAL_H_

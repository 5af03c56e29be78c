// The batches a client has numbered and a daemon has not yet acknowledged,
// what their acknowledgements settle, and the flush tickets that wait on
// them.
#ifndef TORCHMON_CLIENT_DETAIL_ACK_LEDGER_H_
#define TORCHMON_CLIENT_DETAIL_ACK_LEDGER_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "detail/outgoing_batch.h"
#include "detail/stat_table.h"

namespace torchmon::detail {

// Not thread-safe: ClientCore holds it under its mutex, and it is the only
// writer of the counts StatCounts keeps "under the client's mutex"
// (delivered, drops_acked, their per-daemon twins, abandoned), so
// -Wthread-safety checks that every such write holds it.
//
// Delivery: every batch with samples, drops or events is kept (Keep) from
// before it is written until an ack covers its sequence (Acknowledge) or
// the client stops (AbandonAll); a stream that breaks re-sends the kept
// ones (Kept). A sample is "settled" once acknowledged or abandoned.
//
// Flush tickets: a Flush takes a ticket (RequestFlush); a send cycle that
// has written everything buffered when it started marks the tickets it
// served written, as of the last sequence it used (CycleWrote). The Flush
// then waits until no kept batch is at or below that sequence (Delivered).
class AckLedger {
 public:
  // Counts to `table`, which must outlive the ledger.
  explicit AckLedger(StatTable& table) : table_(table) {}

  // Keeps `batch` (numbered) until acknowledged or abandoned.
  void Keep(std::shared_ptr<const OutgoingBatch> batch);
  // The kept batches, in sequence order (shared: a re-send may write one
  // while an ack retires it).
  std::vector<std::shared_ptr<const OutgoingBatch>> Kept() const {
    return {kept_.begin(), kept_.end()};
  }
  // True while the batch numbered `sequence` (or an earlier one) is kept.
  bool StillKept(uint64_t sequence) const {
    return !kept_.empty() && kept_.front()->batch->sequence() <= sequence;
  }
  // The first batch still kept (UINT64_MAX if none): every batch numbered
  // below it is acknowledged or abandoned.
  uint64_t first_unsettled() const {
    return kept_.empty() ? UINT64_MAX : kept_.front()->batch->sequence();
  }
  bool empty() const { return kept_.empty(); }
  // The kept batches' estimated size (OutgoingBatch::bytes).
  size_t bytes() const { return bytes_; }

  // What an ack or an abandon retired.
  struct Retired {
    uint64_t batches = 0;
    uint64_t events = 0;
  };
  // Retires the kept batches up to `sequence`, counting their samples and
  // drop reports delivered to their stats, in total and to this daemon.
  Retired Acknowledge(uint64_t sequence);
  // Retires every kept batch, counting its samples abandoned (the client
  // stopped before an ack).
  Retired AbandonAll();
  // Acks carry the daemon process's instance: on a new one (a restart,
  // when a previous one had acknowledged), the per-daemon counts of ids
  // 1..`max_id` start again. True if it was a restart.
  bool SeeDaemon(uint64_t instance, uint32_t max_id);
  // Samples acknowledged or abandoned, over all stats.
  uint64_t samples_settled() const { return samples_settled_; }

  // --- flush tickets ---
  uint64_t RequestFlush() { return ++flush_requested_; }
  uint64_t flush_requested() const { return flush_requested_; }
  // A ticket handed out and not yet served by a complete cycle.
  bool FlushWaiting() const { return flush_requested_ > flush_written_; }
  bool FlushWritten(uint64_t ticket) const { return flush_written_ >= ticket; }
  // A complete cycle that started after `ticket` was handed out wrote
  // everything up to `last_sequence`.
  void CycleWrote(uint64_t ticket, uint64_t last_sequence);
  // The last sequence written for the newest served ticket.
  uint64_t written_sequence() const { return written_sequence_; }

 private:
  StatTable& table_;
  std::deque<std::shared_ptr<const OutgoingBatch>> kept_;
  size_t bytes_ = 0;
  uint64_t samples_settled_ = 0;
  // The daemon process that acknowledged last (0: none yet).
  uint64_t daemon_instance_ = 0;
  uint64_t flush_requested_ = 0;
  uint64_t flush_written_ = 0;
  uint64_t written_sequence_ = 0;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_ACK_LEDGER_H_

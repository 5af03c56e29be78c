// ClientCore's threads: the sender's connect loop, its stream and send
// cycle, and the reader of a stream's acks. The API side is in
// client_core.cc.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "detail/backoff.h"
#include "detail/client_core.h"
#include "detail/send_pacer.h"
#include "detail/wall_clock.h"

namespace torchmon::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The daemon is reported unreachable once connecting has failed this long:
// a daemon that is starting, or slow to accept, is not worth a line in the
// training log.
constexpr milliseconds kUnreachableAfter{2000};
// How long a connect wait goes without checking for stop or a new flush.
constexpr milliseconds kPollInterval{50};
// How long a stopping stream waits for the daemon to end the call after the
// half-close, so the daemon sees a clean end rather than a cancellation.
constexpr milliseconds kHalfCloseGrace{250};
// A cycle that found a producer mid-push retries this soon; the producer
// finishes in nanoseconds unless it was preempted.
constexpr milliseconds kIncompleteRetry{1};

std::string CodeName(int code) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", code) : name;
}

}  // namespace

struct ClientCore::StreamState {
  Stream* stream;
  // Distinguishes streams for SenderSlot::defined_on.
  uint64_t generation;
};

// --- sender thread: the connect loop ---

void ClientCore::SenderMain() {
  // Named so that top -H and profilers show what the training process runs.
  pthread_setname_np(pthread_self(), "torchmon-send");
  Backoff backoff(options_.initial_backoff, options_.max_backoff,
                  static_cast<uint32_t>(getpid()) ^
                      static_cast<uint32_t>(Clock::now().time_since_epoch().count()));
  // Each Flush may cut one pause short; more would let a daemon that ends
  // every stream at once turn a waiting Flush into a reconnect loop.
  uint64_t flush_that_cut_pause = 0;
  // Since when connecting has failed without a break, while `failing`. Not a
  // std::optional: gcc 12 at -Os (MinSizeRel) reports a false
  // -Wmaybe-uninitialized on reading one.
  bool failing = false;
  Clock::time_point failing_since;
  while (!Stopping()) {
    if (!WaitForChannel(backoff.Next())) {
      if (!failing) {
        failing = true;
        failing_since = clock_.Now();
      }
      if (!Stopping() && clock_.Now() - failing_since >= kUnreachableAfter) {
        PrintOnce(absl::StrCat("torchmon: daemon at ", target_,
                               " is unreachable; buffering samples and retrying"));
      }
      backoff.Grow();
      continue;
    }
    failing = false;
    if (RunStream()) {
      backoff.Reset();
    } else {
      backoff.Grow();
    }
    // Pause before reopening, so a daemon that ends every stream at once is
    // not hammered; a flush or stop cuts the pause short.
    absl::MutexLock lock(&mu_);
    const Clock::time_point resume = clock_.Now() + backoff.Next();
    while (!stop_ && clock_.Now() < resume) {
      if (ledger_.FlushWaiting() && ledger_.flush_requested() > flush_that_cut_pause) {
        flush_that_cut_pause = ledger_.flush_requested();
        break;
      }
      clock_.WaitUntil(sender_cv_, mu_, resume);
    }
  }
  absl::MutexLock lock(&mu_);
  sender_exited_ = true;
  progress_cv_.SignalAll();
}

bool ClientCore::WaitForChannel(milliseconds budget) {
  const Clock::time_point deadline = clock_.Now() + budget;
  uint64_t flushes_seen;
  {
    absl::MutexLock lock(&mu_);
    flushes_seen = ledger_.flush_requested();
  }
  for (;;) {
    bool flush_waiting = false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return false;
      if (ledger_.flush_requested() != flushes_seen) {
        flushes_seen = ledger_.flush_requested();
        flush_waiting = true;
      }
    }
    // Someone is waiting on delivery: try now rather than when the channel's
    // own backoff timer (up to max_backoff) next fires.
    if (flush_waiting) grpc::experimental::ChannelResetConnectionBackoff(channel_.get());
    // Keep add()'s clock calibrated while disconnected too.
    WallClock::Recalibrate();
    // gRPC waits in real time: at most kPollInterval at once, so that a
    // stop, a flush or the clock's deadline is seen soon.
    const Clock::time_point now = clock_.Now();
    const auto slice = std::clamp<Clock::duration>(deadline - now, Clock::duration::zero(),
                                                  kPollInterval);
    // In system_clock's own duration: gRPC converts only
    // system_clock::time_point, whose period is libc++'s microseconds where
    // libstdc++'s is nanoseconds.
    if (channel_->WaitForConnected(
            std::chrono::system_clock::now() +
            std::chrono::ceil<std::chrono::system_clock::duration>(slice))) {
      return true;
    }
    if (clock_.Now() >= deadline) return false;
  }
}

// --- sender thread: the stream ---

bool ClientCore::RunStream() {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    active_context_ = &context;
    read_done_ = false;
    acked_on_stream_ = false;
  }
  std::unique_ptr<Stream> stream(
      grpc::internal::ClientReaderWriterFactory<WireBatch, v1::IngestAck>::Create(
          channel_.get(), *stream_method_, &context));
  StreamState state{stream.get(), ++stream_generation_};
  std::thread reader([this, s = stream.get()] { ReaderMain(s); });

  bool healthy = OpenStream(state);
  BatchFiller::LogsTaken cycle;
  Clock::time_point last_cycle_start = clock_.Now();
  Clock::time_point next_cycle = last_cycle_start;  // the hello goes out at once
  SendPacer pacer(options_.send_interval);
  while (healthy) {
    uint64_t ticket;
    if (!WaitForAckRoom(0)) break;
    {
      absl::MutexLock lock(&mu_);
      Clock::time_point next_look = clock_.Now() + SendPacer::kLookInterval;
      for (;;) {
        if (stop_ || read_done_) break;
        const Clock::time_point now = clock_.Now();
        if (now >= next_cycle || (cycle.complete && ledger_.FlushWaiting())) break;
        // Between cycles the buffers are looked at (cheap), so that a burst
        // after a quiet spell is sent at once (see SendPacer), and so is
        // the count of Stats destroyed (StatRetirement::kClosedBurst).
        if (now >= next_look) {
          if (filler_.LookForBurst() ||
              retirement_.ClosedBurst(buffers_->closed_stats.load(std::memory_order_relaxed))) {
            break;
          }
          next_look = now + SendPacer::kLookInterval;
        }
        clock_.WaitUntil(sender_cv_, mu_, std::min(next_cycle, next_look));
      }
      if (stop_ || read_done_) break;
      ticket = ledger_.flush_requested();
    }
    // After the ticket: the stats destroyed before it are seen closed, so
    // the ticket waits for their releases.
    RetireClosedStats();
    QueueFlush(ticket);
    const Clock::time_point cycle_start = clock_.Now();
    const Clock::duration since_last = cycle_start - last_cycle_start;
    last_cycle_start = cycle_start;
    healthy = RunCycle(state, &cycle);
    if (!healthy) break;
    if (cycle.complete) {
      ServeFlushes();
      next_cycle = cycle_start + pacer.NextGap(since_last, cycle.max_fill);
    } else {
      next_cycle = clock_.Now() + kIncompleteRetry;
    }
  }

  const bool stopping = Stopping();
  if (healthy && stopping) {
    stream->WritesDone();
    absl::MutexLock lock(&mu_);
    const Clock::time_point deadline = clock_.Now() + kHalfCloseGrace;
    while (!read_done_ && clock_.Now() < deadline) {
      clock_.WaitUntil(sender_cv_, mu_, deadline);
    }
  }
  bool read_done;
  {
    absl::MutexLock lock(&mu_);
    read_done = read_done_;
  }
  // The reader is blocked in Read until the call ends; end it.
  if (!read_done) context.TryCancel();
  reader.join();
  const grpc::Status status = stream->Finish();

  // Batches still unacknowledged stay kept for the next stream.
  bool acked;
  {
    absl::MutexLock lock(&mu_);
    // A refused token is for the user to fix: keep it for TakeErrors, and
    // before a Flush waiting on this stream learns that it broke.
    if (!stopping && (status.error_code() == grpc::StatusCode::UNAUTHENTICATED ||
                      status.error_code() == grpc::StatusCode::PERMISSION_DENIED)) {
      error_log_.Record(absl::StrCat(CodeName(status.error_code()), ": ", status.error_message()));
      credentials_refused_ = absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                                          absl::StrCat("torchmon: the daemon at ", target_,
                                                       " refused this client: ",
                                                       status.error_message()));
    }
    active_context_ = nullptr;
    connected_ = false;
    acked = acked_on_stream_;
    progress_cv_.SignalAll();
    retired_cv_.SignalAll();
  }
  if (!stopping && !status.ok()) {
    PrintOnce(absl::StrCat("torchmon: stream to daemon at ", target_,
                           " ended: ", CodeName(status.error_code()), ": ", status.error_message(),
                           "; reconnecting"));
  }
  return acked;
}

bool ClientCore::OpenStream(StreamState& state) {
  // Sequence 0: applied on every stream, never taken for a re-send; the
  // daemon needs the definitions before any kept batch that uses them.
  std::vector<std::shared_ptr<StatState>> stats;
  std::vector<std::shared_ptr<const OutgoingBatch>> kept;
  {
    absl::MutexLock lock(&mu_);
    stats = registry_.All();
    kept = ledger_.Kept();
  }
  v1::IngestBatch opening;
  std::string definitions;  // the opening's (WireBatch)
  v1::IngestHello* hello = opening.mutable_hello();
  for (const auto& [key, value] : labels_) (*hello->mutable_labels())[key] = value;
  hello->set_client_name(client_name_);
  hello->set_client_instance(client_instance_);
  size_t bytes = hello->ByteSizeLong() + kFieldOverheadBytes;
  std::vector<StatState*> defined;
  auto write_opening = [&]() {
    if (!state.stream->Write(WireBatch{opening, definitions})) return false;
    opening.Clear();
    definitions.clear();
    bytes = 0;
    return true;
  };
  for (const auto& stat : stats) {
    if (!stat->valid) continue;
    const size_t size = DefinitionBytes(*stat);
    if (bytes + size > kBatchBudgetBytes && !write_opening()) return false;
    AppendDefinitionEntry(stat->definition_bytes.view(), &definitions);
    buffers_->sent.At(stat->id).defined_on = state.generation;
    defined.push_back(stat.get());
    bytes += size;
  }
  if (!write_opening()) return false;
  {
    absl::MutexLock lock(&mu_);
    for (StatState* stat : defined) stat->ever_defined.store(true, std::memory_order_relaxed);
    connected_ = true;
    ++counters_.connects;
  }
  for (const auto& batch : kept) {
    {
      absl::MutexLock lock(&mu_);
      // Acknowledged meanwhile (by this stream's acks of earlier re-sends).
      if (!ledger_.StillKept(batch->batch->sequence())) continue;
      ++counters_.batches_resent;
    }
    if (!state.stream->Write(batch->wire())) return false;
  }
  return true;
}

// --- sender thread: the send cycle ---

bool ClientCore::RunCycle(StreamState& state, BatchFiller::LogsTaken* taken) {
  WallClock::Recalibrate();
  // Fresh budget memory faults in here, not in add().
  buffers_->pool.PopulateAhead();
  const Clock::time_point now = clock_.Now();
  // Raw pointers are safe: only this thread removes stats from the
  // registry (RetireClosedStats, between cycles), and Shutdown only after
  // joining it.
  std::vector<StatState*> fresh;
  EventQueue::Taken events;
  {
    absl::MutexLock lock(&mu_);
    fresh = registry_.TakeNew();
    events = events_.TakeAll();
    filler_.SetMaxStatId(registry_.max_id());
  }
  // AddEvents empties `events` as it writes them: whether drop counts were
  // taken is known here only.
  const bool took_drops = !events.drops.empty();
  const uint64_t generation = state.generation;
  OutgoingBatch out(filler_.memory());
  auto write = [&]() { return out.empty() || WriteBatch(state, out); };
  auto fail = [&]() {
    // The stream is broken; the next one opens with every definition.
    // Drop counts the cycle wrote before it broke are kept in the ledger;
    // those it did not are counted again (Requeue, which also says none
    // is taken any more).
    if (took_drops || !events.events.empty()) {
      absl::MutexLock lock(&mu_);
      events_.Requeue(events);
    }
    return false;
  };
  // Definitions of stats registered since the stream opened, first, so
  // every id is known before a sample or drop report uses it.
  if (!filler_.AddDefinitions(fresh, generation, out, write)) return fail();
  if (!filler_.AddSamples(generation, now, out, write, taken)) return fail();
  if (!filler_.AddDropReports(generation, out, write)) return fail();
  if (!filler_.EndSetAside(taken->complete, generation, out, write)) return fail();
  if (!BatchFiller::AddEvents(events, out, write)) return fail();
  // Last: every sample of a released stat was taken before (by an earlier
  // cycle).
  if (!BatchFiller::AddReleases(retirement_.TakeReleases(generation), out, write)) return fail();
  if (!write()) return fail();
  if (took_drops) {
    // Written, so kept until acknowledged: a flush now waits on the ledger.
    absl::MutexLock lock(&mu_);
    events_.DropsWritten();
  }
  if (taken->complete) ++cycles_completed_;
  return true;
}

bool ClientCore::WriteBatch(StreamState& state, OutgoingBatch& out) {
  const uint64_t sequence = ++last_sequence_;
  out.batch->set_sequence(sequence);
  auto kept = std::make_shared<OutgoingBatch>(std::move(out));
  out = OutgoingBatch(filler_.memory());
  {
    // Kept before the write: the ack can arrive before Write returns, and a
    // failed write is re-sent on the next stream like an unacknowledged one.
    absl::MutexLock lock(&mu_);
    ledger_.Keep(kept);
    events_.Resolve(kept->events);
    for (StatState* stat : kept->defines) stat->ever_defined.store(true, std::memory_order_relaxed);
  }
  // Over the bound the batch waits its turn, kept: a stream that ends
  // meanwhile re-sends it.
  const bool ok = WaitForAckRoom(kept->bytes) && state.stream->Write(kept->wire());
  absl::MutexLock lock(&mu_);
  ++counters_.batches_sent;
  counters_.samples_sent += kept->samples;
  counters_.events_sent += kept->events;
  return ok;
}

bool ClientCore::WaitForAckRoom(size_t own_bytes) {
  absl::MutexLock lock(&mu_);
  while (ledger_.bytes() - own_bytes >= options_.max_unacked_bytes) {
    if (stop_ || read_done_) return false;
    sender_cv_.Wait(&mu_);
  }
  return true;
}

void ClientCore::RetireClosedStats() {
  const bool look = retirement_.LookDue(buffers_->closed_stats.load(std::memory_order_acquire),
                                        cycles_completed_, stream_generation_, clock_.Now());
  absl::MutexLock lock(&mu_);
  if (look) {
    const uint64_t retired = registry_.retired();
    registry_.RetireClosed(
        [&](StatState& stat) {
          return retirement_.Consider(stat, cycles_completed_, stream_generation_);
        },
        last_sequence_);
    if (registry_.retired() != retired) retired_cv_.SignalAll();
  }
  // Nothing writes a freed id's entries: its stat is retired (no add, no
  // sample left to take) and no kept batch names it (no ack to count).
  for (const uint32_t id : registry_.FreeIdsSettledBefore(ledger_.first_unsettled())) {
    freed_.Absorb(buffers_->table.At(id), buffers_->sent.At(id));
  }
}

void ClientCore::QueueFlush(uint64_t ticket) {
  if (ticket <= flush_queued_) return;
  flush_queued_ = ticket;
  // This cycle takes what was buffered before the ticket; the releases it
  // waits for are written by the cycle ReleasesWrittenBy names.
  uint64_t at = std::max(cycles_completed_ + 1, retirement_.ReleasesWrittenBy());
  if (!flushes_due_.empty()) at = std::max(at, flushes_due_.back().at_cycle);
  flushes_due_.push_back({ticket, at});
}

void ClientCore::ServeFlushes() {
  uint64_t served = 0;
  while (!flushes_due_.empty() && flushes_due_.front().at_cycle <= cycles_completed_) {
    served = flushes_due_.front().ticket;
    flushes_due_.pop_front();
  }
  if (served == 0) return;
  absl::MutexLock lock(&mu_);
  ledger_.CycleWrote(served, last_sequence_);
  progress_cv_.SignalAll();
}

// --- reader thread ---

void ClientCore::ReaderMain(Stream* stream) {
  pthread_setname_np(pthread_self(), "torchmon-acks");
  v1::IngestAck ack;
  while (stream->Read(&ack)) OnAck(ack);
  absl::MutexLock lock(&mu_);
  read_done_ = true;
  sender_cv_.SignalAll();
}

void ClientCore::OnAck(const v1::IngestAck& ack) {
  std::vector<std::string> to_print;
  {
    absl::MutexLock lock(&mu_);
    acked_on_stream_ = true;
    credentials_refused_ = absl::OkStatus();
    if (ledger_.SeeDaemon(ack.daemon_instance(), registry_.max_id())) ++counters_.daemon_restarts;
    const AckLedger::Retired retired = ledger_.Acknowledge(ack.sequence());
    counters_.events_delivered += retired.events;
    counters_.batches_acked += retired.batches;
    for (const v1::IngestError& error : ack.errors()) {
      ++counters_.errors;
      std::string message = absl::StrCat(CodeName(error.code()), ": ", error.message());
      std::string line = error_log_.ShouldPrint(absl::StrCat("torchmon: daemon refused: ", message));
      if (!line.empty()) to_print.push_back(std::move(line));
      error_log_.Record(std::move(message));
    }
    progress_cv_.SignalAll();
    sender_cv_.SignalAll();  // room for more unacknowledged batches
  }
  for (const std::string& line : to_print) ErrorLog::Print(line);
}

}  // namespace torchmon::detail

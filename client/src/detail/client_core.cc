// ClientCore's API side: construction and shutdown, registering stats,
// logging events, flushing, and the counts and errors callers read. The
// threads' side is in client_core_sender.cc.
#include "detail/client_core.h"

#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "detail/credentials.h"
#include "detail/option_checks.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How long Shutdown lets the sender wind down before cancelling the call it
// may be blocked in.
constexpr milliseconds kStopGrace{500};
// Making a Stat waits, at most this long, while this many destroyed Stats
// wait for the sender to let go of them (ClientCore::RegisterStat).
constexpr uint64_t kMaxStatsWaiting = 1 << 16;
constexpr milliseconds kStatPaceWait{100};

}  // namespace

ClientCore::ClientCore(ClientOptions options, const SenderClock& clock)
    : options_(NormalizeOptions(std::move(options))),
      clock_(clock),
      target_(options_.target),
      client_name_(options_.client_name.empty() ? absl::StrCat("torchmon-cpp/0.1 pid=", getpid())
                                                : options_.client_name),
      owner_pid_(getpid()),
      client_instance_(DrawClientInstance()),
      buffers_(std::make_shared<ClientBuffers>(CheckedBufferBudget(options_))),
      filler_(*buffers_),
      events_(options_.max_buffered_events),
      ledger_(buffers_->table),
      error_log_(options_.log_to_stderr) {
  std::vector<std::string> label_errors;
  labels_ = ResolveClientLabels(options_, &label_errors);
  for (std::string& error : label_errors) RecordLocalError(std::move(error));

  const grpc::ChannelArguments args = ChannelArgumentsFor(options_);
  const ClientSecurity security = options_.security_from_environment
                                      ? SecurityFromEnvironment(options_.security)
                                      : options_.security;
  std::vector<std::string> warnings;
  auto channel = CreateChannel(target_, security, args, &warnings);
  for (const std::string& warning : warnings) {
    PrintOnce(absl::StrCat("torchmon: warning: ", warning));
  }
  if (channel.ok()) {
    channel_ = *std::move(channel);
  } else {
    RecordLocalError(absl::StrCat("not connecting to the daemon at ", target_, ": ",
                                  channel.status().message()));
    channel_ = RefusedChannel(args);
  }
  stream_method_.emplace(kIngestStreamMethod, grpc::internal::RpcMethod::BIDI_STREAMING, channel_);
  sender_ = std::thread([this] { SenderMain(); });
}

ClientCore::~ClientCore() { Shutdown(); }

bool ClientCore::InForkedChild() const { return getpid() != owner_pid_; }

std::shared_ptr<StatState> ClientCore::RegisterStat(
    std::string name, const std::vector<StatAggregation>& aggregations,
    std::chrono::milliseconds window_size, const StatOptions& options) {
  CheckedDefinition checked = CheckStatDefinition(name, aggregations, window_size, options, labels_);
  v1::StatDefinition& def = checked.definition;
  absl::Status& status = checked.status;
  uint32_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    // A loop that destroys Stats faster than the sender sends and releases
    // them is paced here, so that what they hold until then (~350 bytes
    // each) stays bounded. Only while a daemon takes them, and briefly: a
    // slow daemon slows the loop, it never stops it.
    const Clock::time_point give_up = clock_.Now() + kStatPaceWait;
    while (connected_ && !stop_ && StatsWaitingLocked() >= kMaxStatsWaiting &&
           clock_.Now() < give_up) {
      clock_.WaitUntil(retired_cv_, mu_, give_up);
    }
    if (registry_.HasClosed(checked.key_hash)) def.set_after_release(true);
    id = registry_.NextId();
    if (id == 0 && status.ok()) {
      // Id 0's entry counts the samples of every stat refused this way.
      status = absl::ResourceExhaustedError(
          absl::StrCat("a client holds at most ", StatTable::kMaxIds - 1,
                       " stats at once (alive, or destroyed with samples not yet acknowledged)"));
    }
    buffers_->table.Create(id);
    buffers_->sent.Create(id);
  }
  def.set_id(id);
  auto state = std::make_shared<StatState>(def, status.ok(), buffers_);
  state->key_hash = checked.key_hash;
  state->spec_hash = checked.spec_hash;
  {
    absl::MutexLock lock(&mu_);
    registry_.Add(state);
  }
  if (!status.ok()) {
    RecordLocalError(
        absl::StrCat("INVALID_ARGUMENT: stat \"", protocol::Quote(name),
                     "\" is invalid and its samples will be dropped: ", status.message()));
  }
  return state;
}

void ClientCore::LogEvent(const Event& event) {
  v1::Event wire;
  const absl::Status status = EventToProto(event, &wire);
  bool queue_full = false;
  {
    absl::MutexLock lock(&mu_);
    ++counters_.events_logged;
    if (status.ok() && !stop_ && events_.Push(std::move(wire))) return;
    ++counters_.events_dropped;
    // Reported to the daemon by name, unless the name is the problem.
    events_.CountDrop(protocol::ValidateName("event name", event.name).ok()
                          ? event.name
                          : EventQueue::kInvalidName);
    queue_full = status.ok() && !stop_;
  }
  if (!status.ok()) {
    RecordLocalError(absl::StrCat("INVALID_ARGUMENT: event dropped: ", status.message()));
  } else if (queue_full) {
    PrintOnce(absl::StrCat(
        "torchmon: event queue full (max_buffered_events=", options_.max_buffered_events,
        "); dropping events until the daemon at ", target_, " takes them"));
  }
}

ClientStats ClientCore::Stats() const {
  absl::MutexLock lock(&mu_);
  ClientStats stats = counters_;
  // Every stat registered has its counts in the table until its id is
  // freed, then in freed_.
  uint64_t rejected = 0, taken = 0, abandoned = 0, delivered = 0, buffered = 0;
  {
    // Samples move from the logs to `taken` under drain_mu.
    absl::MutexLock drain(&buffers_->drain_mu);
    const uint32_t max_id = registry_.max_id();
    buffers_->table.ForEach(max_id, [&](uint32_t, const StatCounts& c) {
      rejected += c.rejected.load(std::memory_order_relaxed);
      abandoned += c.abandoned.load(std::memory_order_relaxed);
      delivered += c.delivered.load(std::memory_order_relaxed);
    });
    buffers_->sent.ForEach(max_id, [&](uint32_t, const SenderSlot& s) {
      taken += s.taken.load(std::memory_order_relaxed);
    });
    rejected += buffers_->table.At(0).rejected.load(std::memory_order_relaxed);
    buffered = buffers_->BufferedTotal();
  }
  // Stats whose ids were freed, and so reset, since.
  rejected += freed_.rejected;
  taken += freed_.taken;
  abandoned += freed_.abandoned;
  delivered += freed_.delivered;
  stats.samples_added = rejected + taken + buffered;
  stats.samples_dropped = rejected + abandoned + (abandoned_ ? buffered : 0);
  stats.samples_delivered = delivered;
  return stats;
}

uint64_t ClientCore::StatsWaitingLocked() const {
  // A stat may be retired before ~Stat counts it closed.
  const uint64_t closed = buffers_->closed_stats.load(std::memory_order_acquire);
  return closed > registry_.retired() ? closed - registry_.retired() : 0;
}

uint32_t ClientCore::LargestStatId() const {
  absl::MutexLock lock(&mu_);
  return registry_.max_id();
}

std::vector<std::string> ClientCore::TakeErrors() {
  absl::MutexLock lock(&mu_);
  return error_log_.Take();
}

bool ClientCore::HasPendingLocked() const {
  // Event drops count as events do: a flush after an invalid event (the
  // queue already sent) must deliver its drop report, or the daemon's
  // totals lag what the client counted.
  if (events_.Pending() || events_.DropsUnwritten() || !ledger_.empty()) return true;
  // A sample is pending from its push to a log until acknowledged (or
  // abandoned); a stopped client's leftovers are dropped, not pending.
  if (!abandoned_ && buffers_->PushedTotal() != ledger_.samples_settled()) return true;
  return registry_.AnyPendingDefinitionOrDrops();
}

bool ClientCore::WaitProgressLocked(Clock::time_point deadline) {
  if (clock_.Now() >= deadline) return false;
  clock_.WaitUntil(progress_cv_, mu_, deadline);
  return true;
}

absl::Status ClientCore::FlushTimeoutStatus(std::chrono::milliseconds timeout) const {
  if (connected_) {
    return absl::DeadlineExceededError(
        absl::StrCat("torchmon: flush timed out after ", timeout.count(),
                     "ms waiting for the daemon at ", target_, " to acknowledge"));
  }
  return absl::DeadlineExceededError(absl::StrCat("torchmon: flush timed out after ",
                                                  timeout.count(), "ms; daemon at ", target_,
                                                  " unreachable"));
}

absl::Status ClientCore::Flush(std::chrono::milliseconds timeout) {
  timeout = std::max(timeout, milliseconds::zero());
  const Clock::time_point deadline = clock_.Now() + timeout;
  absl::MutexLock lock(&mu_);
  if (!HasPendingLocked()) return absl::OkStatus();

  const uint64_t ticket = ledger_.RequestFlush();
  sender_cv_.Signal();

  // A daemon that refuses this client's credentials will not change its
  // mind before the deadline: say so at once.
  while (!ledger_.FlushWritten(ticket)) {
    if (!credentials_refused_.ok()) return credentials_refused_;
    if (!WaitProgressLocked(deadline)) return FlushTimeoutStatus(timeout);
  }
  // Everything this flush covers went out in batches up to this sequence;
  // they are kept, and re-sent after a break, until acknowledged.
  const uint64_t sequence = ledger_.written_sequence();
  while (ledger_.StillKept(sequence)) {
    if (!credentials_refused_.ok()) return credentials_refused_;
    if (!WaitProgressLocked(deadline)) return FlushTimeoutStatus(timeout);
  }
  return absl::OkStatus();
}

void ClientCore::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  const absl::Status flushed = Flush(options_.destructor_flush_timeout);
  if (!flushed.ok() && options_.log_to_stderr) ErrorLog::Print(std::string(flushed.message()));
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    sender_cv_.SignalAll();
    retired_cv_.SignalAll();
    const Clock::time_point deadline = clock_.Now() + kStopGrace;
    while (!sender_exited_) {
      if (!WaitProgressLocked(deadline)) break;
    }
    // Blocked in a Write to a daemon that stopped reading: only a
    // cancellation gets the sender out.
    if (!sender_exited_ && active_context_ != nullptr) active_context_->TryCancel();
  }
  sender_.join();
  AbandonUndelivered();
}

void ClientCore::AbandonUndelivered() {
  absl::MutexLock lock(&mu_);
  // From here on dropped() also counts what add() left buffered.
  buffers_->accepting.store(false, std::memory_order_release);
  abandoned_ = true;
  counters_.events_dropped += ledger_.AbandonAll().events;
  // Events logged but never taken into a batch.
  counters_.events_dropped += events_.DropUnsent();
}

bool ClientCore::Stopping() const {
  absl::MutexLock lock(&mu_);
  return stop_;
}

void ClientCore::RecordLocalError(std::string message) {
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    line = error_log_.ShouldPrint(absl::StrCat("torchmon: ", message));
    error_log_.Record(std::move(message));
  }
  if (!line.empty()) ErrorLog::Print(line);
}

void ClientCore::PrintOnce(const std::string& line) {
  std::string to_print;
  {
    absl::MutexLock lock(&mu_);
    to_print = error_log_.ShouldPrint(line);
  }
  if (!to_print.empty()) ErrorLog::Print(to_print);
}

}  // namespace torchmon::detail

#include "detail/client_core.h"
#include "detail/backoff.h"
#include "detail/credentials.h"
#include "detail/outgoing_batch.h"
#include "detail/send_pacer.h"
#include "detail/wall_clock.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <optional>
#include <random>
#include <stdexcept>

#include "absl/hash/hash.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::detail {

// torchmon::Aggregation is the wire's, number for number (protocol::AggregationAs).
static_assert(static_cast<int>(Aggregation::VALUE) == v1::VALUE);
static_assert(static_cast<int>(Aggregation::MEAN) == v1::MEAN);
static_assert(static_cast<int>(Aggregation::COUNT) == v1::COUNT);
static_assert(static_cast<int>(Aggregation::SUM) == v1::SUM);
static_assert(static_cast<int>(Aggregation::MAX) == v1::MAX);
static_assert(static_cast<int>(Aggregation::MIN) == v1::MIN);
static_assert(static_cast<int>(Aggregation::QUANTILE) == v1::QUANTILE);
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// The daemon is reported unreachable once connecting has failed this long:
// a daemon that is starting, or slow to accept, is not worth a line in the
// training log.
constexpr milliseconds kUnreachableAfter{2000};

// How long a connect wait goes without checking for stop or a new flush.
constexpr milliseconds kPollInterval{50};
// How long Shutdown lets the sender wind down before cancelling the call it
// may be blocked in.
constexpr milliseconds kStopGrace{500};
// How long a stopping stream waits for the daemon to end the call after the
// half-close, so the daemon sees a clean end rather than a cancellation.
constexpr milliseconds kHalfCloseGrace{250};
// A cycle that found a producer mid-push retries this soon; the producer
// finishes in nanoseconds unless it was preempted.
constexpr milliseconds kIncompleteRetry{1};
// A log that has taken nothing for this long, and has been drained, gives
// its chunk back. Long enough that a thread adding every few hundred ms
// keeps its chunk (a chunk change costs two CAS and a cache miss or two),
// short enough that a burst's memory, or an exited thread's, returns to the
// budget soon after.
constexpr milliseconds kIdleRelease{1000};
// While closed stats wait for acknowledgements, the registry is scanned for
// them at most this often.
constexpr milliseconds kRetireInterval{1000};
static_assert(ClientOptions::kMinBufferBytes == ChunkPool::MinBudgetBytes(),
              "client.h documents the pool's minimum");

std::string CodeName(int code) {
  std::string name = absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
  return name.empty() ? absl::StrCat("CODE_", code) : name;
}

void PrintLine(const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); }

// A non-zero number that no other client on the node is likely to draw.
uint64_t DrawInstance() {
  std::random_device device;
  std::seed_seq seed{device(), device(), static_cast<uint32_t>(getpid()),
                     static_cast<uint32_t>(Clock::now().time_since_epoch().count())};
  std::mt19937_64 rng(seed);
  uint64_t instance = 0;
  while (instance == 0) instance = rng();
  return instance;
}

// Refuses what cannot work before any thread starts (see ClientOptions).
size_t CheckedBudget(const ClientOptions& options) {
  if (options.buffer_bytes < ClientOptions::kMinBufferBytes ||
      options.buffer_bytes > ChunkPool::MaxBudgetBytes()) {
    throw std::invalid_argument(absl::StrCat(
        "torchmon: ClientOptions::buffer_bytes is ", options.buffer_bytes, "; it must be at least ",
        ClientOptions::kMinBufferBytes, " (2 MiB: one batch of samples) and at most ",
        ChunkPool::MaxBudgetBytes()));
  }
  return options.buffer_bytes;
}

ClientOptions Normalize(ClientOptions options) {
  constexpr milliseconds kOneMs{1};
  options.send_interval = std::max(options.send_interval, kOneMs);
  options.initial_backoff = std::max(options.initial_backoff, kOneMs);
  options.max_backoff = std::max(options.max_backoff, options.initial_backoff);
  options.destructor_flush_timeout =
      std::max(options.destructor_flush_timeout, milliseconds::zero());
  if (options.target.empty()) options.target = protocol::DefaultTarget();
  return options;
}

void SetLabel(Labels& labels, const std::string& key, const std::string& value) {
  for (auto& [k, v] : labels) {
    if (k == key) {
      v = value;
      return;
    }
  }
  labels.emplace_back(key, value);
}

Labels ResolveLabels(const ClientOptions& options, std::vector<std::string>* errors) {
  Labels labels = options.labels_from_environment ? IdentityLabelsFromEnvironment() : Labels{};
  for (const auto& [key, value] : options.labels) {
    absl::Status status = protocol::ValidateLabelKey(key);
    if (status.ok()) status = protocol::ValidateLabelValue(key, value);
    if (!status.ok()) {
      errors->push_back(absl::StrCat("INVALID_ARGUMENT: client label ignored: ", status.message()));
      continue;
    }
    SetLabel(labels, key, value);
  }
  return labels;
}

absl::Status ValidateStatLabels(const Labels& stat_labels, const Labels& identity) {
  if (stat_labels.size() + identity.size() > protocol::kMaxLabels) {
    return absl::InvalidArgumentError(absl::StrCat(
        identity.size(), " identity labels and ", stat_labels.size(), " of its own make ",
        identity.size() + stat_labels.size(), " labels (at most ", protocol::kMaxLabels, ")"));
  }
  for (const auto& [key, value] : stat_labels) {
    if (absl::Status s = protocol::ValidateLabelKey(key); !s.ok()) return s;
    if (absl::Status s = protocol::ValidateLabelValue(key, value); !s.ok()) return s;
    for (const auto& [identity_key, identity_value] : identity) {
      if (key == identity_key) {
        return absl::InvalidArgumentError(
            absl::StrCat("label \"", key, "\" is also an identity label of the client (", key,
                         "=\"", identity_value, "\"); a series cannot carry it twice"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

struct ClientCore::StreamState {
  Stream* stream;
  // Distinguishes streams for StatState::defined_on_stream.
  uint64_t generation;
};

ClientCore::ClientCore(ClientOptions options, const SenderClock& clock)
    : options_(Normalize(std::move(options))),
      clock_(clock),
      target_(options_.target),
      client_name_(options_.client_name.empty() ? absl::StrCat("torchmon-cpp/0.1 pid=", getpid())
                                                : options_.client_name),
      owner_pid_(getpid()),
      buffers_(std::make_shared<ClientBuffers>(CheckedBudget(options_))),
      client_instance_(DrawInstance()),
      error_log_(options_.log_to_stderr) {
  std::vector<std::string> label_errors;
  labels_ = ResolveLabels(options_, &label_errors);
  for (std::string& error : label_errors) RecordLocalError(std::move(error));

  // gRPC's own reconnect backoff defaults to 1 s growing to 120 s; a daemon
  // that comes back must be found within our max_backoff instead.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.initial_backoff.count()));
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
              static_cast<int>(options_.initial_backoff.count()));
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
              static_cast<int>(std::min<int64_t>(options_.max_backoff.count(), INT32_MAX)));
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
  stub_ = v1::Ingest::NewStub(channel_);
  sender_ = std::thread([this] { SenderMain(); });
}

ClientCore::~ClientCore() { Shutdown(); }

bool ClientCore::InForkedChild() const { return getpid() != owner_pid_; }

std::shared_ptr<StatState> ClientCore::RegisterStat(
    std::string name, const std::vector<StatAggregation>& aggregations,
    std::chrono::milliseconds window_size, const StatOptions& options) {
  v1::StatDefinition def;
  def.set_name(name);
  v1::StatSpec* spec = def.mutable_spec();
  for (const StatAggregation& a : aggregations) {
    if (a.aggregation == Aggregation::QUANTILE) {
      spec->add_quantiles(a.quantile);
    } else {
      spec->add_aggregations(protocol::AggregationAs<v1::Aggregation>(a.aggregation));
    }
  }
  spec->set_window_size_ms(window_size.count());
  if (options.requested_window.count() != window_size.count()) {
    spec->set_requested_window_size_ms(options.requested_window.count());
  }
  spec->set_max_samples(options.max_samples);
  spec->set_histogram(options.histogram);
  for (const auto& [key, value] : options.labels) (*def.mutable_labels())[key] = value;

  absl::Status status = protocol::ValidateName("stat name", name);
  if (status.ok()) status = protocol::ValidateSpec(*spec);
  if (status.ok()) status = ValidateStatLabels(options.labels, labels_);

  // Name and labels, hashed: a collision only makes a conflict wait before
  // it is reported.
  std::string key = name;
  for (const auto& [k, v] : options.labels) {
    absl::StrAppend(&key, ",", k.size(), ":", k, v.size(), ":", v);
  }
  const uint64_t key_hash = absl::HashOf(key);
  uint32_t id = 0;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = by_key_.find(key_hash); it != by_key_.end()) {
      for (const StatState* other : it->second) {
        if (other->closed.load(std::memory_order_acquire)) def.set_after_release(true);
      }
    }
    if (next_stat_id_ < StatTable::kMaxIds) {
      id = next_stat_id_++;
    } else if (status.ok()) {
      // Id 0's entry counts the samples of every stat refused this way.
      status = absl::ResourceExhaustedError(absl::StrCat(
          "a client registers at most ", StatTable::kMaxIds - 1, " stats in its life"));
    }
    buffers_->table.Create(id);
    buffers_->sent.Create(id);
  }
  def.set_id(id);
  auto state = std::make_shared<StatState>(def, status.ok(), buffers_);
  state->key_hash = key_hash;
  {
    absl::MutexLock lock(&mu_);
    stats_.push_back(state);
    if (state->valid) {
      new_stats_.push_back(state.get());
      by_key_[key_hash].push_back(state.get());
    }
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
    if (status.ok() && !stop_ && events_.size() < options_.max_buffered_events) {
      events_.push_back(std::move(wire));
      ++events_queued_;
      return;
    }
    ++counters_.events_dropped;
    // Reported to the daemon by name, unless the name is the problem.
    CountEventDropLocked(protocol::ValidateName("event name", event.name).ok() ? event.name
                                                                                : kInvalidEventName);
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

void ClientCore::CountEventDropLocked(const std::string& name) {
  auto it = event_drops_.find(name);
  if (it == event_drops_.end()) {
    it = event_drops_.size() < kMaxEventDropNames ? event_drops_.emplace(name, 0).first
                                                  : event_drops_.try_emplace(kOtherEventsName).first;
  }
  ++it->second;
}

ClientStats ClientCore::Stats() const {
  absl::MutexLock lock(&mu_);
  ClientStats stats = counters_;
  // Every stat ever registered has its counts in the table, retired or not.
  uint64_t rejected = 0, taken = 0, abandoned = 0, delivered = 0, buffered = 0;
  {
    // Samples move from the logs to `taken` under drain_mu.
    absl::MutexLock drain(&buffers_->drain_mu);
    buffers_->table.ForEach(next_stat_id_ - 1, [&](uint32_t, const StatCounts& c) {
      rejected += c.rejected.load(std::memory_order_relaxed);
      abandoned += c.abandoned.load(std::memory_order_relaxed);
      delivered += c.delivered.load(std::memory_order_relaxed);
    });
    buffers_->sent.ForEach(next_stat_id_ - 1, [&](uint32_t, const SenderSlot& s) {
      taken += s.taken.load(std::memory_order_relaxed);
    });
    rejected += buffers_->table.At(0).rejected.load(std::memory_order_relaxed);
    buffered = buffers_->BufferedTotal();
  }
  stats.samples_added = rejected + taken + buffered;
  stats.samples_dropped = rejected + abandoned + (abandoned_ ? buffered : 0);
  stats.samples_delivered = delivered;
  return stats;
}

std::vector<std::string> ClientCore::TakeErrors() {
  absl::MutexLock lock(&mu_);
  return error_log_.Take();
}

bool ClientCore::HasPendingLocked() const {
  if (events_queued_ != events_resolved_ || !retained_.empty()) return true;
  // A sample is pending from its push to a log until acknowledged (or
  // abandoned); a stopped client's leftovers are dropped, not pending.
  if (!abandoned_ && buffers_->PushedTotal() != samples_settled_) return true;
  for (const auto& stat : stats_) {
    if (stat->HasPendingDefinitionOrDrops()) return true;
  }
  return false;
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

  const uint64_t ticket = ++flush_requested_;
  sender_cv_.Signal();

  // A daemon that refuses this client's credentials will not change its
  // mind before the deadline: say so at once.
  while (flush_written_ < ticket) {
    if (!credentials_refused_.ok()) return credentials_refused_;
    if (!WaitProgressLocked(deadline)) return FlushTimeoutStatus(timeout);
  }
  // Everything this flush covers went out in batches up to this sequence;
  // they are kept, and re-sent after a break, until acknowledged.
  const uint64_t sequence = written_sequence_;
  while (!retained_.empty() && retained_.front()->batch->sequence() <= sequence) {
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
  if (!flushed.ok() && options_.log_to_stderr) PrintLine(std::string(flushed.message()));
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    sender_cv_.SignalAll();
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
  for (const auto& kept : retained_) {
    CountAbandonedLocked(*kept);
    samples_settled_ += kept->samples;
    counters_.events_dropped += kept->events;
  }
  retained_.clear();
  retained_bytes_ = 0;
  // Events logged but never taken into a batch.
  counters_.events_dropped += events_queued_ - events_resolved_;
  events_resolved_ = events_queued_;
  events_.clear();
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
  if (!line.empty()) PrintLine(line);
}

void ClientCore::PrintOnce(const std::string& line) {
  std::string to_print;
  {
    absl::MutexLock lock(&mu_);
    to_print = error_log_.ShouldPrint(line);
  }
  if (!to_print.empty()) PrintLine(to_print);
}

// --- sender thread ---

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
      if (flush_requested_ > flush_written_ && flush_requested_ > flush_that_cut_pause) {
        flush_that_cut_pause = flush_requested_;
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
    flushes_seen = flush_requested_;
  }
  for (;;) {
    bool flush_waiting = false;
    {
      absl::MutexLock lock(&mu_);
      if (stop_) return false;
      if (flush_requested_ != flushes_seen) {
        flushes_seen = flush_requested_;
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
    // libstdc++'s is nanoseconds (the portable build uses libc++).
    if (channel_->WaitForConnected(
            std::chrono::system_clock::now() +
            std::chrono::ceil<std::chrono::system_clock::duration>(slice))) {
      return true;
    }
    if (clock_.Now() >= deadline) return false;
  }
}

bool ClientCore::RunStream() {
  grpc::ClientContext context;
  {
    absl::MutexLock lock(&mu_);
    if (stop_) return false;
    active_context_ = &context;
    read_done_ = false;
    acked_on_stream_ = false;
  }
  std::unique_ptr<Stream> stream = stub_->Stream(&context);
  StreamState state{stream.get(), ++stream_generation_};
  std::thread reader([this, s = stream.get()] { ReaderMain(s); });

  bool healthy = OpenStream(state);
  CycleResult cycle;
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
        if (now >= next_cycle || (cycle.complete && flush_requested_ > flush_written_)) break;
        // Between cycles the buffers are looked at (cheap), so that a burst
        // after a quiet spell is sent at once (see SendPacer).
        if (now >= next_look) {
          if (LookForBurstLocked()) break;
          next_look = now + SendPacer::kLookInterval;
        }
        clock_.WaitUntil(sender_cv_, mu_, std::min(next_cycle, next_look));
      }
      if (stop_ || read_done_) break;
      ticket = flush_requested_;
    }
    const Clock::time_point cycle_start = clock_.Now();
    const Clock::duration since_last = cycle_start - last_cycle_start;
    last_cycle_start = cycle_start;
    healthy = RunCycle(state, &cycle);
    if (!healthy) break;
    if (cycle.complete) {
      {
        absl::MutexLock lock(&mu_);
        flush_written_ = std::max(flush_written_, ticket);
        written_sequence_ = last_sequence_;
        progress_cv_.SignalAll();
      }
      next_cycle = cycle_start + pacer.NextGap(since_last, cycle.max_fill);
    } else {
      next_cycle = clock_.Now() + kIncompleteRetry;
    }
    RetireClosedStats();
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
  }
  if (!stopping && !status.ok()) {
    PrintOnce(absl::StrCat("torchmon: stream to daemon at ", target_,
                           " ended: ", CodeName(status.error_code()), ": ", status.error_message(),
                           "; reconnecting"));
  }
  return acked;
}

bool ClientCore::LookForBurstLocked() {
  uint64_t buffered_total = 0;
  for (const ClientBuffers::Log& l : buffers_->logs) {
    const uint64_t buffered = l.log.pushed() - l.log.popped();
    if (SendPacer::IsBurst(buffered, SampleLog::kMaxSamples)) return true;
    buffered_total += buffered;
  }
  return SendPacer::IsBurst(buffered_total * sizeof(SampleCell), buffers_->pool.budget_bytes());
}

void ClientCore::TakeReadyStats() {
  StatState* next;
  for (StatState* stat = buffers_->TakeReady(); stat != nullptr; stat = next) {
    next = stat->ready_next;
    listed_.push_back(stat);
  }
}

void ClientCore::DefineOnStream(StatState& stat, const StreamState& stream, OutgoingBatch& out) {
  uint64_t& defined = buffers_->sent.At(stat.id).defined_on;
  if (defined == stream.generation) return;
  out.AddDefinition(stat);
  defined = stream.generation;
}

size_t ClientCore::TakeSamples(SampleLog& log, uint64_t max, const StreamState& stream,
                               OutgoingBatch& out) {
  // The samples leave the log and are counted to their stats under one
  // hold of drain_mu, so that a reader of a stat's count finds each sample
  // in exactly one place.
  absl::MutexLock drain(&buffers_->drain_mu);
  // Two passes over the log's cells (SampleGroups): count each stat's
  // samples, make room for them in `out`, then put each straight into its
  // place as it is drained. Copying them out first and grouping the copy
  // cost a third of the sender's time at 20 M samples/s: a full batch's
  // copy (1.5 MiB) does not stay in a 1 MiB L2 for its two further passes.
  groups_.Begin();
  const uint64_t n = log.Peek(buffers_->pool, max, [&](double, int64_t t, uint32_t id) {
    groups_.Count(id, t);
  });
  if (n == 0) return 0;
  out.PlaceSamples(groups_);
  const size_t drained = log.Drain(buffers_->pool, n, [&](double value, int64_t t, uint32_t id) {
    groups_.Put(id, value, t);
  });
  // Drain takes exactly what Peek showed (SampleLog::Peek); anything else
  // would leave counted room unwritten.
  assert(drained == n);
  static_cast<void>(drained);
  out.FinishSamples(groups_);
  const SenderTable& sent = buffers_->sent;
  for (const SampleGroups::Group& group : groups_.groups) {
    SenderSlot& slot = sent.At(group.stat_id);
    Bump(slot.taken, group.count);
    if (slot.defined_on == stream.generation) continue;
    // Registered after this cycle took the new definitions, and added to
    // before the logs were read: defined here, in the same batch, whose
    // definitions apply before its samples. Alive: a stat is retired only
    // a complete cycle after it closed, once none of its samples is left.
    StatState* stat = buffers_->table.At(group.stat_id).state.load(std::memory_order_acquire);
    if (stat != nullptr) DefineOnStream(*stat, stream, out);
  }
  return n;
}

bool ClientCore::RunCycle(StreamState& state, CycleResult* result) {
  *result = CycleResult{};
  WallClock::Recalibrate();
  // Fresh budget memory faults in here, not in add().
  buffers_->pool.PopulateAhead();
  const Clock::time_point now = clock_.Now();
  // Raw pointers are safe: only this thread removes stats from the
  // registry (RetireClosedStats, between cycles), and Shutdown only after
  // joining it.
  std::vector<StatState*> fresh;
  std::deque<v1::Event> events;
  std::vector<std::pair<std::string, uint64_t>> event_drops;
  {
    absl::MutexLock lock(&mu_);
    fresh.swap(new_stats_);
    events.swap(events_);
    event_drops.assign(event_drops_.begin(), event_drops_.end());
    event_drops_.clear();
  }
  TakeReadyStats();

  OutgoingBatch out(batch_memory_);
  auto write = [&]() { return out.empty() || WriteBatch(state, out); };
  auto fail = [&]() {
    // The stream is broken; the next one opens with every definition.
    RequeueEvents(events);
    RequeueEventDrops(event_drops);
    return false;
  };

  // Definitions of stats registered since the stream opened, first, so
  // every id is known before a sample or drop report uses it.
  for (StatState* stat : fresh) {
    if (buffers_->sent.At(stat->id).defined_on == state.generation) continue;
    if (!out.Fits(DefinitionBytes(*stat)) && !write()) return fail();
    DefineOnStream(*stat, state, out);
  }

  // Every log, up to what it held when looked at: samples pushed later wait
  // for the next cycle, so a busy producer cannot keep the cycle (and the
  // flush it serves) going. Pacing looks at samples buffered (all logs'
  // against the budget, the fullest log's against what one log may hold).
  uint64_t buffered_total = 0;
  // When any thread last added (each log's active_at, below).
  Clock::time_point last_added{};
  for (ClientBuffers::Log& l : buffers_->logs) {
    SampleLog& log = l.log;
    const uint64_t target = log.pushed();
    const uint64_t buffered = target - log.popped();
    buffered_total += buffered;
    result->max_fill = std::max(result->max_fill, static_cast<double>(buffered) /
                                                      static_cast<double>(SampleLog::kMaxSamples));
    if (target != l.pushed_seen) {
      l.pushed_seen = target;
      l.active_at = now;
    }
    last_added = std::max(last_added, l.active_at);
    while (log.popped() < target) {
      const uint64_t room = out.SampleRoom();
      if (room == 0) {
        if (!write()) return fail();
        continue;
      }
      const uint64_t want = std::min<uint64_t>(room, target - log.popped());
      size_t taken = TakeSamples(log, want, state, out);
      // Zero means a producer has claimed the next cell and not yet
      // published it; give it a moment before leaving it for a later cycle.
      for (int spin = 0; taken == 0 && spin < 64; ++spin) {
        std::this_thread::yield();
        taken = TakeSamples(log, want, state, out);
      }
      if (taken == 0) {
        result->complete = false;
        break;
      }
    }
    // An idle log (a thread that stopped adding, or exited) gives its chunk
    // back to the budget.
    if (now - l.active_at >= kIdleRelease && log.popped() == log.pushed()) {
      absl::MutexLock drain(&buffers_->drain_mu);
      log.Release(buffers_->pool);
    }
  }
  // Batch memory too, once no thread has added for as long.
  if (now - last_added >= kIdleRelease) batch_memory_->Trim();
  result->max_fill = std::max(
      result->max_fill, static_cast<double>(buffered_total * sizeof(SampleCell)) /
                            static_cast<double>(buffers_->pool.budget_bytes()));

  // Drop reports of the listed stats; a stat leaves the list once every
  // drop counted so far is reported.
  for (size_t i = 0; i < listed_.size();) {
    StatState* stat = listed_[i];
    if (const uint64_t drops = stat->unreported_drops(); drops > 0) {
      if (!out.Fits(kDropReportBytes + DefinitionBytes(*stat)) && !write()) return fail();
      DefineOnStream(*stat, state, out);
      out.AddDropReport(*stat, drops);
      // Reported from now on: the batch is kept until acknowledged.
      stat->drops_written.fetch_add(drops, std::memory_order_relaxed);
    }
    // Unlisted before the last look: a producer that then drops finds the
    // flag clear and lists the stat again; a drop counted before the flag
    // cleared is caught by the second look.
    stat->listed.store(false, std::memory_order_seq_cst);
    if (stat->unreported_drops() != 0 && !stat->listed.exchange(true)) {
      ++i;
      continue;
    }
    listed_[i] = listed_.back();
    listed_.pop_back();
  }

  while (!events.empty()) {
    const size_t size = events.front().ByteSizeLong() + kFieldOverheadBytes;
    if (!out.Fits(size) && !write()) return fail();
    out.AddEvent(std::move(events.front()), size);
    events.pop_front();
  }
  // After the events: a report counts what the client could not send.
  while (!event_drops.empty()) {
    const auto& [name, dropped] = event_drops.back();
    const size_t size = name.size() + kDropReportBytes;
    if (!out.Fits(size) && !write()) return fail();
    out.AddEventDropReport(name, dropped, size);
    event_drops.pop_back();
  }
  // Last: every sample of a released stat was taken before (by an earlier
  // cycle), and the daemon applies releases after the rest of the batch.
  for (const auto& [id, generation] : releases_) {
    if (generation != state.generation) continue;
    if (!out.Fits(OutgoingBatch::kReleaseBytes) && !write()) return fail();
    out.AddRelease(id);
  }
  releases_.clear();
  if (!write()) return fail();
  if (result->complete) ++cycles_completed_;
  return true;
}

bool ClientCore::WriteBatch(StreamState& state, OutgoingBatch& out) {
  const uint64_t sequence = ++last_sequence_;
  out.batch->set_sequence(sequence);
  auto kept = std::make_shared<OutgoingBatch>(std::move(out));
  out = OutgoingBatch(batch_memory_);
  {
    // Kept before the write: the ack can arrive before Write returns, and a
    // failed write is re-sent on the next stream like an unacknowledged one.
    absl::MutexLock lock(&mu_);
    retained_.push_back(kept);
    retained_bytes_ += kept->bytes;
    events_resolved_ += kept->events;
    for (const OutgoingBatch::StatPart& part : kept->parts) {
      if (part.defines != nullptr) part.defines->ever_defined.store(true, std::memory_order_relaxed);
    }
  }
  // Over the bound the batch waits its turn, kept: a stream that ends
  // meanwhile re-sends it.
  const bool ok = WaitForAckRoom(kept->bytes) && state.stream->Write(*kept->batch);
  absl::MutexLock lock(&mu_);
  ++counters_.batches_sent;
  counters_.samples_sent += kept->samples;
  counters_.events_sent += kept->events;
  return ok;
}

bool ClientCore::OpenStream(StreamState& state) {
  // Sequence 0: applied on every stream, never taken for a re-send; the
  // daemon needs the definitions before any kept batch that uses them.
  std::vector<std::shared_ptr<StatState>> stats;
  std::vector<std::shared_ptr<const OutgoingBatch>> kept;
  {
    absl::MutexLock lock(&mu_);
    stats = stats_;
    kept.assign(retained_.begin(), retained_.end());
  }
  v1::IngestBatch opening;
  v1::IngestHello* hello = opening.mutable_hello();
  for (const auto& [key, value] : labels_) (*hello->mutable_labels())[key] = value;
  hello->set_client_name(client_name_);
  hello->set_client_instance(client_instance_);
  size_t bytes = hello->ByteSizeLong() + kFieldOverheadBytes;
  std::vector<StatState*> defined;
  auto write_opening = [&]() {
    if (!state.stream->Write(opening)) return false;
    opening.Clear();
    bytes = 0;
    return true;
  };
  for (const auto& stat : stats) {
    if (!stat->valid) continue;
    const size_t size = DefinitionBytes(*stat);
    if (bytes + size > kBatchBudgetBytes && !write_opening()) return false;
    stat->CopyDefinition(opening.add_definitions());
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
      if (retained_.empty() || retained_.front()->batch->sequence() > batch->batch->sequence()) {
        continue;
      }
      ++counters_.batches_resent;
    }
    if (!state.stream->Write(*batch->batch)) return false;
  }
  return true;
}

bool ClientCore::WaitForAckRoom(size_t own_bytes) {
  absl::MutexLock lock(&mu_);
  while (retained_bytes_ - own_bytes >= options_.max_unacked_bytes) {
    if (stop_ || read_done_) return false;
    sender_cv_.Wait(&mu_);
  }
  return true;
}

void ClientCore::RequeueEvents(std::deque<v1::Event>& events) {
  if (events.empty()) return;
  absl::MutexLock lock(&mu_);
  events_.insert(events_.begin(), std::make_move_iterator(events.begin()),
                 std::make_move_iterator(events.end()));
  events.clear();
}

void ClientCore::RequeueEventDrops(std::vector<std::pair<std::string, uint64_t>>& drops) {
  if (drops.empty()) return;
  absl::MutexLock lock(&mu_);
  for (const auto& [name, dropped] : drops) event_drops_[name] += dropped;
  drops.clear();
}

void ClientCore::RetireClosedStats() {
  // Scanning the registry is O(stats): only when a stat was closed since,
  // or now and then while closed ones wait for acknowledgements.
  const uint64_t closed = buffers_->closed_stats.load(std::memory_order_acquire);
  const Clock::time_point now = clock_.Now();
  const bool release_due =
      release_due_at_cycle_ != 0 && cycles_completed_ >= release_due_at_cycle_;
  if (closed == closed_seen_ && !release_due &&
      !(closed_kept_ && now - last_retire_ >= kRetireInterval)) {
    return;
  }
  closed_seen_ = closed;
  last_retire_ = now;
  closed_kept_ = false;
  release_due_at_cycle_ = 0;
  absl::MutexLock lock(&mu_);
  size_t kept = 0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    StatState& stat = *stats_[i];
    if (stat.closed.load(std::memory_order_acquire)) {
      // Its last add came before `closed` was set, so a cycle that starts
      // after this look and completes takes its last sample from the logs.
      // A listed stat is on listed_ or the ready stack: it waits until the
      // sender has unlisted it. Its counts stay in the table.
      const StatCounts& c = stat.counts;
      SenderSlot& slot = stat.sent;
      if (stat.closed_at_cycle == 0) {
        stat.closed_at_cycle = cycles_completed_ + 1;
        release_due_at_cycle_ = std::max(release_due_at_cycle_, stat.closed_at_cycle);
      } else if (cycles_completed_ >= stat.closed_at_cycle && stream_generation_ != 0 &&
                 slot.defined_on == stream_generation_ &&
                 stat.released_on != stream_generation_) {
        // Every sample taken: the stream may let go of its definition, so
        // that the series can be redefined (a Stat made again with another
        // window or cap). On a later stream that defined it again (its
        // samples were still unacknowledged), again.
        stat.released_on = stream_generation_;
        releases_.push_back({stat.id, stream_generation_});
      }
      if (cycles_completed_ >= stat.closed_at_cycle &&
          !stat.listed.load(std::memory_order_acquire) &&
                 !stat.HasPendingDefinitionOrDrops() &&
                 stat.sent.taken.load(std::memory_order_relaxed) ==
                     c.delivered.load(std::memory_order_relaxed) +
                         c.abandoned.load(std::memory_order_relaxed) &&
                 // Its release written (in a cycle after the one that
                 // found it due): a stat made meanwhile is after_release.
                 (stat.released_on == 0 || releases_.empty() ||
                  std::none_of(releases_.begin(), releases_.end(),
                               [&](const auto& r) { return r.first == stat.id; }))) {
        if (auto it = by_key_.find(stat.key_hash); it != by_key_.end()) {
          auto& same = it->second;
          same.erase(std::remove(same.begin(), same.end(), &stat), same.end());
          if (same.empty()) by_key_.erase(it);
        }
        continue;
      }
      closed_kept_ = true;
    }
    if (kept != i) stats_[kept] = std::move(stats_[i]);
    ++kept;
  }
  stats_.resize(kept);
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

void ClientCore::CountDeliveredLocked(const OutgoingBatch& batch) {
  StatTable& table = buffers_->table;
  for (const OutgoingBatch::StatPart& part : batch.parts) {
    if (part.samples == 0 && part.drops == 0) continue;
    StatCounts& c = table.At(part.stat_id);
    Bump(c.delivered, part.samples);
    Bump(c.drops_acked, part.drops);
    Bump(c.delivered_current, part.samples);
    Bump(c.drops_acked_current, part.drops);
  }
  batch.ForEachColumnRun([&](uint32_t id, uint64_t n) {
    StatCounts& c = table.At(id);
    Bump(c.delivered, n);
    Bump(c.delivered_current, n);
  });
}

void ClientCore::CountAbandonedLocked(const OutgoingBatch& batch) {
  StatTable& table = buffers_->table;
  for (const OutgoingBatch::StatPart& part : batch.parts) {
    if (part.samples != 0) Bump(table.At(part.stat_id).abandoned, part.samples);
  }
  batch.ForEachColumnRun([&](uint32_t id, uint64_t n) { Bump(table.At(id).abandoned, n); });
}

void ClientCore::ResetCurrentDaemonCountsLocked() {
  buffers_->table.ForEach(next_stat_id_ - 1, [](uint32_t, StatCounts& c) {
    c.delivered_current.store(0, std::memory_order_relaxed);
    c.drops_acked_current.store(0, std::memory_order_relaxed);
  });
}

void ClientCore::OnAck(const v1::IngestAck& ack) {
  std::vector<std::string> to_print;
  {
    absl::MutexLock lock(&mu_);
    acked_on_stream_ = true;
    credentials_refused_ = absl::OkStatus();
    if (ack.daemon_instance() != 0 && ack.daemon_instance() != daemon_instance_) {
      // Another daemon process: what the previous one acknowledged died
      // with it, so the per-daemon counts start again.
      if (daemon_instance_ != 0) ++counters_.daemon_restarts;
      daemon_instance_ = ack.daemon_instance();
      ResetCurrentDaemonCountsLocked();
    }
    while (!retained_.empty() && retained_.front()->batch->sequence() <= ack.sequence()) {
      const OutgoingBatch& batch = *retained_.front();
      CountDeliveredLocked(batch);
      samples_settled_ += batch.samples;
      counters_.events_delivered += batch.events;
      retained_bytes_ -= batch.bytes;
      retained_.pop_front();
      ++counters_.batches_acked;
    }
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
  for (const std::string& line : to_print) PrintLine(line);
}

}  // namespace torchmon::detail

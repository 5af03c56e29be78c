#include "server/ingest/ingest_service.h"

#include <optional>
#include <random>

#include "absl/strings/str_cat.h"

namespace torchmon::server {
namespace {

uint64_t DrawInstance() {
  std::random_device device;
  std::seed_seq seed{device(), device(), device(), device()};
  std::mt19937_64 rng(seed);
  uint64_t instance = 0;
  while (instance == 0) instance = rng();
  return instance;
}

// A stream that ends at once with `status`, having read nothing: refused
// by the admit gate, or --max-streams are open already.
class RefusedReactor final : public grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck> {
 public:
  explicit RefusedReactor(grpc::Status status) { Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace

class IngestReactor final : public grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck> {
 public:
  IngestReactor(IngestService& service, const grpc::CallbackServerContext& call)
      : service_(service),
        peer_(call.peer()),
        session_(std::in_place, service.aggregator_, service.events_, service.stats_,
                 &service.events_out_, service.options_.limits, &service.clients_,
                 service.options_.client_log,
                 service.options_.vouch ? std::optional(service.options_.vouch(call))
                                        : std::nullopt),
        stats_(service.stats_) {
    stats_.ingest_streams_total.fetch_add(1, std::memory_order_relaxed);
    {
      absl::MutexLock lock(&service_.streams_mu_);
      service_.streams_.insert(this);
    }
    StartRead(&batch_);
  }

  // Ends the stream for shutdown once its pending ack is written. Any thread.
  void EndForShutdown() {
    absl::MutexLock lock(&mu_);
    Refuse(absl::StrCat("torchmond is shutting down"));
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed (or the call broke): finish once the last
      // ack is out.
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      MaybeFinishOrWrite();
      return;
    }
    {
      absl::ReaderMutexLock gate(&service_.gate_);
      absl::MutexLock lock(&mu_);
      if (!service_.applying_) {
        // Shutting down: this batch is neither applied nor acknowledged.
        Refuse(absl::StrCat("torchmond is shutting down; batch ", batch_.sequence(),
                            " was not applied (re-send it to the next daemon)"));
        return;
      }
      const int errors_before = pending_ack_.errors_size();
      {
        // With --state-dir: the batch's changes are one journal record,
        // written before its ack (below) is.
        JournalGate journal(service_.journal_);
        session_->Apply(batch_, &pending_ack_);
      }
      if (pending_ack_.errors_size() > errors_before && service_.options_.client_log != nullptr) {
        // The client learns every refusal from its ack; the operator gets
        // the first of each run and a count.
        service_.options_.client_log->Report(
            "refused parts of an ingest batch",
            absl::StrCat(peer_, ": ", pending_ack_.errors(errors_before).message()));
      }
      has_pending_ack_ = true;
      MaybeFinishOrWrite();
    }
    batch_.Clear();
    StartRead(&batch_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      // Acks can no longer be delivered; the reads will fail too.
      has_pending_ack_ = false;
    }
    MaybeFinishOrWrite();
  }

  void OnDone() override {
    {
      // The stream's series are released (journaled, as every change).
      JournalGate journal(service_.journal_);
      session_.reset();
    }
    {
      absl::MutexLock lock(&service_.streams_mu_);
      service_.streams_.erase(this);
    }
    stats_.ingest_streams_active.fetch_sub(1, std::memory_order_relaxed);
    delete this;
  }

 private:
  // Reads no more; the stream ends with UNAVAILABLE once pending acks are out.
  void Refuse(std::string message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (reads_done_) return;
    refusal_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, std::move(message));
    reads_done_ = true;
    MaybeFinishOrWrite();
  }

  void MaybeFinishOrWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (has_pending_ack_) {
      in_flight_ack_.Swap(&pending_ack_);
      pending_ack_.Clear();
      pending_ack_.set_sequence(in_flight_ack_.sequence());
      in_flight_ack_.set_daemon_instance(service_.instance_);
      has_pending_ack_ = false;
      writing_ = true;
      StartWrite(&in_flight_ack_);
      return;
    }
    if (reads_done_) {
      finished_ = true;
      Finish(refusal_);
    }
  }

  IngestService& service_;
  const std::string peer_;  // for the log
  // Used only from OnReadDone, one read at a time; reset in OnDone.
  std::optional<IngestSession> session_;
  DaemonStats& stats_;
  v1::IngestBatch batch_;

  absl::Mutex mu_;
  v1::IngestAck pending_ack_ ABSL_GUARDED_BY(mu_);
  v1::IngestAck in_flight_ack_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ack_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status refusal_ ABSL_GUARDED_BY(mu_);
};

IngestService::IngestService(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                             Broadcaster<EventRecord>& events_out, const Clock& clock,
                             IngestServiceOptions options)
    : aggregator_(aggregator),
      events_(events),
      stats_(stats),
      events_out_(events_out),
      options_(options),
      instance_(DrawInstance()),
      clients_(clock, options.client_memory_ms, options.max_remembered_clients) {}

grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck>* IngestService::Stream(
    grpc::CallbackServerContext* context) {
  if (options_.admit) {
    if (grpc::Status refused = options_.admit(*context); !refused.ok()) {
      return new RefusedReactor(std::move(refused));
    }
  }
  // Counted before the check so that concurrent opens cannot all slip in.
  const int64_t open = stats_.ingest_streams_active.fetch_add(1, std::memory_order_relaxed);
  if (open >= options_.max_streams) {
    stats_.ingest_streams_active.fetch_sub(1, std::memory_order_relaxed);
    stats_.streams_refused.fetch_add(1, std::memory_order_relaxed);
    if (options_.client_log != nullptr) {
      options_.client_log->Report(
          "refused an ingest stream",
          absl::StrCat(context->peer(), ": --max-streams ", options_.max_streams, " reached"));
    }
    return new RefusedReactor(grpc::Status(
        grpc::StatusCode::RESOURCE_EXHAUSTED,
        absl::StrCat("torchmond already has ", options_.max_streams,
                     " ingest streams open (--max-streams); retry later")));
  }
  return new IngestReactor(*this, *context);
}

void IngestService::StopApplying() {
  {
    absl::MutexLock lock(&gate_);
    applying_ = false;
  }
  absl::MutexLock lock(&streams_mu_);
  for (IngestReactor* stream : streams_) stream->EndForShutdown();
}

bool IngestService::AwaitNoStreams(absl::Time deadline) {
  absl::MutexLock lock(&streams_mu_);
  return streams_mu_.AwaitWithDeadline(absl::Condition(this, &IngestService::NoStreamsLocked),
                                       deadline);
}

}  // namespace torchmon::server

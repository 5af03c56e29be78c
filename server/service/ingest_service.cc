#include "server/service/ingest_service.h"

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "server/service/ingest_session.h"

namespace torchmon::server {
namespace {

class IngestReactor final : public grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck> {
 public:
  IngestReactor(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                Broadcaster<EventRecord>& events_out)
      : session_(aggregator, events, stats, &events_out), stats_(stats) {
    stats_.ingest_streams_active.fetch_add(1, std::memory_order_relaxed);
    stats_.ingest_streams_total.fetch_add(1, std::memory_order_relaxed);
    StartRead(&batch_);
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
      absl::MutexLock lock(&mu_);
      session_.Apply(batch_, &pending_ack_);
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
    stats_.ingest_streams_active.fetch_sub(1, std::memory_order_relaxed);
    delete this;
  }

 private:
  void MaybeFinishOrWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    if (has_pending_ack_) {
      in_flight_ack_.Swap(&pending_ack_);
      pending_ack_.Clear();
      pending_ack_.set_sequence(in_flight_ack_.sequence());
      has_pending_ack_ = false;
      writing_ = true;
      StartWrite(&in_flight_ack_);
      return;
    }
    if (reads_done_) {
      finished_ = true;
      Finish(grpc::Status::OK);
    }
  }

  IngestSession session_;  // used only from OnReadDone, one read at a time
  DaemonStats& stats_;
  v1::IngestBatch batch_;

  absl::Mutex mu_;
  v1::IngestAck pending_ack_ ABSL_GUARDED_BY(mu_);
  v1::IngestAck in_flight_ack_ ABSL_GUARDED_BY(mu_);
  bool has_pending_ack_ ABSL_GUARDED_BY(mu_) = false;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

IngestService::IngestService(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                             Broadcaster<EventRecord>& events_out)
    : aggregator_(aggregator), events_(events), stats_(stats), events_out_(events_out) {}

grpc::ServerBidiReactor<v1::IngestBatch, v1::IngestAck>* IngestService::Stream(
    grpc::CallbackServerContext* /*context*/) {
  return new IngestReactor(aggregator_, events_, stats_, events_out_);
}

}  // namespace torchmon::server

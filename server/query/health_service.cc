#include "server/query/health_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/query/queued_write_reactor.h"

namespace torchmon::server {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// Writes the latest status it was given, one write at a time, until the
// service shuts down (then ends OK once the latest is written) or the client
// goes away. Called by the service with its lock held; takes its own after.
class HealthService::WatchReactor final : public QueuedWriteReactor<HealthCheckResponse> {
 public:
  WatchReactor(HealthService& service, bool known) : service_(service), known_(known) {}

  bool known() const { return known_; }

  // Queues `status` unless it is the one last queued.
  void Send(ServingStatus status) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    if (has_status_ && status == status_) return;
    has_status_ = true;
    status_ = status;
    unwritten_ = true;
    WriteNextLocked();
  }

  // Ends the stream once what is queued is written.
  void End() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    ending_ = true;
    WriteNextLocked();
  }

 private:
  bool NextLocked(HealthCheckResponse& message) override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!unwritten_) return false;
    unwritten_ = false;
    message.set_status(status_);
    return true;
  }
  bool EndingLocked() override ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return ending_; }
  void Done() override { service_.Unregister(this); }

  HealthService& service_;
  const bool known_;
  ServingStatus status_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool has_status_ ABSL_GUARDED_BY(mu_) = false;
  bool unwritten_ ABSL_GUARDED_BY(mu_) = false;
  bool ending_ ABSL_GUARDED_BY(mu_) = false;
};

HealthService::HealthService(std::vector<std::string> names, CallGate admit)
    : names_(names.begin(), names.end()),
      admit_(std::move(admit)),
      ordered_names_(std::move(names)),
      status_(HealthCheckResponse::NOT_SERVING) {}

void HealthService::SetServing(bool serving) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  status_ = serving ? HealthCheckResponse::SERVING : HealthCheckResponse::NOT_SERVING;
  for (WatchReactor* watcher : watchers_) {
    if (watcher->known()) watcher->Send(status_);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  status_ = HealthCheckResponse::NOT_SERVING;
  for (WatchReactor* watcher : watchers_) {
    if (watcher->known()) watcher->Send(status_);
    watcher->End();
  }
}

void HealthService::Unregister(WatchReactor* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return Refused(context, std::move(refused));
  }
  auto* reactor = context->DefaultReactor();
  if (!names_.contains(request->service())) {
    reactor->Finish(grpc::Status(
        grpc::StatusCode::NOT_FOUND,
        absl::StrCat("torchmond has no service \"", request->service(), "\"; it reports on \"",
                     absl::StrJoin(ordered_names_, "\", \""), "\"")));
    return reactor;
  }
  {
    absl::MutexLock lock(&mu_);
    response->set_status(status_);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return new RefusedWriteReactor<HealthCheckResponse>(std::move(refused));
  }
  const bool known = names_.contains(request->service());
  auto* watcher = new WatchReactor(*this, known);
  absl::MutexLock lock(&mu_);
  watchers_.insert(watcher);
  watcher->Send(known ? status_ : HealthCheckResponse::SERVICE_UNKNOWN);
  if (shut_down_) watcher->End();
  return watcher;
}

}  // namespace torchmon::server

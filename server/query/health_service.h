// gRPC edge of health checking: grpc.health.v1, what grpc_health_probe,
// Kubernetes' gRPC probes and load balancers call (docs/grpc-tooling.md).
//
// Why not grpc++'s default health service: in gRPC 1.51 its Shutdown() only
// sends NOT_SERVING again; its Watch streams stay open until the server's
// shutdown deadline cancels them, so any connected health watcher would hold
// every daemon shutdown for --drain-timeout plus the final-writes cap. These
// watchers end as soon as they have written the last status.
#ifndef TORCHMON_SERVER_QUERY_HEALTH_SERVICE_H_
#define TORCHMON_SERVER_QUERY_HEALTH_SERVICE_H_

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/query/call_gate.h"

namespace torchmon::server {

// One status shared by every name it knows: the daemon's services serve, or
// not, together. Thread-safe; must outlive every call it serves.
class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  // Knows `names` ("" for the daemon as a whole, then fully qualified
  // service names), NOT_SERVING until SetServing(true). For any other name
  // Check ends NOT_FOUND and Watch answers SERVICE_UNKNOWN, as the protocol
  // says.
  // Without `admit` every call goes on.
  explicit HealthService(std::vector<std::string> names, CallGate admit = nullptr);

  // SERVING or NOT_SERVING for every known name. Each watcher is sent the
  // change; one that is still writing an earlier status is sent only the
  // latest. No effect after Shutdown().
  void SetServing(bool serving) ABSL_LOCKS_EXCLUDED(mu_);

  // NOT_SERVING for good. Every Watch stream writes what it has not written
  // yet, then ends OK; a Watch started later gets one status and ends.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class WatchReactor;
  void Unregister(WatchReactor* watcher) ABSL_LOCKS_EXCLUDED(mu_);

  const absl::flat_hash_set<std::string> names_;
  const CallGate admit_;
  // Names in the order given, for the NOT_FOUND message.
  const std::vector<std::string> ordered_names_;
  absl::Mutex mu_;
  ServingStatus status_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  // Open Watch streams; each removes itself when its call is done.
  absl::flat_hash_set<WatchReactor*> watchers_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_QUERY_HEALTH_SERVICE_H_

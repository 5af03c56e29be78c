// The gate each handler of the Query and health services asks first (the
// daemon's token check, which knows the caller's peer), and the replies of
// a call it refuses.
#ifndef TORCHMON_SERVER_QUERY_CALL_GATE_H_
#define TORCHMON_SERVER_QUERY_CALL_GATE_H_

#include <functional>
#include <utility>

#include "grpcpp/grpcpp.h"

namespace torchmon::server {

// Whether a call may go on: OK, else the status the call ends with.
using CallGate = std::function<grpc::Status(const grpc::CallbackServerContext& call)>;

// What `admit` says of `call`; OK without a gate.
inline grpc::Status Admission(const CallGate& admit, const grpc::CallbackServerContext& call) {
  return admit ? admit(call) : grpc::Status::OK;
}

// A unary call ended at once with `status`.
inline grpc::ServerUnaryReactor* Refused(grpc::CallbackServerContext* context,
                                         grpc::Status status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(std::move(status));
  return reactor;
}

// A server stream that ends at once with `status`, having written nothing.
template <typename Proto>
class RefusedWriteReactor final : public grpc::ServerWriteReactor<Proto> {
 public:
  explicit RefusedWriteReactor(grpc::Status status) { this->Finish(std::move(status)); }
  void OnDone() override { delete this; }
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_QUERY_CALL_GATE_H_

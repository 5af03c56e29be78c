// Checks that the TSan build sees gRPC's promise that a callback call's
// OnCancel happens before its OnDone (tsan_grpc_completion.cc): a server
// whose reactors take their mutex in OnCancel and are deleted in OnDone, as
// QueuedWriteReactor's are, and a client that starts calls and cancels them.
// No report; without CallOnCancel's annotation TSan reports the deletion in
// OnDone as racing with OnCancel's unlock whenever the two run on different
// threads (most of the calls).
//
// The service is a generated one (grpc.health.v1.Health's Watch), as
// torchmond's are: its handler, which creates the reactor and hands it to
// the call, is a template instantiated here, so TSan sees it. A generic
// service's handler is compiled into uninstrumented libgrpc++, and TSan then
// missed the hand-over of a new reactor to the thread that cancels it, now
// and then (1 run in about 300 under load): a report about the canary's own
// set-up, not about what it checks.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace {

constexpr int kCalls = 40;

// Relaxed: they must not order anything for TSan.
std::atomic<int> created_calls{0};
std::atomic<int> done_calls{0};

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// Holds its call until it is cancelled.
class HeldReactor final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  HeldReactor() { created_calls.fetch_add(1, std::memory_order_relaxed); }
  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    Finish(grpc::Status::CANCELLED);
    cancelled_ = true;
  }
  void OnDone() override {
    done_calls.fetch_add(1, std::memory_order_relaxed);
    delete this;  // the mutex OnCancel took, and what it wrote under it
  }

 private:
  absl::Mutex mu_;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

class HoldingService final : public Health::CallbackService {
  grpc::ServerWriteReactor<HealthCheckResponse>* Watch(grpc::CallbackServerContext*,
                                                       const HealthCheckRequest*) override {
    return new HeldReactor;
  }
};

void* Tag(int i) { return reinterpret_cast<void*>(static_cast<intptr_t>(i)); }

// One call: started, then cancelled by the client once the server holds it
// (the `calls`th).
bool StartAndCancel(Health::Stub& stub, int calls) {
  grpc::ClientContext context;
  grpc::CompletionQueue cq;
  std::unique_ptr<grpc::ClientAsyncReader<HealthCheckResponse>> call =
      stub.PrepareAsyncWatch(&context, HealthCheckRequest(), &cq);
  call->StartCall(Tag(1));
  void* tag;
  bool ok;
  if (!cq.Next(&tag, &ok) || !ok) return false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (created_calls.load(std::memory_order_relaxed) < calls) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  context.TryCancel();
  grpc::Status status;
  call->Finish(&status, Tag(3));
  while (cq.Next(&tag, &ok)) {
    if (tag == Tag(3)) break;
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status.error_code() == grpc::StatusCode::CANCELLED;
}

}  // namespace

int main() {
  HoldingService service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "tsan_grpc_canary: cannot start the server\n");
    return 1;
  }
  std::unique_ptr<Health::Stub> stub = Health::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  for (int i = 0; i < kCalls; ++i) {
    if (!StartAndCancel(*stub, i + 1)) {
      std::fprintf(stderr, "tsan_grpc_canary: call %d did not end CANCELLED\n", i);
      return 1;
    }
  }
  server->Shutdown();
  server->Wait();
  if (done_calls.load() != kCalls) {
    std::fprintf(stderr, "tsan_grpc_canary: %d of %d calls done\n", done_calls.load(), kCalls);
    return 1;
  }
  return 0;
}

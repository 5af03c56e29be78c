// ThreadSanitizer annotations for work handed over through gRPC's
// completion queues.
//
// Why: gRPC promises that whatever a thread did before starting a batch of
// operations (grpc_call_start_batch: a write's message, the reactor state
// the generated code fills in) happened before the batch's completion is
// handled, usually on another thread. Inside uninstrumented libgrpc that
// promise is kept by lock-free queues and atomics TSan cannot see, so it
// reports the completion's reads of gRPC's own header code state, and of
// ours, as races with the thread that started the batch.
//
// What: the batch's tag is the token that travels from one to the other.
// Starting a batch releases on its tag; a completion queue returning the
// tag (grpc_completion_queue_next, which the callback API's threads run,
// and _pluck, which the synchronous API blocks in) acquires on it.
//
// Likewise for the end of a callback-API call: gRPC runs OnDone only after
// every reaction has finished, counted down in the call's
// callbacks_outstanding_. Our code (the header's inline MaybeDone) counts
// down with instrumented atomics, but libgrpc++ counts down with its own
// uninstrumented copy where it cancels a call, and that thread may be the
// one that schedules OnDone. ScheduleOnDone, which whoever counted down last
// calls, acquires on the counter, so that OnDone sees every reaction that
// counted down before it.
//
// OnCancel is one of those reactions, and libgrpc++ runs it (CallOnCancel)
// followed by its own uninstrumented count-down, on an executor thread: when
// that thread is not the last to count down, nothing told TSan that OnCancel
// happened before OnDone, and OnDone deleting a reactor whose OnCancel had
// just unlocked the reactor's mutex was reported. So CallOnCancel hands
// gRPC a stand-in reactor whose OnCancel runs the real one, then releases
// on the counter, which the last count-down acquires (instrumented, in the
// header's inline MaybeDone, or in ScheduleOnDone). Nothing else changes:
// the same reaction runs on the same thread, inline or not as the real
// reactor says.
//
// Defined in every executable of the TSan build and exported from it (see
// cmake/Sanitizers.cmake), these wrappers are what libgrpc++ calls.
#include <sanitizer/tsan_interface.h>

#include "grpc/grpc.h"
#include "grpcpp/support/server_callback.h"
#include "tests/sanitizers/tsan_real_function.h"

#if !defined(__has_feature) || !__has_feature(thread_sanitizer)
#error "tsan_grpc_completion.cc belongs in TORCHMON_SANITIZE=thread builds only"
#endif

namespace {

using torchmon::tsan::RealFunction;

RealFunction<grpc_call_error (*)(grpc_call*, const grpc_op*, size_t, void*, void*)>
    real_start_batch("grpc_call_start_batch", TORCHMON_GRPC_SONAME);
RealFunction<grpc_event (*)(grpc_completion_queue*, gpr_timespec, void*)> real_next(
    "grpc_completion_queue_next", TORCHMON_GRPC_SONAME);
RealFunction<grpc_event (*)(grpc_completion_queue*, void*, gpr_timespec, void*)> real_pluck(
    "grpc_completion_queue_pluck", TORCHMON_GRPC_SONAME);

RealFunction<void (*)(grpc::internal::ServerCallbackCall*, bool)> real_schedule_on_done(
    "_ZN4grpc8internal18ServerCallbackCall14ScheduleOnDoneEb", TORCHMON_GRPCPP_SONAME);
RealFunction<void (*)(grpc::internal::ServerCallbackCall*, grpc::internal::ServerReactor*)>
    real_call_on_cancel("_ZN4grpc8internal18ServerCallbackCall12CallOnCancelEPNS0_13ServerReactorE",
                        TORCHMON_GRPCPP_SONAME);

// Stands in for a call's reactor in CallOnCancel, where gRPC calls only its
// OnCancel (exactly once) and InternalInlineable; deletes itself once
// OnCancel has run.
class ReleasingOnCancel final : public grpc::internal::ServerReactor {
 public:
  ReleasingOnCancel(grpc::internal::ServerReactor* reactor, void* counter)
      : reactor_(reactor), counter_(counter) {}
  void OnCancel() override {
    reactor_->OnCancel();
    __tsan_release(counter_);
    delete this;
  }
  void OnDone() override {}  // gRPC calls the real reactor's, never this one's
  bool InternalInlineable() override { return reactor_->InternalInlineable(); }

 private:
  grpc::internal::ServerReactor* const reactor_;
  void* const counter_;
};

grpc_event Acquired(grpc_event event) {
  if (event.type == GRPC_OP_COMPLETE && event.tag != nullptr) __tsan_acquire(event.tag);
  return event;
}

}  // namespace

extern "C" {

grpc_call_error grpc_call_start_batch(grpc_call* call, const grpc_op* ops, size_t nops, void* tag,
                                      void* reserved) {
  if (tag != nullptr) __tsan_release(tag);
  return real_start_batch.get()(call, ops, nops, tag, reserved);
}

grpc_event grpc_completion_queue_next(grpc_completion_queue* cq, gpr_timespec deadline,
                                      void* reserved) {
  return Acquired(real_next.get()(cq, deadline, reserved));
}

grpc_event grpc_completion_queue_pluck(grpc_completion_queue* cq, void* tag,
                                       gpr_timespec deadline, void* reserved) {
  return Acquired(real_pluck.get()(cq, tag, deadline, reserved));
}

}  // extern "C"

namespace grpc::internal {

void ServerCallbackCall::ScheduleOnDone(bool inline_ondone) {
  __tsan_acquire(&callbacks_outstanding_);
  real_schedule_on_done.get()(this, inline_ondone);
}

void ServerCallbackCall::CallOnCancel(ServerReactor* reactor) {
  // gRPC runs OnCancel once two things have happened, counted down in
  // on_cancel_conditions_remaining_: the handler has set the reactor up,
  // and the call was cancelled. The set-up counts down in the generated
  // handler (instrumented, a release TSan sees); the cancellation counts
  // down in libgrpc++'s CompletionOp::FinalizeResult, whose inlined copy
  // of MaybeCallOnCancel() TSan cannot see. When the cancellation is the
  // last, this thread acquired nothing for TSan, and reading the reactor
  // the handler's thread had just made (its vptr, below) was reported as a
  // race: 2 runs of tsan_grpc_canary in 400 under load. So whoever runs the
  // reaction acquires on the counter first.
  __tsan_acquire(&on_cancel_conditions_remaining_);
  real_call_on_cancel.get()(this, new ReleasingOnCancel(reactor, &callbacks_outstanding_));
}

}  // namespace grpc::internal

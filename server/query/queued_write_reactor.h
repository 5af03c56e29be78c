// The write loop of a server-streaming call whose messages come from
// elsewhere (a broadcaster, a status change): one write in flight at a
// time, the next taken when it completes, the stream ended when the source
// says so, the client going away or cancelling ends it at once. Shared by
// the Query service's watches and grpc.health.v1's Watch.
#ifndef TORCHMON_SERVER_QUERY_QUEUED_WRITE_REACTOR_H_
#define TORCHMON_SERVER_QUERY_QUEUED_WRITE_REACTOR_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/grpcpp.h"

namespace torchmon::server {

// Subclasses say what to write next (NextLocked) and when the source is done
// (EndingLocked), and call Wake() whenever either may have changed. gRPC
// deletes the reactor after OnDone, through Done() first. Thread-safe: any
// thread may Wake(); the hooks run under mu_.
template <typename Proto>
class QueuedWriteReactor : public grpc::ServerWriteReactor<Proto> {
 public:
  void OnWriteDone(bool ok) final {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      FinishLocked(grpc::Status::OK);  // the client went away; nobody reads it
      return;
    }
    WriteNextLocked();
  }

  void OnCancel() final {
    absl::MutexLock lock(&mu_);
    FinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() final {
    Done();
    delete this;
  }

 protected:
  virtual ~QueuedWriteReactor() = default;

  // Fills `message` with the next message and returns true, or returns
  // false if none waits.
  virtual bool NextLocked(Proto& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // True once the source has nothing more to give: the stream then ends OK
  // after what is queued.
  virtual bool EndingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) = 0;
  // After the stream ended, just before the reactor is deleted.
  virtual void Done() {}

  // Writes what waits, if no write is in flight.
  void Wake() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finished_) return;
    message_.Clear();
    if (NextLocked(message_)) {
      writing_ = true;
      this->StartWrite(&message_);
    } else if (EndingLocked()) {
      FinishLocked(grpc::Status::OK);
    }
  }

  absl::Mutex mu_;

 private:
  void FinishLocked(const grpc::Status& status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_) return;
    finished_ = true;
    this->Finish(status);
  }

  Proto message_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_QUERY_QUEUED_WRITE_REACTOR_H_

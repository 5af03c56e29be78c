// One push endpoint's queue and sender (docs/push.md, "Never in the way").
//
// The pusher hands it whole encoded windows (all of one window end's
// requests); its own thread sends them in order, one request at a time.
// Nothing that enqueues ever waits on the network: Enqueue takes the lock
// for a push_back, and when the queue is over its bound (window ends or
// bytes) drops the oldest window that is not on the wire, counting each of
// its series windows as dropped (queue_full).
//
// An answer 2xx: sent. 429, 5xx, or no answer (refused, reset, timeout,
// TLS): the same request again after a backoff (doubling from
// min_backoff_ms to max_backoff_ms), or after Retry-After when the
// receiver gives one; counted as retried. Any other status: the receiver
// refuses that request for good (a 400 for out-of-order samples, a 413):
// its windows are dropped at once (rejected), logged with the receiver's
// message, and the next request goes.
//
// With a spool (the push queues on disk, spool.h), each request's file is
// removed when the request is sent, refused or dropped; at Finish what is
// left stays on disk for the next daemon instead of being dropped.
//
// Thread-safe: Enqueue from any thread; Finish once, from the thread that
// made it.
#ifndef TORCHMON_SERVER_PUSH_EXPORTER_H_
#define TORCHMON_SERVER_PUSH_EXPORTER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/clock.h"
#include "server/core/daemon_stats.h"
#include "server/push/encode.h"
#include "server/push/http_client.h"
#include "server/push/push_options.h"
#include "server/push/spool.h"

namespace torchmon::server {

// The requests of one window end, encoded once for every endpoint of a
// protocol.
struct EncodedWindow {
  int64_t end_ms = 0;
  std::vector<EncodedRequest> requests;
  size_t bytes = 0;    // of every body
  size_t windows = 0;  // series windows, in every request

  // The window end of `requests`, with their bytes and windows counted.
  static std::shared_ptr<EncodedWindow> Of(int64_t end_ms, std::vector<EncodedRequest> requests) {
    auto w = std::make_shared<EncodedWindow>();
    w->end_ms = end_ms;
    w->requests = std::move(requests);
    for (const EncodedRequest& r : w->requests) {
      w->bytes += r.body.size();
      w->windows += r.windows;
    }
    return w;
  }
};

// What an answer means for the request it answers.
enum class PushOutcome { kSent, kRetry, kRejected };
// `status` 0: no answer came.
PushOutcome OutcomeOf(int status);

// How long to wait before attempt `failures` + 1 of a request after
// `failures` (≥ 1) in a row: the receiver's Retry-After (seconds, or an
// HTTP date read against now_ms) when it gives one, capped at
// max_retry_after_ms; otherwise min_backoff_ms doubled per failure, capped
// at max_backoff_ms.
int64_t RetryDelayMs(int failures, absl::string_view retry_after, int64_t now_ms,
                     const PushOptions& options);

class Exporter {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // Starts the sender thread. `stats` is this endpoint's slot, set up by
  // the caller; `clock` stamps what is queued (torchmon_export_queue_*).
  // `spool` (may be null) holds the files of what is queued.
  Exporter(PushEndpoint endpoint, const PushOptions& options, DaemonStats::Exporter& stats,
           const Clock& clock, LogFn log, PushSpool* spool = nullptr);
  // Finish(absl::Now()) if it was not called.
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // `files`: the spool's file of each request ("" for one not written),
  // or none without a spool. `queued_ms` 0: now.
  void Enqueue(std::shared_ptr<const EncodedWindow> window, std::vector<std::string> files = {},
               int64_t queued_ms = 0) ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps sending what is queued until it is all sent or `deadline`
  // passes (a request on the wire is cut there, but for a name lookup
  // under way), then drops what is left, counted as shutdown and logged,
  // and stops the thread.
  void Finish(absl::Time deadline) ABSL_LOCKS_EXCLUDED(mu_);

  const PushEndpoint& endpoint() const { return endpoint_; }

 private:
  struct Entry {
    std::shared_ptr<const EncodedWindow> window;
    size_t next = 0;  // the first request not yet sent or dropped
    int64_t queued_ms = 0;
    std::vector<std::string> files;  // the spool's, one per request
  };
  // The spool's file of `entry`'s request `i`, which is done with.
  void RemoveFile(const Entry& entry, size_t i) const;
  // The series windows of `entry`'s requests not yet sent or dropped.
  static size_t WindowsLeft(const Entry& entry);

  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Drops what is left of `entry`, counting its windows under `reason`.
  size_t DropLocked(const Entry& entry, DaemonStats::ExportDropReason reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PublishQueueLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PushEndpoint endpoint_;
  const PushOptions options_;
  DaemonStats::Exporter& stats_;
  const Clock& clock_;
  const LogFn log_;
  PushSpool* const spool_;
  std::string content_type_;
  std::vector<std::pair<std::string, std::string>> headers_;

  absl::Mutex mu_;
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  size_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The front entry has a request on the wire: it is not dropped for room.
  bool sending_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time next_attempt_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;  // the thread is past its loop
  // Written by Finish at its deadline: cuts a request on the wire.
  int cancel_fd_ = -1;
  // The sending thread's: its connection stays open between requests.
  HttpSession session_;
  absl::Time finish_deadline_ ABSL_GUARDED_BY(mu_) = absl::InfiniteFuture();
  // Failed attempts in a row at the request at the front.
  int failures_ ABSL_GUARDED_BY(mu_) = 0;
  // Requests refused for good in a row (their log lines are thinned out).
  uint64_t rejected_in_a_row_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_EXPORTER_H_

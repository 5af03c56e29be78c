// The push exporters together (docs/push.md): the daemon hands every pass
// of closed windows to Publish; one encoder thread turns each window end's
// windows into requests, once per protocol, and gives them to each
// endpoint's Exporter (exporter.h), which queues and sends them on a
// thread of its own. Neither the window timer nor ingestion nor a scrape
// ever waits on the network or on encoding: Publish moves the windows into
// a bounded inbox and returns.
//
// With a spool (spool.h: --state-dir), every pass is written to each
// endpoint's queue on disk and marked published before any of it is sent,
// and what the queues held at the last stop is queued again first.
//
// Thread-safe: Publish from any thread; Finish once, from the thread that
// started it.
#ifndef TORCHMON_SERVER_PUSH_PUSHER_H_
#define TORCHMON_SERVER_PUSH_PUSHER_H_

#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/clock.h"
#include "server/core/daemon_stats.h"
#include "server/core/types.h"
#include "server/push/exporter.h"
#include "server/push/push_options.h"
#include "server/push/spool.h"

namespace torchmon::server {

// What Pusher::Start checks before it starts anything: at most
// DaemonStats::kMaxExporters endpoints, and every file their options name
// readable. The status names the flag's URL and the file.
absl::Status CheckPushOptions(const PushOptions& options);

class Pusher {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // Checks (CheckPushOptions), then takes the stats slots of the
  // endpoints and starts the encoder and exporter threads. `version` names
  // the OTLP instrumentation scope's version.
  // the OTLP instrumentation scope's version. With `spool`, the queues
  // it holds are loaded first.
  static absl::StatusOr<std::unique_ptr<Pusher>> Start(const PushOptions& options,
                                                       DaemonStats& stats, const Clock& clock,
                                                       LogFn log, std::string version,
                                                       std::unique_ptr<PushSpool> spool = nullptr);
  // Finish() if it was not called.
  ~Pusher();

  // The windows one pass of the timer closed. Returns at once. If the
  // encoder is behind by more than options.queue_windows passes, the
  // oldest pass waiting is dropped and counted (queue_full) for every
  // endpoint. `position`: the journal's after the closes of the pass
  // (with a spool; 0 otherwise).
  void Publish(std::vector<ClosedWindow> windows, uint64_t position = 0) ABSL_LOCKS_EXCLUDED(mu_);

  // Returns once every pass published so far is encoded and, with a spool,
  // on disk.
  void AwaitWritten() ABSL_LOCKS_EXCLUDED(mu_);

  // Encodes what was published, then gives the exporters until
  // options.flush_timeout_ms to send what they hold; what is left is
  // dropped and counted (shutdown). Stops every thread.
  void Finish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Pass {
    std::vector<ClosedWindow> windows;
    uint64_t position = 0;
  };
  Pusher(const PushOptions& options, DaemonStats& stats, const Clock& clock, LogFn log,
         std::string version, std::unique_ptr<PushSpool> spool);
  void Run() ABSL_LOCKS_EXCLUDED(mu_);
  // Encodes one pass by window end, writes it to the spool and hands it
  // out.
  void Encode(Pass& pass);

  const PushOptions options_;
  DaemonStats& stats_;
  const LogFn log_;
  const std::string version_;
  std::vector<std::unique_ptr<Exporter>> exporters_;
  std::vector<DaemonStats::Exporter*> slots_;
  const std::unique_ptr<PushSpool> spool_;
  const Clock& clock_;

  absl::Mutex mu_;
  std::deque<Pass> inbox_ ABSL_GUARDED_BY(mu_);
  bool encoding_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_PUSHER_H_

// torchmond wired together: the aggregation core, the gRPC services (with
// health checking and reflection), the /metrics and /healthz endpoint, the
// window-closing timer and signal handling.
#ifndef TORCHMON_SERVER_DAEMON_DAEMON_H_
#define TORCHMON_SERVER_DAEMON_DAEMON_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "server/core/aggregator.h"
#include "server/sinks/sink_writer.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/daemon/options.h"
#include "server/daemon/security.h"
#include "server/daemon/unix_acceptor.h"
#include "server/identity/peer_directory.h"
#include "server/core/broadcaster.h"
#include "server/core/daemon_stats.h"
#include "server/query/health_service.h"
#include "server/ingest/ingest_service.h"
#include "server/ingest/job_claims.h"
#include "server/exposition/metrics_exposition.h"
#include "server/exposition/metrics_http_server.h"
#include "server/query/query_service.h"
#include "server/push/pusher.h"

namespace torchmon::server {

// What Daemon::Start() checks before it binds anything: reads the files the
// security flags name and looks up --user and --socket-group. For
// torchmond --check-config; the status names the flag and file at fault.
absl::Status CheckStartable(const DaemonOptions& options);

// Exit statuses of torchmond (docs/operating.md). A usage or configuration
// file error, found before anything starts, exits kExitUsage; a start that
// failed on the configuration or on permissions (a file or directory that
// is missing, unreadable or not writable, an unknown --user, a socket
// directory someone else controls) exits kExitConfig, EX_CONFIG of
// sysexits.h: restarting cannot fix either, and the shipped systemd unit
// does not (RestartPreventExitStatus). Anything else that stopped the
// start (an address in use, a resource short) may pass: kExitStartFailed,
// restarted.
inline constexpr int kExitStartFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitConfig = 78;

// How often each kind of client mistake is summed up in the log, at most
// (RateLimitedLog).
inline constexpr int64_t kClientLogIntervalMs = 60'000;

// The exit status for a Start() that failed with `status`.
int StartFailureExitStatus(const absl::Status& status);

// Not thread-safe except RequestStop(). Start once, Run once.
class Daemon {
 public:
  // `clock` is the daemon's "now" everywhere (windows, expiry, events,
  // clients): main() passes the system clock, tests may pass a ManualClock.
  // It must outlive the daemon.
  Daemon(DaemonOptions options, const Clock& clock);
  ~Daemon();

  // Reads the files the security flags name, binds every listener and,
  // with --user, switches to that user; then reports SERVING (grpc.health.v1
  // for "", torchmon.v1.Ingest and torchmon.v1.Query; /healthz). On failure
  // nothing is left listening and the status names the flag or address that
  // failed. Logs SecurityWarnings to stderr.
  absl::Status Start();

  // "torchmond ready grpc=<addr>[,<addr>...] metrics=<host:port>", with the
  // real bound ports. Valid after Start().
  std::string ReadyLine() const;

  // Closes windows on time until SIGTERM/SIGINT or RequestStop(), then shuts
  // down: reports NOT_SERVING (grpc.health.v1, /healthz), stops accepting,
  // lets open streams deliver for --drain-timeout, closes every open window
  // as partial, writes and flushes the sinks. Returns when done. SIGHUP
  // meanwhile reopens the sink files.
  void Run();

  void RequestStop();

 private:
  void ScheduleTick();
  void Tick();
  void PublishClosed(const ClosedWindow& window);
  void CloseDueWindows();
  void Shutdown();
  // At shutdown: waits (until `cap`) for the watchers to take every queued
  // item, then gives their clients a moment to read before streams end.
  void LetWatchersRead(absl::Time cap);
  // Waits for the next SIGHUP, which reopens the sink files.
  void WaitForHangup();

  const DaemonOptions options_;
  const Clock& clock_;
  DaemonStats stats_;
  Aggregator aggregator_;
  EventLog events_;
  Broadcaster<ClosedWindow> windows_out_;
  Broadcaster<EventRecord> events_out_;
  // With --peer-labels: who is on the other end of each Unix connection.
  PeerDirectory peers_;
  // With --peer-labels: which user each job label belongs to.
  JobClaims jobs_;
  IngestService ingest_service_;
  QueryService query_service_;
  HealthService health_service_;
  MetricsExposition exposition_;
  LivePage live_page_;

  // Credentials of the listeners; outlives the server that uses them.
  std::unique_ptr<ServerSecurity> security_;
  std::unique_ptr<grpc::Server> server_;
  // With --peer-labels: the Unix sockets, accepted here (unix_acceptor.h).
  std::vector<std::unique_ptr<UnixAcceptor>> acceptors_;
  std::unique_ptr<MetricsHttpServer> metrics_server_;
  std::unique_ptr<SinkWriter> sinks_;  // null without --jsonl-file / --tensorboard-dir
  std::unique_ptr<Pusher> pusher_;  // null without --remote-write-url / --otlp-endpoint
  std::unique_ptr<state::StateStore> state_;  // null without --state-dir
  // Held for a whole pass of closes and its Publish, and by a snapshot
  // until the pusher has written what was published (StateStore's
  // barrier): no snapshot falls between a pass's closes and its windows on
  // disk, so a restart finds them in the journal or in the push queues.
  absl::Mutex publish_mu_;
  std::vector<std::string> grpc_addresses_;

  boost::asio::io_context io_;
  boost::asio::steady_timer timer_;
  boost::asio::signal_set signals_;
  boost::asio::signal_set hangup_;
  // Set on io_'s thread when a stop is asked for; no tick is scheduled after.
  bool stopping_ = false;
  int64_t next_expiry_ms_ = 0;
  // Streams ended plus series expired, as last seen by Tick; when the next
  // malloc trim is due (0: none pending) and when the last one ran.
  uint64_t released_seen_ = 0;
  int64_t trim_due_ms_ = 0;
  int64_t last_trim_ms_ = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_DAEMON_H_

// Self-metrics of the daemon, updated by the services and read by the
// exposition. Plain relaxed atomics: each is an independent counter.
#ifndef TORCHMON_SERVER_CORE_DAEMON_STATS_H_
#define TORCHMON_SERVER_CORE_DAEMON_STATS_H_

#include <atomic>
#include <cstdint>
#include <string>

namespace torchmon::server {

// The connections of the metrics port (server/exposition/http_server.h).
struct HttpCounters {
  std::atomic<uint64_t> accepted{0};
  std::atomic<int64_t> open{0};  // held now
  // Closed to make room under a bound on connections, per address or in
  // total; refused at accept when every held one was being answered.
  std::atomic<uint64_t> evicted{0};
  std::atomic<uint64_t> refused{0};
  // Closed for a request not whole in time, an idle keep-alive past its
  // time, or a response send without progress.
  std::atomic<uint64_t> timed_out{0};
  // Answered 4xx before any handler: malformed, too large, unsupported.
  std::atomic<uint64_t> bad_requests{0};
};

struct DaemonStats {
  std::atomic<int64_t> ingest_streams_active{0};
  std::atomic<uint64_t> ingest_streams_total{0};
  std::atomic<uint64_t> batches_received{0};
  std::atomic<uint64_t> batches_with_errors{0};
  std::atomic<uint64_t> samples_received{0};
  // Samples refused with their batch part (unknown or refused stat, bad block).
  std::atomic<uint64_t> samples_refused{0};
  std::atomic<uint64_t> definitions_refused{0};
  // New series refused by a cardinality limit: one stream's, or the total.
  std::atomic<uint64_t> series_refused_stream_limit{0};
  std::atomic<uint64_t> series_refused_total_limit{0};
  // Series redefined once every Stat of their old definition was gone.
  std::atomic<uint64_t> series_redefined{0};
  // Batches a client re-sent after a broken stream that had been applied
  // already: acknowledged, not applied again.
  std::atomic<uint64_t> batches_duplicate{0};
  // Ingest streams refused because --max-streams were open.
  std::atomic<uint64_t> streams_refused{0};
  std::atomic<uint64_t> events_received{0};
  std::atomic<uint64_t> events_refused{0};
  std::atomic<uint64_t> windows_closed{0};
  std::atomic<uint64_t> series_expired{0};
  std::atomic<int64_t> watchers_active{0};
  // Items a slow watcher missed because its queue was full.
  std::atomic<uint64_t> watch_items_dropped{0};
  std::atomic<uint64_t> queries{0};
  // Scrapes of /metrics completed, their bytes, and how long the latest took.
  std::atomic<uint64_t> scrapes{0};
  std::atomic<uint64_t> scrape_bytes{0};
  std::atomic<int64_t> last_scrape_duration_us{0};
  // Refused for want of credentials: gRPC calls without a valid token
  // (--auth-token-file), scrapes without valid basic auth (--metrics-auth-file).
  std::atomic<uint64_t> rpcs_unauthenticated{0};
  std::atomic<uint64_t> scrapes_unauthorized{0};
  // gRPC calls turned away unchecked: their peer failed the token check too
  // often lately (FailureThrottle).
  std::atomic<uint64_t> rpcs_throttled{0};
  // Requests for /metrics (and the live page) turned away unchecked: their
  // peer failed too often lately (FailureThrottle).
  std::atomic<uint64_t> scrapes_throttled{0};
  // TLS handshakes on the metrics port that torchmond ended with a fatal
  // alert (--web-config-file): a client certificate refused, no shared
  // protocol version.
  std::atomic<uint64_t> metrics_tls_refused{0};
  HttpCounters http;
  // Credential files SIGHUP could not re-read (the old ones stay in force).
  std::atomic<uint64_t> reloads_failed{0};
  // With --peer-labels: labels a client sent that the daemon sets itself
  // (refused), and Unix connections closed because their peer could not be
  // identified; job labels refused because another user's streams hold the
  // job (JobClaims).
  std::atomic<uint64_t> labels_refused_vouched{0};
  std::atomic<uint64_t> labels_refused_job{0};
  std::atomic<uint64_t> connections_unidentified{0};
  std::atomic<int64_t> start_time_ms{0};
  // --state-dir (server/state/state_store.h): journal bytes written,
  // snapshots written and the size of the last, writes that failed, and
  // files or torn records set aside at the start.
  std::atomic<uint64_t> state_journal_bytes{0};
  std::atomic<uint64_t> state_snapshots{0};
  std::atomic<int64_t> state_snapshot_bytes{0};
  std::atomic<uint64_t> state_write_errors{0};
  std::atomic<uint64_t> state_skipped{0};
  // The daemon's file outputs (the sinks, docs/sinks.md), each under the
  // name it gives itself when it starts (`name` set, then `enabled`); the
  // exposition shows the enabled ones, labelled by name.
  struct Output {
    std::atomic<bool> enabled{false};
    std::atomic<const char*> name{""};
    std::atomic<uint64_t> records{0};  // lines or events written
    std::atomic<uint64_t> dropped{0};  // lost to a full queue
    std::atomic<uint64_t> errors{0};   // records a write error lost
  };
  static constexpr int kMaxOutputs = 4;
  Output outputs[kMaxOutputs];

  // The push exporters (--remote-write-url, --otlp-endpoint; docs/push.md),
  // each set up before the daemon serves (`protocol` and `endpoint` set,
  // then `enabled`); the exposition shows the enabled ones. Windows are
  // counted per series: one series' closed window is one.
  enum ExportDropReason { kExportQueueFull = 0, kExportRejected = 1, kExportShutdown = 2 };
  static constexpr int kExportDropReasons = 3;
  struct Exporter {
    std::atomic<bool> enabled{false};
    std::atomic<const char*> protocol{""};  // "remote_write", "otlp"
    // Its URL: written once before `enabled` is set, read only once it is
    // seen set, so it needs no lock, and it lives as long as the stats
    // (a scrape during shutdown never reads a URL freed with its exporter).
    std::string endpoint;
    std::atomic<uint64_t> sent_windows{0};
    std::atomic<uint64_t> sent_requests{0};
    std::atomic<uint64_t> sent_bytes{0};    // request bodies, as sent (compressed)
    std::atomic<uint64_t> retried{0};       // requests sent again after a failure
    // Connections opened to the endpoint (each, for https, a TLS handshake).
    std::atomic<uint64_t> connections{0};
    std::atomic<uint64_t> dropped[kExportDropReasons] = {};
    // Window ends queued (the one being sent included), and when the
    // oldest of them was queued (daemon clock, Unix ms; 0 when none).
    std::atomic<int64_t> queued{0};
    std::atomic<int64_t> oldest_queued_ms{0};
  };
  static constexpr int kMaxExporters = 8;
  Exporter exporters[kMaxExporters];
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_DAEMON_STATS_H_

#include "server/exposition/self_metrics.h"

#include <atomic>

#include "absl/strings/str_cat.h"

namespace torchmon::server {
namespace {

template <typename T>
double Load(const std::atomic<T>& counter) {
  return static_cast<double>(counter.load(std::memory_order_relaxed));
}

// A metric without labels read from one DaemonStats field.
template <auto Field>
void Plain(const SelfMetricInputs& in, SelfMetricSampleFn sample) {
  sample("", Load(in.stats.*Field));
}

// One sample per output (sink) the daemon runs, labelled by its name.
template <auto Counter>
void PerSink(const SelfMetricInputs& in, SelfMetricSampleFn sample) {
  for (const DaemonStats::Output& output : in.stats.outputs) {
    if (output.enabled.load(std::memory_order_acquire)) {
      sample(output.name.load(std::memory_order_relaxed), Load(output.*Counter));
    }
  }
}

const SelfMetric kSelfMetrics[] = {
    {"torchmon_daemon_build_info", "gauge", "version",
     "Always 1; the version label names the build.", "always 1",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) { sample(in.version, 1); }},
    {"torchmon_daemon_start_time_seconds", "gauge", "", "When the daemon started, Unix seconds.",
     "start time, Unix seconds",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("", Load(in.stats.start_time_ms) / 1000.0);
     }},
    {"torchmon_daemon_series", "gauge", "", "Series held in memory.", "series in memory",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("", static_cast<double>(in.series));
     }},
    {"torchmon_daemon_clients", "gauge", "", "Open ingest streams.", "open ingest streams",
     Plain<&DaemonStats::ingest_streams_active>},
    {"torchmon_daemon_watchers", "gauge", "", "Open WatchWindows/WatchEvents streams.",
     "open watch streams", Plain<&DaemonStats::watchers_active>},
    {"torchmon_daemon_events_retained", "gauge", "", "Events held in the event log.",
     "events held in the event log",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("", static_cast<double>(in.events_retained));
     }},
    {"torchmon_daemon_streams_total", "counter", "", "Ingest streams opened.",
     "ingest streams opened", Plain<&DaemonStats::ingest_streams_total>},
    {"torchmon_daemon_batches_total", "counter", "", "Ingest batches received.",
     "ingest batches received", Plain<&DaemonStats::batches_received>},
    {"torchmon_daemon_batches_with_errors_total", "counter", "",
     "Ingest batches of which some part was refused.", "batches of which some part was refused",
     Plain<&DaemonStats::batches_with_errors>},
    {"torchmon_daemon_samples_received_total", "counter", "", "Samples received in ingest batches.",
     "samples received", Plain<&DaemonStats::samples_received>},
    {"torchmon_daemon_samples_refused_total", "counter", "",
     "Samples refused with their batch part (unknown or refused stat, malformed block); not "
     "counted in any series.",
     "samples refused with their batch part (unknown or refused stat, malformed block); in no "
     "series",
     Plain<&DaemonStats::samples_refused>},
    {"torchmon_daemon_definitions_refused_total", "counter", "",
     "Stat definitions refused (invalid, conflicting or over a series limit).",
     "stat definitions refused: invalid, conflicting, or over a series limit",
     Plain<&DaemonStats::definitions_refused>},
    {"torchmon_daemon_series_redefined_total", "counter", "",
     "Series redefined once no Stat of their old definition was alive.",
     "series redefined once no Stat of their old definition was alive: the old definition's "
     "open windows closed early "
     "([semantics](semantics.md#redefining-a-stat))",
     Plain<&DaemonStats::series_redefined>},
    {"torchmon_daemon_batches_duplicate_total", "counter", "",
     "Batches a client re-sent after a broken stream that were applied already; acknowledged, "
     "not applied again.",
     "batches a client re-sent after a broken stream that had been applied already: "
     "acknowledged, not applied again "
     "([reliability](reliability.md#delivery-at-most-once-per-daemon-process))",
     Plain<&DaemonStats::batches_duplicate>},
    {"torchmon_daemon_streams_refused_total", "counter", "",
     "Ingest streams refused because --max-streams were open.",
     "ingest streams refused because `--max-streams` were open (the client retries with "
     "backoff)",
     Plain<&DaemonStats::streams_refused>},
    {"torchmon_daemon_events_received_total", "counter", "", "Events received.", "events received",
     Plain<&DaemonStats::events_received>},
    {"torchmon_daemon_events_refused_total", "counter", "", "Events refused as invalid.",
     "invalid events refused", Plain<&DaemonStats::events_refused>},
    {"torchmon_daemon_windows_closed_total", "counter", "", "Windows closed.", "windows closed",
     Plain<&DaemonStats::windows_closed>},
    {"torchmon_daemon_series_expired_total", "counter", "", "Series forgotten after the idle TTL.",
     "series removed after the idle TTL", Plain<&DaemonStats::series_expired>},
    {"torchmon_daemon_state_journal_bytes_total", "counter", "",
     "Bytes written to the state directory's journal (--state-dir).",
     "bytes written to the journal of `--state-dir` "
     "([operating](operating.md#the-state-directory-size-and-place))",
     Plain<&DaemonStats::state_journal_bytes>},
    {"torchmon_daemon_state_snapshots_total", "counter", "",
     "Snapshots of the state written to --state-dir.", "snapshots of the state written",
     Plain<&DaemonStats::state_snapshots>},
    {"torchmon_daemon_state_snapshot_bytes", "gauge", "",
     "Size of the last snapshot written, its history file included.",
     "size of the last snapshot written, its history file included, bytes",
     Plain<&DaemonStats::state_snapshot_bytes>},
    {"torchmon_daemon_state_write_errors_total", "counter", "",
     "Writes to --state-dir that failed (the state is kept again once a snapshot succeeds).",
     "writes to `--state-dir` that failed: what was acknowledged meanwhile survives a kill "
     "only once a later snapshot succeeds",
     Plain<&DaemonStats::state_write_errors>},
    {"torchmon_daemon_state_skipped_total", "counter", "",
     "State files or torn journal records skipped at start, never read into the state.",
     "state files (moved to `skipped/`) or torn journal records skipped at start, never read "
     "into the state",
     Plain<&DaemonStats::state_skipped>},
    {"torchmon_daemon_watch_dropped_total", "counter", "",
     "Windows and events a slow watcher missed because its queue was full.",
     "windows/events a slow watcher missed (its queue of 10 000 was full)",
     Plain<&DaemonStats::watch_items_dropped>},
    {"torchmon_daemon_queries_total", "counter", "", "Query RPCs served.", "query RPCs served",
     Plain<&DaemonStats::queries>},
    {"torchmon_daemon_rpcs_unauthenticated_total", "counter", "",
     "gRPC calls refused for a missing or wrong bearer token (--auth-token-file).",
     "gRPC calls refused for a missing or wrong bearer token (`--auth-token-file`, "
     "[security](security.md))",
     Plain<&DaemonStats::rpcs_unauthenticated>},
    {"torchmon_daemon_rpcs_throttled_total", "counter", "",
     "gRPC calls turned away unchecked (UNAVAILABLE): their peer failed the token check too "
     "often.",
     "gRPC calls turned away unchecked (UNAVAILABLE): their peer (address, or user on a Unix "
     "socket) failed the token check too often lately ([security](security.md#throttling))",
     Plain<&DaemonStats::rpcs_throttled>},
    {"torchmon_daemon_labels_refused_vouched_total", "counter", "",
     "Labels a client sent that torchmond sets itself from the kernel's word (--peer-labels).",
     "labels a client sent that torchmond sets itself from the kernel's word (`--peer-labels`, "
     "[security](security.md)): each refused with its definition, event or hello label",
     Plain<&DaemonStats::labels_refused_vouched>},
    {"torchmon_daemon_labels_refused_job_total", "counter", "",
     "Job labels refused because another user's streams hold that job (--peer-labels).",
     "`job` labels refused because another user's streams hold that job (`--peer-labels`, "
     "[security](security.md)): each refused with its definition, event or hello label",
     Plain<&DaemonStats::labels_refused_job>},
    {"torchmon_daemon_connections_unidentified_total", "counter", "",
     "Unix socket connections closed because their peer could not be identified (--peer-labels).",
     "Unix socket connections closed because their peer could not be identified (the process "
     "left before torchmond looked; `--peer-labels`)",
     Plain<&DaemonStats::connections_unidentified>},
    {"torchmon_daemon_scrapes_throttled_total", "counter", "",
     "Requests for /metrics turned away unchecked (429): their peer failed basic auth too often.",
     "requests for `/metrics` and the live page turned away unchecked (429, Retry-After): their "
     "address failed basic auth too often lately ([security](security.md#throttling))",
     Plain<&DaemonStats::scrapes_throttled>},
    {"torchmon_daemon_http_connections", "gauge", "", "Connections held open on the metrics port.",
     "connections held open on the metrics port ([security](security.md#slow-and-idle-peers))",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("", Load(in.stats.http.open));
     }},
    {"torchmon_daemon_http_connections_accepted_total", "counter", "",
     "Connections accepted on the metrics port.", "connections accepted on the metrics port",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("", Load(in.stats.http.accepted));
     }},
    {"torchmon_daemon_http_connections_closed_total", "counter", "reason",
     "Connections of the metrics port closed by torchmond before their peer was done.",
     "connections of the metrics port closed by torchmond before their peer was done: "
     "`evicted` (the oldest waiting one, to make room under the bound per address or in total), "
     "`refused` (at accept: every held one was being answered), `timed_out` (a request not whole "
     "10 s after its first byte, an idle keep-alive past 120 s, a response send stalled 10 s), "
     "`bad_request` (malformed, too large or not GET/HEAD; answered 4xx) "
     "([security](security.md#slow-and-idle-peers))",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       const HttpCounters& http = in.stats.http;
       sample("bad_request", Load(http.bad_requests));
       sample("evicted", Load(http.evicted));
       sample("refused", Load(http.refused));
       sample("timed_out", Load(http.timed_out));
     }},
    {"torchmon_daemon_metrics_tls_refused_total", "counter", "",
     "TLS handshakes on the metrics port refused (a client certificate not accepted, no common "
     "TLS version).",
     "TLS handshakes on the metrics port that torchmond ended with a fatal alert: a client "
     "certificate `client_auth_type` did not accept, no TLS version in common "
     "(`--web-config-file`; [security](security.md#metrics)); plain HTTP gets no alert and "
     "is not counted",
     Plain<&DaemonStats::metrics_tls_refused>},
    {"torchmon_daemon_reload_failures_total", "counter", "",
     "Credential files SIGHUP could not re-read; the ones read before stay in force.",
     "credential files (`--auth-token-file`, `--metrics-auth-file`, `--web-config-file` and the "
     "files it names, `--tls-cert` and `--tls-key`) a SIGHUP could not re-read; "
     "the ones read before stay in force and the log says why ([security](security.md#reloading))",
     Plain<&DaemonStats::reloads_failed>},
    {"torchmon_daemon_scrapes_unauthorized_total", "counter", "",
     "Requests for /metrics refused for missing or wrong basic auth.",
     "requests for `/metrics` refused for missing or wrong basic auth (`--web-config-file`'s "
     "`basic_auth_users` or `--metrics-auth-file`)",
     Plain<&DaemonStats::scrapes_unauthorized>},
    {"torchmon_daemon_scrapes_total", "counter", "", "Scrapes of /metrics served before this one.",
     "scrapes of `/metrics` served before this one", Plain<&DaemonStats::scrapes>},
    {"torchmon_daemon_scrape_bytes_total", "counter", "",
     "Bytes of /metrics sent before this scrape.", "bytes of `/metrics` sent before this scrape",
     Plain<&DaemonStats::scrape_bytes>},
    {"torchmon_daemon_last_scrape_duration_seconds", "gauge", "",
     "How long the previous scrape of /metrics took to render and send.",
     "how long the previous scrape took to render and send",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("", Load(in.stats.last_scrape_duration_us) / 1e6);
     }},
    {"torchmon_daemon_sink_records_total", "counter", "sink",
     "Records (JSON lines, TensorBoard events) the sink wrote and flushed.",
     "records the sink wrote and flushed (`sink` = `jsonl`: lines; `tensorboard`: scalar "
     "events); only for the sinks the daemon runs ([sinks](sinks.md))",
     PerSink<&DaemonStats::Output::records>},
    {"torchmon_daemon_sink_dropped_total", "counter", "sink",
     "Windows and events the sink lost because its queue was full (the disk too slow).",
     "windows/events the sink lost because its queue (100 000 per source) was full: the disk "
     "could not keep up",
     PerSink<&DaemonStats::Output::dropped>},
    {"torchmon_daemon_sink_errors_total", "counter", "sink",
     "Records the sink lost to a write error (disk full, file removed, permissions).",
     "records lost to a write error (disk full, permissions); the first error of a run is "
     "logged",
     PerSink<&DaemonStats::Output::errors>},
    {"torchmon_daemon_series_refused_total", "counter", "limit",
     "New series refused by a cardinality limit: one client's (--max-series-per-client) or the "
     "daemon's (--max-series).",
     "new series refused by a cardinality limit: `limit=\"per_client\"` "
     "(`--max-series-per-client`) or `limit=\"total\"` (`--max-series`); their samples are in "
     "`samples_refused` ([reliability](reliability.md#limits-of-the-daemon))",
     [](const SelfMetricInputs& in, SelfMetricSampleFn sample) {
       sample("per_client", Load(in.stats.series_refused_stream_limit));
       sample("total", Load(in.stats.series_refused_total_limit));
     }},
};

}  // namespace

absl::Span<const SelfMetric> SelfMetrics() { return kSelfMetrics; }

std::string SelfMetricsMarkdown() {
  std::string out = "| metric | type | meaning |\n|---|---|---|\n";
  for (const SelfMetric& m : kSelfMetrics) {
    const std::string label = *m.label != '\0' ? absl::StrCat("{", m.label, "}") : "";
    absl::StrAppend(&out, "| `", m.name, label, "` | ", m.type, " | ", m.meaning, " |\n");
  }
  return out;
}

}  // namespace torchmon::server

// torchmon C++ client: torch.monitor's Stat / Event API, recorded in the
// training process and aggregated out of process by torchmond.
//
//   torchmon::Stat loss("train.loss", {torchmon::Aggregation::MEAN},
//                       std::chrono::seconds(10));
//   loss.add(0.25);                              // never blocks, never throws
//   torchmon::log_event(torchmon::Event("epoch_end", {{"epoch", int64_t{3}}}));
//
// Thread-safety: Client, Stat and log_event may be used from any number of
// threads. Stat::add from several threads on the same Stat is safe. Nothing
// here throws but the Client constructor (a buffer_bytes out of bounds); the
// rest reports trouble through counts (dropped samples and events) and
// Client::TakeErrors().
#ifndef TORCHMON_CLIENT_H_
#define TORCHMON_CLIENT_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"

namespace torchmon {

namespace detail {
class ClientCore;
struct ClientBuffers;
struct StatState;
struct ClientInternals;
}  // namespace detail

// Mirrors torch.monitor.Aggregation, plus QUANTILE (see Quantile below).
enum class Aggregation : int {
  VALUE = 1, MEAN = 2, COUNT = 3, SUM = 4, MAX = 5, MIN = 6, QUANTILE = 7
};

// One aggregation of a Stat: one of torch.monitor's six (converted
// implicitly from Aggregation) or a quantile (made by Quantile()).
struct StatAggregation {
  StatAggregation(Aggregation a) : aggregation(a) {}  // NOLINT(google-explicit-constructor)
  StatAggregation(Aggregation a, double q) : aggregation(a), quantile(q) {}

  Aggregation aggregation;
  double quantile = 0;  // QUANTILE only
};

// The q-quantile of each window, estimated by the daemon within 1% relative
// error (docs/semantics.md): Quantile(0.99) is "p99". 0 < q < 1 with at most
// four decimals as a percentage (0.9999 is p99.99); a Stat with another
// value is refused like any invalid definition.
inline StatAggregation Quantile(double q) { return StatAggregation(Aggregation::QUANTILE, q); }

using Labels = std::vector<std::pair<std::string, std::string>>;

// torch.monitor's data_value_t: str, float, int or bool.
using EventValue = std::variant<std::string, double, int64_t, bool>;

// A named, timestamped event with typed data (torch.monitor.Event). A plain
// value: copy it, move it, share it read-only between threads.
struct Event {
  Event() = default;
  // Timestamp defaults to now (system_clock). Checks nothing: an event the
  // daemon would refuse is dropped when logged (Client::LogEvent).
  Event(std::string name, std::map<std::string, EventValue> data,
        std::chrono::system_clock::time_point timestamp = std::chrono::system_clock::now());

  std::string name;
  std::chrono::system_clock::time_point timestamp;
  std::map<std::string, EventValue> data;
  // Extra labels for this event, merged over the client's identity labels.
  Labels labels;
};

// How a client proves itself to the daemon and checks that it talks to the
// real one (docs/security.md). Each empty field is taken from the
// environment variable named beside it unless
// ClientOptions::security_from_environment is false.
struct ClientSecurity {
  // File whose first line (empty lines and '#' comments skipped) is the
  // daemon's bearer token ($TORCHMON_TOKEN_FILE). Read once, when the client
  // is made; sent as "authorization: Bearer <token>" on every call.
  std::string token_file;
  // The token itself, for a program that holds it already; wins over
  // token_file. Never taken from the environment.
  std::string token;
  // TLS, for TCP targets (Unix sockets stay plain): PEM CA certificates the
  // daemon's certificate must be signed by ($TORCHMON_TLS_CA). TLS is on
  // when this or tls_cert_file is set; without it gRPC's default roots are
  // used ($GRPC_DEFAULT_SSL_ROOTS_FILE_PATH, else /usr/share/grpc/roots.pem).
  std::string tls_ca_file;
  // PEM certificate and private key presented to a daemon started with
  // --tls-client-ca ($TORCHMON_TLS_CERT, $TORCHMON_TLS_KEY).
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name the daemon's certificate must carry, when it is not the
  // target's host ($TORCHMON_TLS_SERVER_NAME).
  std::string tls_server_name;
};

struct ClientOptions {
  // Daemon address: "unix:///abs/path" or "host:port". Empty: $TORCHMON_TARGET,
  // else the default socket (torchmon::protocol::DefaultSocketPath()).
  //
  // The client refuses to connect (and says why through TakeErrors and
  // stderr) when its security settings cannot be honoured: a file they name
  // cannot be read, a token would cross the network in clear text (a TCP
  // target other than loopback without TLS), or the default socket lies in
  // a directory another user controls.
  std::string target;
  ClientSecurity security;
  bool security_from_environment = true;
  // Identity labels. Merged over the environment's (see IdentityLabelsFromEnvironment)
  // unless labels_from_environment is false; these win on conflict.
  Labels labels;
  bool labels_from_environment = true;
  // The memory, in bytes, for samples between add() and the sender thread
  // (24 bytes a sample), shared by all the stats of this client according
  // to what they send: samples wait in a log per adding thread, which takes
  // a 4 KiB chunk on its first add, chunks each four times larger while the
  // sender falls behind, and gives them back once drained (the last one
  // once idle for a second). A stat holds no sample memory of its own. One
  // thread's log holds at most 32 chunks, and the last eighth of the budget
  // only serves logs taking their first chunk, so a thread flooding a stat
  // cannot keep the other threads from buffering (its own other stats share
  // its log until the sender drains it). When no room is left, add() drops
  // and counts the sample (Stat::dropped, reported to the daemon).
  // The budget is reserved as address space and becomes resident only as
  // it is used. At least kMinBufferBytes, or the Client constructor throws
  // std::invalid_argument.
  size_t buffer_bytes = size_t{32} << 20;
  static constexpr size_t kMinBufferBytes = size_t{2} << 20;
  // Events buffered while waiting to be sent; beyond this they are dropped
  // and counted (Client::Stats().events_dropped).
  size_t max_buffered_events = 10000;
  // The longest gap between two batches while the stats are quiet. Busy
  // stats shorten it (the sender paces by the fastest-filling buffer, and
  // looks at the buffers every 25 ms for bursts); Flush() sends at once.
  // Each batch costs ~0.25 ms of CPU in gRPC whatever it carries, so a
  // shorter interval costs a training process CPU for nothing.
  std::chrono::milliseconds send_interval{100};
  // Batches written but not yet acknowledged are kept, up to about this many
  // bytes, and re-sent on the next stream if the connection breaks first (the
  // daemon applies each batch once). At the bound the sender waits for acks
  // while add() keeps filling the sample budget (buffer_bytes, shared by the
  // adding threads' logs), then drops and counts.
  size_t max_unacked_bytes = size_t{16} << 20;
  // Reconnect backoff: starts at initial_backoff, doubles up to max_backoff,
  // each delay drawn with +-20% jitter so that the ranks of a job spread out.
  std::chrono::milliseconds initial_backoff{50};
  std::chrono::milliseconds max_backoff{5000};
  // How long the destructor waits to deliver what is buffered.
  std::chrono::milliseconds destructor_flush_timeout{2000};
  // Shown in daemon logs; never a label.
  std::string client_name;
  // Print refusals and connection problems to stderr (each distinct message
  // once). Tools that report errors themselves turn this off; the messages
  // are always available from Client::TakeErrors().
  bool log_to_stderr = true;
};

// Counters of one Client, all cumulative since construction.
// Once quiescent after a successful Flush:
//   samples_added = samples_delivered + samples_dropped,
//   events_logged = events_delivered + events_dropped.
struct ClientStats {
  uint64_t samples_added = 0;      // add() calls on all its Stats
  uint64_t samples_sent = 0;       // samples written to a daemon stream (re-sends not counted)
  uint64_t samples_delivered = 0;  // samples a daemon acknowledged
  uint64_t samples_dropped = 0;    // dropped by the client (buffer full, client stopped)
  uint64_t events_logged = 0;
  uint64_t events_sent = 0;
  uint64_t events_delivered = 0;
  uint64_t events_dropped = 0;
  uint64_t batches_sent = 0;       // first writes only
  uint64_t batches_resent = 0;     // written again on a new stream after a break
  uint64_t batches_acked = 0;
  uint64_t errors = 0;             // parts of batches the daemon refused
  uint64_t connects = 0;           // streams opened successfully
  uint64_t daemon_restarts = 0;    // times the acks came from a new daemon process
};

// One Stat's accounting. Once no add() is in progress and a Flush has
// succeeded: added = delivered + dropped, and dropped = drops_reported.
struct StatCounters {
  uint64_t added = 0;           // add() calls
  uint64_t dropped = 0;         // discarded by the client (buffer full, client stopped)
  uint64_t delivered = 0;       // samples a daemon acknowledged
  uint64_t drops_reported = 0;  // of `dropped`, counts a daemon acknowledged
  // Of delivered and drops_reported, what the daemon process the client
  // talks to now acknowledged. A daemon that restarts starts from nothing;
  // the new process's accepted + capped + late + skewed + client_dropped
  // for the series add up to the sum of these two (docs/reliability.md).
  uint64_t delivered_to_current_daemon = 0;
  uint64_t drops_reported_to_current_daemon = 0;
};

// Owns the connection to torchmond, the sample budget, and the threads that
// send batches (one) and read acknowledgements (one per stream). Thread-safe:
// every member may be called from any thread at once.
class Client {
 public:
  // Starts the sender thread, which connects in the background: never
  // waits for the daemon. Throws std::invalid_argument for a buffer_bytes
  // outside [kMinBufferBytes, the most one process may reserve]; any other
  // option that cannot work (an unparsable target, credentials that cannot
  // be read) is kept for TakeErrors() and printed once, and the client then
  // buffers, drops and counts as with a daemon that is down.
  explicit Client(ClientOptions options = {});
  // Flushes what is buffered (waiting at most destructor_flush_timeout),
  // stops the threads and counts whatever is still undelivered as dropped.
  // Stats created on it stay valid: their add() counts every sample as
  // dropped from then on. No other member of this Client may be running or
  // start on another thread. In a child forked from the process that made
  // the Client, whose threads fork did not copy, it neither flushes nor
  // joins: the client's memory is left to the child's exit.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The process-wide client used by Stat and log_event when none is given,
  // made with default ClientOptions (target, security and labels from the
  // environment) on first use, thread-safely, and destroyed, so flushed, at
  // exit (static destruction). Never throws.
  static Client& Default();

  // Waits until everything added or logged before the call has been
  // acknowledged by the daemon, across reconnects if the stream breaks
  // meanwhile, and so has the release of every Stat destroyed before the
  // call: a Stat made again with another definition has it applied, its
  // samples in the series (docs/semantics.md, "Redefining a stat"). OK on
  // success; DeadlineExceeded if `timeout` passed first (nothing is lost:
  // buffered samples stay queued); Unauthenticated or PermissionDenied at
  // once if the daemon refused this client's token or certificate. Never
  // waits longer than `timeout`. Blocks the calling
  // thread only: add() on any thread goes on meanwhile, and what is added
  // after the call is not waited for. Thread-safe.
  absl::Status Flush(std::chrono::milliseconds timeout);

  // Logs an event (torch.monitor.log_event): checks it against the daemon's
  // limits (name, data keys and values, labels, at most 1 MiB encoded),
  // converts it and queues it for the sender, under the client's lock.
  // Never blocks on I/O. An event the daemon would refuse is dropped and
  // counted (ClientStats::events_dropped) with the reason kept for
  // TakeErrors(); one that finds max_buffered_events queued is dropped and
  // counted, and the drop is reported to the daemon by name. Thread-safe.
  void LogEvent(const Event& event);

  // The client's counters, consistent with one another (see ClientStats).
  // Takes the client's lock and walks every stat ever registered on it:
  // O(stats), for reports and tests, not for a training step's hot path.
  // Thread-safe.
  ClientStats Stats() const;

  // The errors not yet taken, oldest first, as "CODE: message": the
  // daemon's refusals (IngestError), a stream refused for its credentials,
  // and what the client refused itself (an invalid Stat, event or label, a
  // target or credentials it will not use). At most the 1000 most recent
  // are kept. Thread-safe; each error is returned once.
  std::vector<std::string> TakeErrors();

  // The resolved target and identity labels. Fixed at construction, so
  // thread-safe and free.
  const std::string& target() const;
  const Labels& labels() const;

 private:
  friend class Stat;
  // Builds a Client around a core made otherwise (the library's own tests:
  // a core on a manual clock).
  friend struct detail::ClientInternals;
  explicit Client(std::shared_ptr<detail::ClientCore> core);
  std::shared_ptr<detail::ClientCore> core_;
};

// Now, in microseconds since the Unix epoch, from the clock Stat::add(value)
// stamps samples with: the invariant TSC where there is one, calibrated
// against CLOCK_REALTIME by the clients' sender threads (within 50 us of it),
// else clock_gettime. Never blocks or makes a syscall where the TSC is used.
int64_t WallMicros() noexcept;

// A Stat's definition beyond torch.monitor's name, aggregations and window.
struct StatOptions {
  // Samples accepted per window, the rest counted as capped; 0 = unlimited.
  int64_t max_samples = 0;
  // The stat's labels, added to the client's identity labels.
  Labels labels;
  // Keep a Prometheus native histogram of every sample the series accepts
  // (torchmon_stat_distribution on /metrics, docs/metrics.md), which PromQL
  // sums across ranks and nodes into the job's quantiles. Implied by a
  // Quantile() among the aggregations. With it the aggregations may be
  // empty: a histogram and nothing per window.
  bool histogram = false;
  // The window a torch.monitor-shaped Stat was asked for, where the
  // daemon holds another (protocol::DaemonWindowMs: below 10 ms or above
  // 31 days) and window_size is that one; 0: none. Only shown with the
  // series' definition (docs/semantics.md, "Windows the daemon cannot
  // hold"); must round to window_size, or the Stat is invalid.
  std::chrono::milliseconds requested_window{0};
};

// A stat recorded in windows by the daemon (torch.monitor.Stat). Thread-safe:
// add() and the counts may be called from any number of threads at once.
// Stats with the same name and labels, in any process, feed one series if
// their definitions agree; the daemon refuses a conflicting definition
// while a Stat of the first is alive, and takes it as the series' new
// definition once none is (docs/semantics.md, "Redefining a stat"): a Stat
// made again with another window or cap after the old one is destroyed.
class Stat {
 public:
  // max_samples: cap per window; 0 = unlimited. aggregations may mix the
  // six and quantiles: {Aggregation::MEAN, Quantile(0.5), Quantile(0.99)}.
  //
  // Never throws for a bad definition. One the client refuses (a name,
  // label, aggregation, quantile, window or cap outside the protocol's
  // limits, or a client holding 2^24 - 1 Stats already: alive, or
  // destroyed with samples not yet acknowledged) makes a Stat that never
  // reaches the daemon: add() drops and counts every sample (dropped() ==
  // added()), and the reason is kept as "INVALID_ARGUMENT: stat ... is
  // invalid ..." for Client::TakeErrors() (and printed once to stderr when
  // ClientOptions::log_to_stderr). A definition the daemon refuses (one
  // that conflicts with the series' definition while a Stat of that is
  // alive) is sent and refused there: its samples count as delivered here
  // and as refused on the daemon, and the refusal reaches
  // Client::TakeErrors().
  //
  // Takes the client's lock; while a daemon is connected and 65,536
  // destroyed Stats wait for the client to send and release them, waits
  // for that (100 ms at most): a loop that makes and destroys Stats faster
  // than that is paced, so that what they hold meanwhile stays bounded.
  Stat(Client& client, std::string name, std::vector<StatAggregation> aggregations,
       std::chrono::milliseconds window_size, int64_t max_samples = 0, Labels labels = {});
  // Uses Client::Default().
  Stat(std::string name, std::vector<StatAggregation> aggregations,
       std::chrono::milliseconds window_size, int64_t max_samples = 0, Labels labels = {});
  // The same, with what torch.monitor has no parameter for, a histogram:
  //
  //   StatOptions options;
  //   options.histogram = true;
  //   Stat step("train.step_ms", {Aggregation::MEAN}, std::chrono::seconds(10), options);
  Stat(Client& client, std::string name, std::vector<StatAggregation> aggregations,
       std::chrono::milliseconds window_size, StatOptions options);
  // Uses Client::Default().
  Stat(std::string name, std::vector<StatAggregation> aggregations,
       std::chrono::milliseconds window_size, StatOptions options);
  // Never blocks. The samples already added still go out; once they have,
  // the client releases its definition on the daemon
  // (IngestBatch.released), so a Stat made again under the same name and
  // labels may define the series anew, and once that is acknowledged its
  // id and memory serve the next Stat. One destroyed before the client's
  // next send cycle with nothing recorded never reaches the daemon. No
  // add() on this Stat may be running or start on another thread (as for
  // any object being destroyed).
  ~Stat();
  Stat(const Stat&) = delete;
  Stat& operator=(const Stat&) = delete;

  // Records a sample stamped now: writes it to the calling thread's log in
  // the client's budget (a few ns; docs/performance.md). Never blocks,
  // throws, allocates or makes a syscall; when the budget is full, the
  // client stopped or the Stat is invalid, the sample is dropped and
  // counted (dropped(), reported to the daemon). Any value goes, NaN and
  // infinities included.
  void add(double value) noexcept;
  // Records a sample with an explicit timestamp (Unix microseconds; see
  // WallMicros for the clock add(value) uses), with add(value)'s cost and
  // guarantees. The daemon counts a stamp past its window's grace as late
  // and one too far ahead as skewed.
  void add(double value, int64_t timestamp_us) noexcept;

  // The name given. Free.
  const std::string& name() const;
  // Samples added through this Stat, and how many of them were dropped by
  // the client so far. added() walks the samples still buffered in the
  // client's logs under the sender's drain lock (O(buffered samples), and it
  // holds the sender off meanwhile): for reports and tests, not a training
  // step. dropped() is a few atomic loads, and the same walk only once the
  // client has stopped.
  uint64_t added() const;
  uint64_t dropped() const;
  // Every count at once, with added()'s cost (not one atomic snapshot
  // while add() runs: the acknowledged counts are read first, so they never
  // exceed the others).
  StatCounters counters() const;

 private:
  std::shared_ptr<detail::StatState> state_;
  // What add() needs, kept here so that it reads only this object and its
  // thread's log, not the stat's state: the buffers of a valid stat's
  // client (null for an invalid stat; kept alive by state_), and its id.
  detail::ClientBuffers* buffers_;
  uint32_t id_;
};

// Logs an event on Client::Default(): Client::LogEvent's cost, failures and
// thread-safety.
void log_event(const Event& event);

// Identity labels from the environment, in increasing precedence:
// host (hostname); SLURM_JOB_ID→job, SLURM_PROCID→rank, SLURM_LOCALID→local_rank;
// TORCHELASTIC_RUN_ID→job, RANK→rank, LOCAL_RANK→local_rank; TORCHMON_LABELS (k=v,k=v).
// An invalid TORCHMON_LABELS entry is reported on stderr once and ignored.
// Reads the environment each call (getenv: not safe against a setenv on
// another thread meanwhile, as any getenv).
Labels IdentityLabelsFromEnvironment();

}  // namespace torchmon

#endif  // TORCHMON_CLIENT_H_

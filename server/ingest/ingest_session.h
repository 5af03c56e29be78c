// The state of one ingest stream and the rules for applying its batches:
// decoding packed samples, binding per-stream stat ids to series, and
// refusing bad parts with a message that names them while applying the rest.
// No gRPC here, so it can be tested and fuzzed directly.
//
// Thread-compatible: one session per stream, used by one thread at a time.
#ifndef TORCHMON_SERVER_INGEST_INGEST_SESSION_H_
#define TORCHMON_SERVER_INGEST_INGEST_SESSION_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/core/broadcaster.h"
#include "server/ingest/client_registry.h"
#include "server/ingest/job_claims.h"
#include "server/core/daemon_stats.h"
#include "server/core/rate_limited_log.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::server {

struct IngestLimits {
  // Series one stream may bind (its cardinality budget); 0: no limit beyond
  // the aggregator's total.
  size_t max_series_per_stream = 100'000;
  // IngestErrors listed per batch; past it one more says how many were left
  // out, so an ack stays small whatever a batch holds.
  int max_errors_per_batch = 100;
  // A definition that conflicts only with this stream's own bindings waits
  // for them to be released (IngestBatch.released), its samples held, for
  // at most this long (daemon clock) and this many samples per stream;
  // then it is refused as a conflict, the samples held with it.
  int64_t redefinition_wait_ms = 10'000;
  size_t max_samples_waiting = 1 << 18;
};

// What the daemon says of a stream's client where it can vouch for it
// (torchmond --peer-labels; docs/security.md): labels no client can forge,
// taken from the kernel's word on the connection (its user, its cgroup).
struct VouchedIdentity {
  // Added to every series and event of the stream; sorted by name. Empty
  // where nothing could be derived (a TCP client).
  Labels labels;
  // Every name the daemon vouches for, derived here or not: a client that
  // sends one of them is refused, naming it.
  std::vector<std::string> reserved;
  // The stream's user ("" where it cannot be derived), and, when set, the
  // register of which user each `job` label belongs to: the stream may use
  // a job only while no other user's stream does (JobClaims). Must
  // outlive the session.
  std::string owner;
  JobClaims* jobs = nullptr;
};

class IngestSession {
 public:
  // `events_out` (may be null) receives every event appended to `events`.
  // `clients` (may be null) is where a client that names its instance in
  // the hello is remembered; without it every batch is applied.
  // `log` (may be null) gets a line when a series is redefined.
  // `vouched`, when set, is added to every series and event of the stream,
  // and its reserved names are refused in the client's labels.
  IngestSession(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                Broadcaster<EventRecord>* events_out, IngestLimits limits = {},
                ClientRegistry* clients = nullptr, RateLimitedLog* log = nullptr,
                std::optional<VouchedIdentity> vouched = std::nullopt);
  // Releases the stream's bindings (the stream ended), then applies or
  // refuses the definitions still waiting (see IngestLimits).
  ~IngestSession();
  IngestSession(const IngestSession&) = delete;
  IngestSession& operator=(const IngestSession&) = delete;

  // Applies `batch`; sets ack->sequence and appends an IngestError to `ack`
  // for every part refused. Never fails as a whole. Samples of a definition
  // waiting for this stream to release an older one are held, neither
  // accepted nor refused yet (IngestLimits::redefinition_wait_ms). A batch of a known
  // client whose sequence (non-zero) is not above the newest one applied
  // for that client is a re-send: acknowledged, not applied again.
  void Apply(const v1::IngestBatch& batch, v1::IngestAck* ack);

  const std::string& client_name() const { return client_name_; }
  // Samples held for definitions that wait (neither accepted nor refused).
  size_t samples_waiting() const { return samples_waiting_; }

 private:
  struct Binding {
    SeriesKey key;
    StatSpec spec;
    SeriesId id = 0;
    // Non-empty when the definition was refused; samples under it are too.
    std::string refusal;
    // Waiting: the series is defined otherwise, held by this stream's
    // bindings only, and the definition came after_release (a Stat of the
    // old definition gone, its release not yet here). Its samples wait
    // here; id is 0.
    struct Waiting {
      int64_t since_ms = 0;
      std::string conflict;  // the aggregator's message, if it is refused
      std::vector<double> values;
      std::vector<int64_t> timestamps_us;
    };
    std::unique_ptr<Waiting> waiting;
  };
  // A waiting binding: in the table under its id, or, once the client
  // released the id (its own Stat gone too), out of it and owned here: no
  // sample can come under the id any more, and a new definition may bind
  // the id while this one still waits.
  struct WaitingBinding {
    uint32_t stat_id;
    std::unique_ptr<Binding> released;
  };

  // Bindings by per-stream stat id. Clients number their stats 1, 2, 3...,
  // so ids below a bound proportional to the bindings held live in a vector,
  // read in id order as a client's blocks arrive (a hash lookup per block
  // was a quarter of the daemon's time with 250k stats per stream); other
  // ids go to a map, so that a hostile id cannot make the vector huge.
  class BindingTable {
   public:
    // Null if `id` was never bound on this stream.
    Binding* Find(uint32_t id);
    // The binding of `id`, created empty if it was never bound.
    Binding& FindOrCreate(uint32_t id);
    // Forgets `id`'s binding (released): what a stream holds stays in
    // proportion to the stats it uses, however many it made and dropped.
    void Erase(uint32_t id);
    // The series of `id` if it is bound and not refused, else 0 (then
    // Find tells why). Reads 8 bytes per id instead of the binding itself:
    // with tens of thousands of stats per stream each block's binding is
    // cold, and this is all a block needs. Valid once Sync(id) has run
    // after the binding last changed.
    SeriesId UsableId(uint32_t id) const { return id < usable_.size() ? usable_[id] : 0; }
    void Sync(uint32_t id);

   private:
    static constexpr size_t kMinDense = 1024;
    std::vector<std::optional<Binding>> dense_;
    std::vector<SeriesId> usable_;  // beside dense_, same size
    absl::flat_hash_map<uint32_t, Binding> sparse_;
    size_t count_ = 0;
  };

  void Hello(const v1::IngestHello& hello, uint64_t sequence, v1::IngestAck* ack);
  // Why the label `name`, sent by the client, may not be used: it is one
  // the daemon vouches for. Empty if it may (always, without vouching).
  std::string RefusalOfVouched(absl::string_view name) const;
  // The same for the first such label among `labels`.
  std::string RefusalOfVouched(const Labels& labels) const;
  // "" if `labels` (sorted) carry no job label, or one this stream may use
  // (then held until the stream ends); else why not. Counted.
  std::string RefusalOfJob(const Labels& labels);
  // Definitions, samples, drops and events of `batch`.
  void ApplyParts(const v1::IngestBatch& batch, v1::IngestAck* ack);
  // Appends an IngestError, or past the per-batch limit counts it for the
  // summary that Apply appends.
  void Report(v1::IngestAck* ack, uint64_t sequence, uint32_t stat_id, absl::StatusCode code,
              std::string message, uint64_t samples_refused);
  void Define(const v1::StatDefinition& def, uint64_t sequence, v1::IngestAck* ack);
  // The batch's sample blocks, in order.
  // The batch's samples: its SampleBlocks, then its SampleColumns.
  void AddBlocks(const v1::IngestBatch& batch, uint64_t sequence, v1::IngestAck* ack);
  // AddBlocks' part for the columns: checks them, decodes their timestamps
  // and queues a run per stretch of consecutive entries of one stat.
  void QueueColumns(const v1::SampleColumns& columns, uint64_t sequence, v1::IngestAck* ack);
  // Where `samples` samples of `stat_id` go: the series to add them to
  // (`id`), or the waiting binding to hold them with (`waiting`), or
  // neither (refused, and reported). The binding table is read once.
  struct Destination {
    SeriesId id = 0;
    Binding* waiting = nullptr;
  };
  Destination DestinationOf(uint32_t stat_id, uint64_t samples, uint64_t sequence,
                            v1::IngestAck* ack);
  void AddDrops(const v1::DropReport& drops, uint64_t sequence, v1::IngestAck* ack);
  void AddEvent(const v1::Event& event, uint64_t sequence, v1::IngestAck* ack);
  void AddEventDrops(const v1::EventDropReport& drops, uint64_t sequence, v1::IngestAck* ack);
  // Looks up `stat_id`, reporting unknown or refused ids against `samples`.
  Binding* Bound(uint32_t stat_id, uint64_t samples, uint64_t sequence, v1::IngestAck* ack);
  // Re-creates the series of stat `stat_id` (bound to `b`) that expired
  // while this stream still uses it.
  absl::Status Redefine(uint32_t stat_id, Binding& b);
  // The aggregator's Define for a binding of this stream: counts the hold
  // and a redefinition (logged).
  absl::StatusOr<SeriesId> DefineSeries(const SeriesKey& key, const StatSpec& spec,
                                        Aggregator::DefineDetail* detail);
  void Hold(SeriesId id) { ++holds_[id]; }
  void Unhold(SeriesId id);
  // `stat_id`'s binding if it is waiting, else null.
  Binding* Waiting(uint32_t stat_id);
  // Holds samples of waiting binding `b`, or refuses them with it when it
  // waited too long or holds too many.
  void Hold(uint32_t stat_id, Binding& b, absl::Span<const double> values,
            absl::Span<const int64_t> timestamps_us, uint64_t sequence, v1::IngestAck* ack);
  // The batch's releases: the stream no longer uses those ids.
  void Release(const v1::IngestBatch& batch);
  // Defines what waits once nothing else holds its series, adding its
  // samples; refuses it when another stream holds it or it waited too
  // long (`final`: the stream ended, nothing will be released any more).
  void SettleWaiting(uint64_t sequence, v1::IngestAck* ack, bool final);
  // Turns waiting binding `b` (of `stat_id`) into a refusal, its samples
  // refused; it stops waiting (and, if released, is gone).
  void RefuseWaiting(uint32_t stat_id, Binding& b, std::string why, uint64_t sequence,
                     v1::IngestAck* ack);
  // The binding `w` names, and its entry's index in waiting_ (which must
  // hold `b`).
  Binding& BindingOf(const WaitingBinding& w) {
    return w.released != nullptr ? *w.released : *bindings_.Find(w.stat_id);
  }
  size_t WaitingIndexOf(const Binding& b);

  Aggregator& aggregator_;
  EventLog& events_;
  DaemonStats& stats_;
  Broadcaster<EventRecord>* events_out_;
  const IngestLimits limits_;
  ClientRegistry* const clients_;
  RateLimitedLog* const log_;
  // Bindings of this stream holding each series (Aggregator::Define).
  absl::flat_hash_map<SeriesId, uint32_t> holds_;
  // The bindings waiting, in the order they came, and the samples they
  // hold together.
  std::vector<WaitingBinding> waiting_;
  size_t samples_waiting_ = 0;

  bool first_batch_ = true;
  // This stream's client, when it named its instance.
  uint64_t client_instance_ = 0;
  std::shared_ptr<ClientRegistry::Client> client_;
  // Bindings to a series (the cardinality counted against the limit).
  size_t series_bound_ = 0;
  // Errors of the batch being applied, and those left out of the ack.
  int batch_errors_ = 0;
  uint64_t omitted_errors_ = 0;
  uint64_t omitted_samples_refused_ = 0;
  // What the daemon vouches for (see the constructor), if it does.
  const std::optional<VouchedIdentity> vouched_;
  // Shared by every series of the stream whose stat adds no labels: the
  // hello's labels and the vouched ones.
  LabelSet identity_;
  // The job labels this stream holds (VouchedIdentity::jobs).
  std::vector<std::string> jobs_held_;
  std::string client_name_;
  BindingTable bindings_;
  // AddBlocks' buffers, reused from batch to batch: the decoded
  // timestamps of every block and of the columns, the runs (a block, or
  // consecutive column entries of one stat) that reached the aggregator,
  // and what it made of each.
  std::vector<int64_t> timestamps_;
  struct PendingRun {
    uint32_t stat_id;
    size_t first;  // its first timestamp in timestamps_
  };
  std::vector<PendingRun> pending_;
  std::vector<Aggregator::SampleRun> runs_;
  std::vector<int64_t> waiting_times_;  // a waiting block's, decoded
  std::vector<absl::StatusOr<AddResult>> results_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_INGEST_INGEST_SESSION_H_

#include "server/ingest/ingest_session.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/core/convert.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

// Whether two specs define a series alike (Aggregator::Define: quantiles
// imply the histogram).
bool SameDefinition(StatSpec a, StatSpec b) {
  a.histogram = a.histogram || !a.quantiles.empty();
  b.histogram = b.histogram || !b.quantiles.empty();
  return a == b;
}

}  // namespace

using protocol::Quote;

void IngestSession::Report(v1::IngestAck* ack, uint64_t sequence, uint32_t stat_id,
                           absl::StatusCode code, std::string message, uint64_t samples_refused) {
  if (ack == nullptr) return;  // the stream has ended: nobody to tell
  if (++batch_errors_ > limits_.max_errors_per_batch) {
    ++omitted_errors_;
    omitted_samples_refused_ += samples_refused;
    return;
  }
  v1::IngestError* e = ack->add_errors();
  e->set_sequence(sequence);
  e->set_stat_id(stat_id);
  e->set_code(static_cast<int32_t>(code));
  e->set_message(std::move(message));
  e->set_samples_refused(samples_refused);
}

IngestSession::Binding* IngestSession::BindingTable::Find(uint32_t id) {
  if (id < dense_.size() && dense_[id].has_value()) return &*dense_[id];
  // Not only for ids past the vector: one bound while it was past it stays
  // in the map after the vector has grown over it.
  auto it = sparse_.find(id);
  return it == sparse_.end() ? nullptr : &it->second;
}

IngestSession::Binding& IngestSession::BindingTable::FindOrCreate(uint32_t id) {
  if (Binding* b = Find(id)) return *b;
  ++count_;
  const size_t dense_limit = kMinDense + 2 * count_;
  if (id < dense_limit) {
    if (id >= dense_.size()) {
      dense_.resize(std::min(dense_limit, std::max<size_t>(id + 1, dense_.size() * 2)));
      usable_.resize(dense_.size());
    }
    return dense_[id].emplace();
  }
  return sparse_[id];
}

void IngestSession::BindingTable::Erase(uint32_t id) {
  if (id < dense_.size() && dense_[id].has_value()) {
    dense_[id].reset();
    usable_[id] = 0;
    --count_;
  } else if (sparse_.erase(id) != 0) {
    --count_;
  }
}

void IngestSession::BindingTable::Sync(uint32_t id) {
  if (id >= usable_.size()) return;  // in the map: UsableId answers 0 and Find serves it
  const std::optional<Binding>& b = dense_[id];
  usable_[id] = b.has_value() && b->refusal.empty() ? b->id : 0;
}

IngestSession::IngestSession(Aggregator& aggregator, EventLog& events, DaemonStats& stats,
                             Broadcaster<EventRecord>* events_out, IngestLimits limits,
                             ClientRegistry* clients, RateLimitedLog* log,
                             std::optional<VouchedIdentity> vouched)
    : aggregator_(aggregator),
      events_(events),
      stats_(stats),
      events_out_(events_out),
      limits_(limits),
      clients_(clients),
      log_(log),
      vouched_(std::move(vouched)) {
  // A stream that sends no hello is still labelled with what is vouched for.
  if (vouched_.has_value()) identity_ = vouched_->labels;
}

std::string IngestSession::RefusalOfVouched(absl::string_view name) const {
  if (!vouched_.has_value() ||
      std::find(vouched_->reserved.begin(), vouched_->reserved.end(), name) ==
          vouched_->reserved.end()) {
    return "";
  }
  std::string vouched = "nothing: it could not be derived for this connection";
  for (const auto& [own_name, own_value] : vouched_->labels) {
    if (own_name == name) vouched = absl::StrCat("\"", Quote(own_value), "\"");
  }
  return absl::StrCat("label \"", name, "\" is set by torchmond, from what the kernel says of "
                      "this connection (here ", vouched, "); a client may not send it");
}

std::string IngestSession::RefusalOfVouched(const Labels& labels) const {
  if (!vouched_.has_value()) return "";
  for (const auto& label : labels) {
    if (std::string why = RefusalOfVouched(label.first); !why.empty()) return why;
  }
  return "";
}

std::string IngestSession::RefusalOfJob(const Labels& labels) {
  if (!vouched_.has_value() || vouched_->jobs == nullptr) return "";
  const std::string* found = FindLabel(labels, "job");
  if (found == nullptr) return "";
  const std::string& job = *found;
  if (std::find(jobs_held_.begin(), jobs_held_.end(), job) != jobs_held_.end()) return "";
  if (absl::Status held = vouched_->jobs->Hold(job, vouched_->owner); !held.ok()) {
    stats_.labels_refused_job.fetch_add(1, std::memory_order_relaxed);
    return std::string(held.message());
  }
  jobs_held_.push_back(job);
  return "";
}

IngestSession::~IngestSession() {
  // The stream ended: its Stats hold nothing any more.
  for (const auto& [id, n] : holds_) {
    for (uint32_t i = 0; i < n; ++i) aggregator_.Release(id);
  }
  holds_.clear();
  for (const std::string& job : jobs_held_) vouched_->jobs->Release(job, vouched_->owner);
  SettleWaiting(0, nullptr, /*final=*/true);
  if (client_ != nullptr) clients_->Release(client_instance_);
}

void IngestSession::Unhold(SeriesId id) {
  aggregator_.Release(id);
  auto it = holds_.find(id);
  if (it != holds_.end() && --it->second == 0) holds_.erase(it);
}

absl::StatusOr<SeriesId> IngestSession::DefineSeries(const SeriesKey& key, const StatSpec& spec,
                                                     Aggregator::DefineDetail* detail) {
  auto id = aggregator_.Define(key, spec, detail);
  if (!id.ok()) return id;
  Hold(*id);
  if (detail->redefined) {
    stats_.series_redefined.fetch_add(1, std::memory_order_relaxed);
    if (log_ != nullptr) {
      log_->Report("redefined a series",
                   absl::StrCat(Quote(key.ToString(), 512), " from ", detail->previous.ToString(),
                                " to ", spec.ToString(), "; its open windows closed early"));
    }
  }
  return id;
}

IngestSession::Binding* IngestSession::Waiting(uint32_t stat_id) {
  Binding* b = bindings_.Find(stat_id);
  return b != nullptr && b->waiting != nullptr ? b : nullptr;
}

void IngestSession::Hold(uint32_t stat_id, Binding& b, absl::Span<const double> values,
                         absl::Span<const int64_t> timestamps_us, uint64_t sequence,
                         v1::IngestAck* ack) {
  Binding::Waiting& w = *b.waiting;
  w.values.insert(w.values.end(), values.begin(), values.end());
  w.timestamps_us.insert(w.timestamps_us.end(), timestamps_us.begin(), timestamps_us.end());
  samples_waiting_ += values.size();
  if (samples_waiting_ > limits_.max_samples_waiting) {
    RefuseWaiting(stat_id, b,
                  absl::StrCat(w.conflict, "; more than ", limits_.max_samples_waiting,
                               " samples waited for the earlier definition to be released"),
                  sequence, ack);
  }
}

size_t IngestSession::WaitingIndexOf(const Binding& b) {
  size_t i = 0;
  while (&BindingOf(waiting_[i]) != &b) ++i;
  return i;
}

void IngestSession::RefuseWaiting(uint32_t stat_id, Binding& b, std::string why,
                                  uint64_t sequence, v1::IngestAck* ack) {
  const uint64_t n = b.waiting->values.size();
  samples_waiting_ -= n;
  stats_.definitions_refused.fetch_add(1, std::memory_order_relaxed);
  stats_.samples_refused.fetch_add(n, std::memory_order_relaxed);
  Report(ack, sequence, stat_id, absl::StatusCode::kAlreadyExists,
         absl::StrCat(why, "; ", n, " samples refused"), n);
  if (log_ != nullptr && ack == nullptr) {
    log_->Report("refused a definition at the end of its stream",
                 absl::StrCat(why, "; ", n, " samples refused"));
  }
  b.refusal = std::move(why);
  b.waiting.reset();
  --series_bound_;
  // A released binding held nothing and goes with its entry; one still
  // under its id keeps the refusal for the samples that come under it.
  const size_t i = WaitingIndexOf(b);
  if (waiting_[i].released == nullptr) bindings_.Sync(stat_id);
  waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
}

void IngestSession::Release(const v1::IngestBatch& batch) {
  for (const uint32_t stat_id : batch.released()) {
    Binding* b = bindings_.Find(stat_id);
    if (b == nullptr) continue;  // never bound, or released already
    if (!b->refusal.empty()) {
      bindings_.Erase(stat_id);  // refused: it held nothing
      continue;
    }
    if (b->waiting != nullptr) {
      // Its samples still wait, settled (then released) with the others;
      // the id is free: the client may define it again meanwhile.
      WaitingBinding& w = waiting_[WaitingIndexOf(*b)];
      w.released = std::make_unique<Binding>(std::move(*b));
      bindings_.Erase(stat_id);
      continue;
    }
    Unhold(b->id);
    --series_bound_;
    bindings_.Erase(stat_id);
  }
}

void IngestSession::SettleWaiting(uint64_t sequence, v1::IngestAck* ack, bool final) {
  if (waiting_.empty()) return;
  const int64_t now = aggregator_.clock().NowMs();
  for (size_t i = 0; i < waiting_.size();) {
    const uint32_t stat_id = waiting_[i].stat_id;
    const bool released = waiting_[i].released != nullptr;
    Binding& b = BindingOf(waiting_[i]);
    Aggregator::DefineDetail detail;
    auto id = DefineSeries(b.key, b.spec, &detail);
    if (id.ok()) {
      std::unique_ptr<Binding::Waiting> w = std::move(b.waiting);
      samples_waiting_ -= w->values.size();
      b.id = *id;
      if (!released) bindings_.Sync(stat_id);
      if (!w->values.empty()) {
        auto added = aggregator_.AddSamples(b.id, w->values, w->timestamps_us);
        if (!added.ok()) {
          Report(ack, sequence, stat_id, static_cast<absl::StatusCode>(added.status().code()),
                 std::string(added.status().message()), w->values.size());
          stats_.samples_refused.fetch_add(w->values.size(), std::memory_order_relaxed);
        }
      }
      if (released || final) {
        Unhold(b.id);
        --series_bound_;
        if (!released) bindings_.Erase(stat_id);
      }
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    auto held = holds_.find(detail.conflict_id);
    const bool ours = absl::IsAlreadyExists(id.status()) && held != holds_.end() &&
                      detail.holders <= held->second;
    if (ours && !final && now - b.waiting->since_ms < limits_.redefinition_wait_ms) {
      ++i;
      continue;
    }
    RefuseWaiting(stat_id, b,
                  ours ? absl::StrCat(id.status().message(), "; the earlier definition was not "
                                                              "released within ",
                                      limits_.redefinition_wait_ms, " ms")
                       : std::string(id.status().message()),
                  sequence, ack);
  }
}

void IngestSession::Apply(const v1::IngestBatch& batch, v1::IngestAck* ack) {
  const uint64_t seq = batch.sequence();
  batch_errors_ = 0;
  omitted_errors_ = 0;
  omitted_samples_refused_ = 0;
  stats_.batches_received.fetch_add(1, std::memory_order_relaxed);
  if (batch.has_hello()) {
    if (!first_batch_) {
      Report(ack, seq, 0, absl::StatusCode::kInvalidArgument,
             absl::StrCat("batch ", seq, ": hello is only valid in the first batch of a stream; ignored"),
             0);
    } else {
      Hello(batch.hello(), seq, ack);
    }
  }
  first_batch_ = false;
  if (client_ != nullptr && seq != 0) {
    absl::MutexLock lock(&client_->mu);
    if (seq <= client_->applied_through) {
      stats_.batches_duplicate.fetch_add(1, std::memory_order_relaxed);
    } else {
      ApplyParts(batch, ack);
      client_->applied_through = seq;
      clients_->RecordApplied(client_instance_, seq);
    }
  } else {
    ApplyParts(batch, ack);
  }
  if (omitted_errors_ != 0) {
    v1::IngestError* e = ack->add_errors();
    e->set_sequence(seq);
    e->set_code(static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
    e->set_message(absl::StrCat("batch ", seq, ": ", omitted_errors_,
                                " more errors not listed (at most ", limits_.max_errors_per_batch,
                                " are listed per batch)"));
    e->set_samples_refused(omitted_samples_refused_);
  }
  SettleWaiting(seq, ack, /*final=*/false);
  if (batch_errors_ != 0) stats_.batches_with_errors.fetch_add(1, std::memory_order_relaxed);
  if (seq > ack->sequence()) ack->set_sequence(seq);
}

void IngestSession::Hello(const v1::IngestHello& hello, uint64_t sequence, v1::IngestAck* ack) {
  if (auto labels = LabelsFromProto(hello.labels()); !labels.ok()) {
    Report(ack, sequence, 0, absl::StatusCode::kInvalidArgument,
           absl::StrCat("hello.labels: ", labels.status().message(),
                        "; the stream continues without identity labels"),
           0);
  } else if (!vouched_.has_value()) {
    identity_ = *std::move(labels);
  } else {
    // Each label the daemon vouches for is refused on its own; the
    // client's other labels stay, beside the daemon's.
    Labels own;
    for (auto& label : *labels) {
      if (std::string why = RefusalOfVouched(label.first); !why.empty()) {
        stats_.labels_refused_vouched.fetch_add(1, std::memory_order_relaxed);
        Report(ack, sequence, 0, absl::StatusCode::kInvalidArgument,
               absl::StrCat("hello.labels: ", why, "; the label is ignored"), 0);
      } else {
        own.push_back(std::move(label));
      }
    }
    if (auto merged = MergeLabels(vouched_->labels, own); merged.ok()) {
      if (std::string why = RefusalOfJob(*merged); !why.empty()) {
        Report(ack, sequence, 0, absl::StatusCode::kPermissionDenied,
               absl::StrCat("hello.labels: ", why, "; the label is ignored"), 0);
        merged->erase(std::find_if(merged->begin(), merged->end(),
                                   [](const auto& kv) { return kv.first == "job"; }));
      }
      identity_ = *std::move(merged);
    } else {
      Report(ack, sequence, 0, absl::StatusCode::kInvalidArgument,
             absl::StrCat("hello.labels: ", merged.status().message(),
                          "; the stream continues with the daemon's labels only"),
             0);
    }
  }
  if (hello.client_name().size() > protocol::kMaxNameBytes ||
      !protocol::IsValidUtf8(hello.client_name())) {
    Report(ack, sequence, 0, absl::StatusCode::kInvalidArgument,
           absl::StrCat("hello.client_name \"", Quote(hello.client_name()),
                        "\" is not valid UTF-8 of at most ", protocol::kMaxNameBytes,
                        " bytes; ignored"),
           0);
  } else {
    client_name_ = hello.client_name();
  }
  if (hello.client_instance() != 0 && clients_ != nullptr) {
    client_instance_ = hello.client_instance();
    client_ = clients_->Acquire(client_instance_);
  }
}

void IngestSession::ApplyParts(const v1::IngestBatch& batch, v1::IngestAck* ack) {
  const uint64_t seq = batch.sequence();
  for (const auto& def : batch.definitions()) Define(def, seq, ack);
  AddBlocks(batch, seq, ack);
  for (const auto& drops : batch.drops()) AddDrops(drops, seq, ack);
  for (const auto& event : batch.events()) AddEvent(event, seq, ack);
  for (const auto& drops : batch.event_drops()) AddEventDrops(drops, seq, ack);
  Release(batch);
}

void IngestSession::Define(const v1::StatDefinition& def, uint64_t sequence, v1::IngestAck* ack) {
  auto refuse = [&](absl::StatusCode code, std::string message) {
    stats_.definitions_refused.fetch_add(1, std::memory_order_relaxed);
    Report(ack, sequence, def.id(), code, message, 0);
    Binding& b = bindings_.FindOrCreate(def.id());
    // A working binding, or one whose definition waits for a release,
    // survives a conflicting re-definition of its id: the definition that
    // came first wins, as between streams.
    if (b.refusal.empty() && (b.id != 0 || b.waiting != nullptr)) return;
    // Otherwise remember the refusal so later samples under this id are
    // refused with the same reason instead of "unknown id".
    b = Binding{};
    b.key.stat = def.name();
    b.refusal = std::move(message);
    bindings_.Sync(def.id());
  };
  if (def.id() == 0) {
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("definition of stat \"", Quote(def.name()), "\": id 0 is reserved"));
  }
  if (Binding* bound = bindings_.Find(def.id()); bound != nullptr && bound->refusal.empty()) {
    if (bound->key.stat == def.name()) {
      // Re-sending the same definition (e.g. after a retry) is harmless when
      // it agrees; the aggregator checks the spec.
    } else {
      Report(ack, sequence, def.id(), absl::StatusCode::kAlreadyExists,
               absl::StrCat("stat id ", def.id(), " is already bound to \"", Quote(bound->key.stat),
                            "\" on this stream; refusing to rebind it to \"", Quote(def.name()), "\""),
               0);
      stats_.definitions_refused.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  if (absl::Status s = protocol::ValidateName("stat name", def.name()); !s.ok()) {
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("definition of stat id ", def.id(), ": ", s.message()));
  }
  auto spec = SpecFromProto(def.spec());
  if (!spec.ok()) {
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("definition of stat \"", Quote(def.name()), "\": ", spec.status().message()));
  }
  auto own = LabelsFromProto(def.labels());
  if (!own.ok()) {
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("definition of stat \"", Quote(def.name()), "\": ", own.status().message()));
  }
  if (std::string why = RefusalOfVouched(*own); !why.empty()) {
    stats_.labels_refused_vouched.fetch_add(1, std::memory_order_relaxed);
    return refuse(absl::StatusCode::kInvalidArgument,
                  absl::StrCat("definition of stat \"", Quote(def.name()), "\": ", why));
  }
  Binding b;
  b.key.stat = def.name();
  if (own->empty()) {
    b.key.labels = identity_;
  } else {
    auto labels = MergeLabels(identity_.get(), *own);
    if (!labels.ok()) {
      return refuse(absl::StatusCode::kInvalidArgument,
                    absl::StrCat("definition of stat \"", Quote(def.name()), "\": ", labels.status().message()));
    }
    b.key.labels = *std::move(labels);
  }
  if (std::string why = RefusalOfJob(b.key.labels.get()); !why.empty()) {
    return refuse(absl::StatusCode::kPermissionDenied,
                  absl::StrCat("definition of stat \"", Quote(def.name()), "\": ", why));
  }
  b.spec = *spec;
  Binding* existing = bindings_.Find(def.id());
  const bool in_use = existing != nullptr && existing->refusal.empty() &&
                      (existing->id != 0 || existing->waiting != nullptr);
  if (in_use && existing->key.ToString() != b.key.ToString()) {
    // The same name under other labels is another series: an id names one
    // series for the life of the stream (torchmon.proto, StatDefinition.id).
    Report(ack, sequence, def.id(), absl::StatusCode::kAlreadyExists,
           absl::StrCat("stat id ", def.id(), " is already bound to ",
                        Quote(existing->key.ToString(), 512),
                        " on this stream; refusing to rebind it to ", Quote(b.key.ToString(), 512)),
           0);
    stats_.definitions_refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (in_use) {
    // The same definition again (a retry) is harmless; another spec under
    // the same id is not: an id names one definition for its life.
    if (SameDefinition(existing->spec, b.spec)) return;
    Report(ack, sequence, def.id(), absl::StatusCode::kAlreadyExists,
           absl::StrCat("stat id ", def.id(), " is already bound to ",
                        Quote(existing->key.ToString(), 512), " with ", existing->spec.ToString(),
                        " on this stream; refusing to redefine it with ", b.spec.ToString(),
                        " (a new definition takes a new id)"),
           0);
    stats_.definitions_refused.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (limits_.max_series_per_stream != 0 &&
      series_bound_ >= limits_.max_series_per_stream) {
    stats_.series_refused_stream_limit.fetch_add(1, std::memory_order_relaxed);
    return refuse(absl::StatusCode::kResourceExhausted,
                  absl::StrCat("series ", Quote(b.key.ToString(), 512), " refused: this client already has ",
                               series_bound_, " series, the most one stream may define "
                               "(torchmond --max-series-per-client)"));
  }
  Aggregator::DefineDetail detail;
  auto id = DefineSeries(b.key, b.spec, &detail);
  if (def.after_release() && absl::IsAlreadyExists(id.status())) {
    auto held = holds_.find(detail.conflict_id);
    if (held != holds_.end() && detail.holders <= held->second) {
      // Held by this stream alone: a Stat of the old definition whose
      // release is still on its way (it comes after that Stat's last
      // samples). Wait for it; Apply settles it.
      b.waiting = std::make_unique<Binding::Waiting>();
      b.waiting->since_ms = aggregator_.clock().NowMs();
      b.waiting->conflict = std::string(id.status().message());
      ++series_bound_;
      waiting_.push_back({def.id(), nullptr});
      bindings_.FindOrCreate(def.id()) = std::move(b);
      bindings_.Sync(def.id());
      return;
    }
  }
  if (!id.ok()) {
    if (absl::IsResourceExhausted(id.status())) {
      stats_.series_refused_total_limit.fetch_add(1, std::memory_order_relaxed);
    }
    return refuse(static_cast<absl::StatusCode>(id.status().code()), std::string(id.status().message()));
  }
  b.id = *id;
  ++series_bound_;
  bindings_.FindOrCreate(def.id()) = std::move(b);
  bindings_.Sync(def.id());
}

IngestSession::Binding* IngestSession::Bound(uint32_t stat_id, uint64_t samples, uint64_t sequence,
                                             v1::IngestAck* ack) {
  Binding* b = bindings_.Find(stat_id);
  if (b == nullptr) {
    Report(ack, sequence, stat_id, absl::StatusCode::kNotFound,
             absl::StrCat("stat id ", stat_id,
                          " is not defined on this stream (never defined, or released); ",
                          samples, " samples refused"),
             samples);
    stats_.samples_refused.fetch_add(samples, std::memory_order_relaxed);
    return nullptr;
  }
  if (!b->refusal.empty()) {
    Report(ack, sequence, stat_id, absl::StatusCode::kFailedPrecondition,
             absl::StrCat("stat \"", Quote(b->key.stat), "\" (id ", stat_id, ") was refused (",
                          b->refusal, "); ", samples, " samples refused"),
             samples);
    stats_.samples_refused.fetch_add(samples, std::memory_order_relaxed);
    return nullptr;
  }
  return b;
}

absl::Status IngestSession::Redefine(uint32_t stat_id, Binding& b) {
  // The old series is gone, and its hold with it.
  auto held = holds_.find(b.id);
  if (held != holds_.end() && --held->second == 0) holds_.erase(held);
  Aggregator::DefineDetail detail;
  auto id = DefineSeries(b.key, b.spec, &detail);
  // Refused (the daemon full, another definition in place): the binding
  // keeps the id that finds nothing, so its next samples try again.
  if (!id.ok()) return id.status();
  b.id = *id;
  bindings_.Sync(stat_id);
  return absl::OkStatus();
}

IngestSession::Destination IngestSession::DestinationOf(uint32_t stat_id, uint64_t samples,
                                                       uint64_t sequence, v1::IngestAck* ack) {
  if (const SeriesId id = bindings_.UsableId(stat_id); id != 0) return {id, nullptr};
  if (Binding* waiting = Waiting(stat_id); waiting != nullptr) return {0, waiting};
  // Unknown, refused, or kept in the map: Bound reports the first two.
  const Binding* b = Bound(stat_id, samples, sequence, ack);
  return {b == nullptr ? 0 : b->id, nullptr};
}

namespace {

// Decodes n timestamps (base plus running deltas; none: all at base) into
// out. Unsigned arithmetic: hostile deltas may overflow, which must wrap,
// not be undefined behaviour; such samples end up skewed or late.
void DecodeTimes(int64_t base, const google::protobuf::RepeatedField<int64_t>& deltas, uint64_t n,
                 int64_t* out) {
  uint64_t t = static_cast<uint64_t>(base);
  if (deltas.empty()) {
    std::fill(out, out + n, static_cast<int64_t>(t));
    return;
  }
  const int64_t* d = deltas.data();
  for (uint64_t i = 0; i < n; ++i) {
    t += static_cast<uint64_t>(d[i]);
    out[i] = static_cast<int64_t>(t);
  }
}

}  // namespace

void IngestSession::AddBlocks(const v1::IngestBatch& batch, uint64_t sequence,
                              v1::IngestAck* ack) {
  // Checked and decoded first, then handed to the aggregator together (one
  // clock read and lock per chunk of runs instead of per block), then
  // accounted: a run refused here or there is reported as before.
  pending_.clear();
  runs_.clear();
  timestamps_.clear();
  for (const v1::SampleBlock& block : batch.samples()) {
    const uint64_t n = static_cast<uint64_t>(block.values_size());
    stats_.samples_received.fetch_add(n, std::memory_order_relaxed);
    const auto [id, waiting] = DestinationOf(block.stat_id(), n, sequence, ack);
    if (id == 0 && waiting == nullptr) continue;
    if (block.time_deltas_us_size() != 0 &&
        static_cast<uint64_t>(block.time_deltas_us_size()) != n) {
      Report(ack, sequence, block.stat_id(), absl::StatusCode::kInvalidArgument,
             absl::StrCat("samples of stat \"", Quote(bindings_.Find(block.stat_id())->key.stat),
                          "\": time_deltas_us has ", block.time_deltas_us_size(), " entries for ",
                          n, " values (must be equal or empty); block refused"),
             n);
      stats_.samples_refused.fetch_add(n, std::memory_order_relaxed);
      continue;
    }
    if (waiting != nullptr) {
      waiting_times_.resize(n);
      DecodeTimes(block.base_time_us(), block.time_deltas_us(), n, waiting_times_.data());
      Hold(block.stat_id(), *waiting, block.values(), waiting_times_, sequence, ack);
      continue;
    }
    const size_t first = timestamps_.size();
    pending_.push_back({block.stat_id(), first});
    runs_.push_back({id, block.values(), {}});
    timestamps_.resize(first + n);
    DecodeTimes(block.base_time_us(), block.time_deltas_us(), n, timestamps_.data() + first);
  }
  if (batch.has_columns()) QueueColumns(batch.columns(), sequence, ack);
  // Spans only now: timestamps_ no longer moves.
  for (size_t i = 0; i < runs_.size(); ++i) {
    runs_[i].timestamps_us =
        absl::MakeConstSpan(timestamps_.data() + pending_[i].first, runs_[i].values.size());
  }
  results_.resize(runs_.size());
  aggregator_.AddSampleRuns(runs_, absl::MakeSpan(results_));
  for (size_t i = 0; i < pending_.size(); ++i) {
    const uint32_t stat_id = pending_[i].stat_id;
    const uint64_t n = runs_[i].values.size();
    absl::StatusOr<AddResult>& result = results_[i];
    if (absl::IsNotFound(result.status())) {
      // The series expired since this stream defined it: define it again.
      Binding& b = *bindings_.Find(stat_id);
      if (absl::Status s = Redefine(stat_id, b); !s.ok()) {
        Report(ack, sequence, stat_id, static_cast<absl::StatusCode>(s.code()),
               std::string(s.message()), n);
        stats_.samples_refused.fetch_add(n, std::memory_order_relaxed);
        continue;
      }
      result = aggregator_.AddSamples(b.id, runs_[i].values, runs_[i].timestamps_us);
    }
    if (!result.ok()) {
      Report(ack, sequence, stat_id, static_cast<absl::StatusCode>(result.status().code()),
             std::string(result.status().message()), n);
      stats_.samples_refused.fetch_add(n, std::memory_order_relaxed);
    }
  }
}

void IngestSession::QueueColumns(const v1::SampleColumns& columns, uint64_t sequence,
                                 v1::IngestAck* ack) {
  const uint64_t n = static_cast<uint64_t>(columns.values_size());
  const uint64_t ids = static_cast<uint64_t>(columns.stat_ids_size());
  const uint64_t deltas = static_cast<uint64_t>(columns.time_deltas_us_size());
  // Every entry is a sample received, whichever array is short.
  const uint64_t received = std::max(n, ids);
  stats_.samples_received.fetch_add(received, std::memory_order_relaxed);
  if (ids != n || (deltas != 0 && deltas != n)) {
    Report(ack, sequence, 0, absl::StatusCode::kInvalidArgument,
           absl::StrCat("columns: stat_ids has ", ids, " entries, values ", n,
                        " and time_deltas_us ", deltas,
                        " (stat_ids and values must be equal, time_deltas_us equal or empty); "
                        "columns refused"),
           received);
    stats_.samples_refused.fetch_add(received, std::memory_order_relaxed);
    return;
  }
  const size_t first = timestamps_.size();
  timestamps_.resize(first + n);
  DecodeTimes(columns.base_time_us(), columns.time_deltas_us(), n, timestamps_.data() + first);
  const uint32_t* stat_ids = columns.stat_ids().data();
  const double* values = columns.values().data();
  for (uint64_t i = 0; i < n;) {
    const uint32_t stat_id = stat_ids[i];
    uint64_t end = i + 1;
    while (end < n && stat_ids[end] == stat_id) ++end;
    const uint64_t len = end - i;
    if (const auto [id, waiting] = DestinationOf(stat_id, len, sequence, ack); waiting != nullptr) {
      Hold(stat_id, *waiting, absl::MakeConstSpan(values + i, len),
           absl::MakeConstSpan(timestamps_.data() + first + i, len), sequence, ack);
    } else if (id != 0) {
      pending_.push_back({stat_id, first + i});
      runs_.push_back({id, absl::MakeConstSpan(values + i, len), {}});
    }
    i = end;
  }
}

void IngestSession::AddDrops(const v1::DropReport& drops, uint64_t sequence, v1::IngestAck* ack) {
  Binding* bound = bindings_.Find(drops.stat_id());
  if (bound == nullptr || !bound->refusal.empty()) {
    Report(ack, sequence, drops.stat_id(), absl::StatusCode::kNotFound,
             absl::StrCat("drop report for stat id ", drops.stat_id(),
                          ", which is not a defined stat on this stream; ignored"),
             0);
    return;
  }
  Binding& b = *bound;
  absl::Status s = aggregator_.AddClientDrops(b.id, drops.dropped());
  if (absl::IsNotFound(s) && Redefine(drops.stat_id(), b).ok()) s = aggregator_.AddClientDrops(b.id, drops.dropped());
  if (!s.ok()) {
    Report(ack, sequence, drops.stat_id(), static_cast<absl::StatusCode>(s.code()),
             std::string(s.message()), 0);
  }
}

void IngestSession::AddEventDrops(const v1::EventDropReport& drops, uint64_t sequence,
                                  v1::IngestAck* ack) {
  if (absl::Status s = protocol::ValidateName("event name", drops.name()); !s.ok()) {
    Report(ack, sequence, 0, absl::StatusCode::kInvalidArgument,
           absl::StrCat("event drop report: ", s.message(), "; ignored"), 0);
    return;
  }
  if (drops.dropped() == 0) return;
  events_.AddClientDrops(drops.name(), identity_.get(), drops.dropped());
}

void IngestSession::AddEvent(const v1::Event& event, uint64_t sequence, v1::IngestAck* ack) {
  stats_.events_received.fetch_add(1, std::memory_order_relaxed);
  auto refuse = [&](absl::string_view why,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    stats_.events_refused.fetch_add(1, std::memory_order_relaxed);
    Report(ack, sequence, 0, code,
             absl::StrCat("event \"", Quote(event.name()),
                          "\": ", why, "; event refused"),
             0);
  };
  if (absl::Status s = protocol::ValidateName("event name", event.name()); !s.ok()) {
    return refuse(s.message());
  }
  auto own = LabelsFromProto(event.labels());
  if (!own.ok()) return refuse(own.status().message());
  if (std::string why = RefusalOfVouched(*own); !why.empty()) {
    stats_.labels_refused_vouched.fetch_add(1, std::memory_order_relaxed);
    return refuse(absl::StrCat("its labels: ", why));
  }
  auto labels = MergeLabels(identity_.get(), *own);
  if (!labels.ok()) return refuse(labels.status().message());
  if (std::string why = RefusalOfJob(*labels); !why.empty()) {
    return refuse(why, absl::StatusCode::kPermissionDenied);
  }
  EventRecord record;
  record.name = event.name();
  record.timestamp_us = event.timestamp_us();
  record.labels = *std::move(labels);
  if (event.data_size() > static_cast<int>(protocol::kMaxEventFields)) {
    return refuse(absl::StrCat("data has ", event.data_size(), " entries (at most ",
                               protocol::kMaxEventFields, ")"));
  }
  for (const auto& [key, value] : event.data()) {
    if (absl::Status s = protocol::ValidateName("data key", key, protocol::kMaxKeyBytes); !s.ok()) {
      return refuse(s.message());
    }
    switch (value.kind_case()) {
      case v1::EventValue::kStringValue:
        if (!protocol::IsValidUtf8(value.string_value())) {
          return refuse(absl::StrCat("data[\"", key, "\"] is not valid UTF-8"));
        }
        if (value.string_value().size() > protocol::kMaxEventStringBytes) {
          return refuse(absl::StrCat("data[\"", key, "\"] is ", value.string_value().size(),
                                     " bytes long (at most ", protocol::kMaxEventStringBytes, ")"));
        }
        record.data.emplace_back(key, value.string_value());
        break;
      case v1::EventValue::kDoubleValue: record.data.emplace_back(key, value.double_value()); break;
      case v1::EventValue::kIntValue: record.data.emplace_back(key, value.int_value()); break;
      case v1::EventValue::kBoolValue: record.data.emplace_back(key, value.bool_value()); break;
      case v1::EventValue::KIND_NOT_SET:
        return refuse(absl::StrCat("data[\"", key, "\"] has no value"));
    }
  }
  std::sort(record.data.begin(), record.data.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const uint64_t seq = events_.Append(record);
  if (events_out_ != nullptr) {
    record.sequence = seq;
    stats_.watch_items_dropped.fetch_add(events_out_->Publish(record), std::memory_order_relaxed);
  }
}

}  // namespace torchmon::server

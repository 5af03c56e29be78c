#include "server/query/query_service.h"

#include <functional>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "server/core/rank_comparison.h"
#include "server/core/convert.h"
#include "server/query/queued_write_reactor.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// Streams the items of one Broadcaster subscription, converted to `Proto`,
// until the client cancels or the daemon shuts down.
template <typename Item, typename Proto>
class WatchReactor final : public QueuedWriteReactor<Proto> {
 public:
  using Convert = std::function<void(const Item&, Proto*)>;

  WatchReactor(Broadcaster<Item>& source, std::function<bool(const Item&)> filter,
               Convert convert, DaemonStats& stats)
      : source_(source), convert_(std::move(convert)), stats_(stats) {
    stats_.watchers_active.fetch_add(1, std::memory_order_relaxed);
    subscription_ = source_.Subscribe(
        std::move(filter), [this] { this->Wake(); }, QueryService::kWatchQueueCapacity);
    this->Wake();  // the broadcaster may already be closed
  }

 private:
  // The subscription is thread-safe; the base's lock orders the calls.
  bool NextLocked(Proto& message) override {
    std::optional<Item> item = subscription_->Pop();
    if (!item.has_value()) return false;
    convert_(*item, &message);
    return true;
  }
  bool EndingLocked() override { return subscription_->Finished(); }
  void Done() override {
    source_.Unsubscribe(subscription_);
    stats_.watchers_active.fetch_sub(1, std::memory_order_relaxed);
  }

  Broadcaster<Item>& source_;
  Convert convert_;
  DaemonStats& stats_;
  std::shared_ptr<typename Broadcaster<Item>::Subscription> subscription_;
};

}  // namespace

QueryService::QueryService(const Aggregator& aggregator, const EventLog& events,
                           DaemonStats& stats, Broadcaster<ClosedWindow>& windows,
                           Broadcaster<EventRecord>& events_out)
    : aggregator_(aggregator),
      events_(events),
      stats_(stats),
      windows_out_(windows),
      events_out_(events_out) {}

grpc::ServerUnaryReactor* QueryService::ListSeries(grpc::CallbackServerContext* context,
                                                   const v1::ListSeriesRequest* request,
                                                   v1::ListSeriesResponse* response) {
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  for (const SeriesSnapshot& s : aggregator_.ListSeries(SelectorFromProto(request->selector()))) {
    SeriesToProto(s, response->add_series());
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::GetWindows(grpc::CallbackServerContext* context,
                                                   const v1::GetWindowsRequest* request,
                                                   v1::GetWindowsResponse* response) {
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  if (request->limit_per_series() < 0) {
    reactor->Finish(InvalidArgument(
        absl::StrCat("limit_per_series ", request->limit_per_series(), " is negative")));
    return reactor;
  }
  if (request->end_ms() != 0 && request->end_ms() < request->start_ms()) {
    reactor->Finish(InvalidArgument(absl::StrCat("end_ms ", request->end_ms(),
                                                 " is before start_ms ", request->start_ms())));
    return reactor;
  }
  for (const ClosedWindow& w :
       aggregator_.GetWindows(SelectorFromProto(request->selector()), request->start_ms(),
                              request->end_ms(), static_cast<size_t>(request->limit_per_series()))) {
    WindowToProto(w, response->add_windows());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::GetEvents(grpc::CallbackServerContext* context,
                                                  const v1::GetEventsRequest* request,
                                                  v1::GetEventsResponse* response) {
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  if (request->limit() < 0) {
    reactor->Finish(InvalidArgument(absl::StrCat("limit ", request->limit(), " is negative")));
    return reactor;
  }
  for (const EventRecord& e : events_.Get(SelectorFromProto(request->selector()),
                                          request->after_sequence(),
                                          static_cast<size_t>(request->limit()))) {
    EventToProto(e, response->add_events());
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::CompareRanks(grpc::CallbackServerContext* context,
                                                     const v1::CompareRanksRequest* request,
                                                     v1::CompareRanksResponse* response) {
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  RankComparisonOptions options;
  if (request->aggregation() != v1::AGGREGATION_UNSPECIFIED) {
    if (!v1::Aggregation_IsValid(request->aggregation())) {
      reactor->Finish(
          InvalidArgument(absl::StrCat("aggregation ", request->aggregation(), " is unknown")));
      return reactor;
    }
    options.aggregate.aggregation = static_cast<Aggregation>(request->aggregation());
    if (request->aggregation() == v1::QUANTILE) {
      absl::StatusOr<double> q = protocol::CanonicalQuantile(request->quantile());
      if (!q.ok()) {
        reactor->Finish(InvalidArgument(std::string(q.status().message())));
        return reactor;
      }
      options.aggregate.quantile = *q;
    }
  }
  if (!request->rank_label().empty()) options.rank_label = request->rank_label();
  if (request->window_start_ms() < 0) {
    reactor->Finish(InvalidArgument(
        absl::StrCat("window_start_ms ", request->window_start_ms(), " is negative")));
    return reactor;
  }
  options.window_start_ms = request->window_start_ms();
  const Selector selector = SelectorFromProto(request->selector());
  // Only the windows that can be compared: each series' newest (the newest
  // window of a group is one of them, and a rank without it lacks it), or
  // those from the asked start on; not every series' whole history.
  const std::vector<RankComparison> comparisons = torchmon::server::CompareRanks(
      aggregator_.ListSeries(selector),
      aggregator_.GetWindows(selector, options.window_start_ms, 0,
                             options.window_start_ms == 0 ? 1 : 0),
      options);
  for (const RankComparison& c : comparisons) {
    v1::RankComparison* out = response->add_comparisons();
    out->set_stat(c.stat);
    for (const auto& [key, value] : c.labels) (*out->mutable_labels())[key] = value;
    out->set_start_ms(c.start_ms);
    out->set_end_ms(c.end_ms);
    for (const RankEntry& r : c.ranks) {
      v1::RankValue* rank = out->add_ranks();
      rank->set_rank(r.rank);
      KeyToProto(*r.series, rank->mutable_series());
      rank->set_value(r.value);
      rank->set_accepted(r.accepted);
    }
    for (const std::string& m : c.missing) out->add_missing_ranks(m);
    out->set_min(c.min);
    out->set_max(c.max);
    out->set_median(c.median);
    out->set_slowest_rank(c.slowest_rank);
    out->set_max_over_median(c.max_over_median);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::WindowSummary>* QueryService::WatchWindows(
    grpc::CallbackServerContext* /*context*/, const v1::WatchWindowsRequest* request) {
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  Selector selector = SelectorFromProto(request->selector());
  return new WatchReactor<ClosedWindow, v1::WindowSummary>(
      windows_out_,
      [selector](const ClosedWindow& w) { return selector.Matches(*w.series); },
      [](const ClosedWindow& w, v1::WindowSummary* out) { WindowToProto(w, out); }, stats_);
}

grpc::ServerWriteReactor<v1::Event>* QueryService::WatchEvents(
    grpc::CallbackServerContext* /*context*/, const v1::WatchEventsRequest* request) {
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  Selector selector = SelectorFromProto(request->selector());
  return new WatchReactor<EventRecord, v1::Event>(
      events_out_,
      [selector](const EventRecord& e) { return selector.Matches(e.name, e.labels); },
      [](const EventRecord& e, v1::Event* out) { EventToProto(e, out); }, stats_);
}

}  // namespace torchmon::server

// gRPC edge of queries: unary reads of the aggregator and the event log, and
// server streams that follow closed windows and events as they happen.
#ifndef TORCHMON_SERVER_QUERY_QUERY_SERVICE_H_
#define TORCHMON_SERVER_QUERY_QUERY_SERVICE_H_

#include <functional>
#include <optional>
#include <string>

#include "server/core/aggregator.h"
#include "server/core/event_log.h"
#include "server/core/broadcaster.h"
#include "server/core/daemon_stats.h"
#include "server/core/selector.h"
#include "server/query/call_gate.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::server {

// Thread-safe; outlives every call it serves.
class QueryService final : public v1::Query::CallbackService {
 public:
  // A watcher that falls this many items behind loses its oldest ones.
  static constexpr size_t kWatchQueueCapacity = 10000;
  // A page of ListSeries, GetWindows or GetEvents holds at most this many
  // items, and is at most this many bytes, its next_page_token included
  // (unless one item alone is larger: a series at the size limits is
  // ~80 KiB, an event ~0.3 MiB), so that an answer stays under gRPC's
  // default 4 MiB receive limit.
  static constexpr size_t kMaxPageSize = 10000;
  static constexpr size_t kPageBytes = 2 << 20;

  // What a caller is allowed to see, from its call: a matcher every series
  // and event it is shown must meet as well as its own selector (with
  // --peer-labels, user="<its user>"), or nothing for a caller who sees
  // everything.
  using ScopeOfCall =
      std::function<std::optional<LabelMatcher>(const grpc::CallbackServerContext& call)>;

  // Without `scope` every caller sees everything; without `admit` every
  // call goes on.
  QueryService(const Aggregator& aggregator, const EventLog& events, DaemonStats& stats,
               Broadcaster<ClosedWindow>& windows, Broadcaster<EventRecord>& events_out,
               ScopeOfCall scope = nullptr, CallGate admit = nullptr);

  grpc::ServerUnaryReactor* ListSeries(grpc::CallbackServerContext* context,
                                       const v1::ListSeriesRequest* request,
                                       v1::ListSeriesResponse* response) override;
  grpc::ServerUnaryReactor* GetWindows(grpc::CallbackServerContext* context,
                                       const v1::GetWindowsRequest* request,
                                       v1::GetWindowsResponse* response) override;
  grpc::ServerWriteReactor<v1::WindowSummary>* WatchWindows(
      grpc::CallbackServerContext* context, const v1::WatchWindowsRequest* request) override;
  grpc::ServerUnaryReactor* GetEvents(grpc::CallbackServerContext* context,
                                      const v1::GetEventsRequest* request,
                                      v1::GetEventsResponse* response) override;
  grpc::ServerWriteReactor<v1::Event>* WatchEvents(grpc::CallbackServerContext* context,
                                                   const v1::WatchEventsRequest* request) override;
  grpc::ServerUnaryReactor* ListEventTotals(grpc::CallbackServerContext* context,
                                            const v1::ListEventTotalsRequest* request,
                                            v1::ListEventTotalsResponse* response) override;
  grpc::ServerUnaryReactor* CompareRanks(grpc::CallbackServerContext* context,
                                         const v1::CompareRanksRequest* request,
                                         v1::CompareRanksResponse* response) override;

 private:
  // A request's selector, narrowed to what the caller may see.
  Selector Scoped(const grpc::CallbackServerContext& context, Selector selector) const;

  const Aggregator& aggregator_;
  const EventLog& events_;
  DaemonStats& stats_;
  Broadcaster<ClosedWindow>& windows_out_;
  Broadcaster<EventRecord>& events_out_;
  const ScopeOfCall scope_;
  const CallGate admit_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_QUERY_QUERY_SERVICE_H_

#include "server/query/query_service.h"

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "google/protobuf/io/coded_stream.h"
#include "server/core/rank_comparison.h"
#include "server/core/convert.h"
#include "server/query/page_token.h"
#include "server/query/queued_write_reactor.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

grpc::Status InvalidArgument(const std::string& message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, message);
}

// Items a page holds at most for a page_size of `requested` (0: the most),
// or INVALID_ARGUMENT.
absl::StatusOr<size_t> PageItems(int32_t requested) {
  if (requested < 0) {
    return absl::InvalidArgumentError(absl::StrCat("page_size ", requested, " is negative"));
  }
  if (requested == 0) return QueryService::kMaxPageSize;
  return std::min(static_cast<size_t>(requested), QueryService::kMaxPageSize);
}

// Fills one page of a repeated field: items while the page has room, at
// most `max_items` and kPageBytes of them (the first item always goes in,
// whatever its size).
template <typename Proto>
class PageBuilder {
 public:
  PageBuilder(google::protobuf::RepeatedPtrField<Proto>* items, size_t max_items)
      : items_(items), max_items_(max_items) {}

  // Adds the item `fill` writes. False, and the item not added, when it
  // does not fit; then the page is full.
  template <typename Fill>
  bool Add(Fill&& fill) {
    if (full()) return false;
    Proto* item = items_->Add();
    fill(item);
    // The repeated field's tag and length prefix too.
    const size_t size = item->ByteSizeLong();
    const size_t encoded = size + 1 + google::protobuf::io::CodedOutputStream::VarintSize64(size);
    if (items_->size() > 1 && bytes_ + encoded > kItemBytes) {
      items_->RemoveLast();
      bytes_full_ = true;
      return false;
    }
    bytes_ += encoded;
    return true;
  }
  bool full() const { return bytes_full_ || static_cast<size_t>(items_->size()) >= max_items_; }
  size_t room() const { return max_items_ - static_cast<size_t>(items_->size()); }

 private:
  // The page's items leave room for its next_page_token: a series key at
  // the size limits (~38 KiB) in base64.
  static constexpr size_t kItemBytes = QueryService::kPageBytes - (64 << 10);
  google::protobuf::RepeatedPtrField<Proto>* items_;
  const size_t max_items_;
  size_t bytes_ = 0;
  bool bytes_full_ = false;
};

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

// What a paged request asks: how many items a page holds, which request
// its tokens belong to, and where it resumes (no token: the start).
struct PageRequest {
  size_t max_items;
  uint64_t fingerprint;
  std::optional<PageToken> token;
};

absl::StatusOr<PageRequest> ReadPageRequest(const google::protobuf::Message& request,
                                            int32_t page_size, const std::string& page_token,
                                            PageToken::Kind kind) {
  const absl::StatusOr<size_t> max_items = PageItems(page_size);
  if (!max_items.ok()) return max_items.status();
  PageRequest out{*max_items, RequestFingerprint(request), std::nullopt};
  if (!page_token.empty()) {
    absl::StatusOr<PageToken> token = DecodePageToken(page_token, kind, out.fingerprint);
    if (!token.ok()) return token.status();
    out.token = *std::move(token);
  }
  return out;
}

// Fills `page` from chunks, each taken under its source's lock once:
// next(from, room) returns a chunk's items from `from` (the start if null)
// and where the chunk after it starts (empty at the end). Returns where the
// next page resumes: after the last item listed when the page filled, else
// where the walk stopped; empty when it reached the end. (A page that fills
// exactly at the end leaves an empty last page: the walk cannot know there
// is nothing more without looking.)
template <typename Proto, typename Cursor, typename Next, typename Fill, typename CursorOf>
std::optional<Cursor> FillPage(PageBuilder<Proto>& page, std::optional<Cursor> from, Next&& next,
                               Fill&& fill, CursorOf&& cursor_of) {
  std::optional<Cursor> last_listed;
  for (;;) {
    auto [items, resume] = next(from ? &*from : nullptr, page.room());
    for (const auto& item : items) {
      if (!page.Add([&](Proto* out) { fill(item, out); })) break;
      last_listed = cursor_of(item);
    }
    if (page.full()) return last_listed;
    if (!resume.has_value()) return std::nullopt;
    from = std::move(resume);
  }
}

}  // namespace

QueryService::QueryService(const Aggregator& aggregator, const EventLog& events,
                           DaemonStats& stats, Broadcaster<ClosedWindow>& windows,
                           Broadcaster<EventRecord>& events_out, ScopeOfCall scope,
                           CallGate admit)
    : aggregator_(aggregator),
      events_(events),
      stats_(stats),
      windows_out_(windows),
      events_out_(events_out),
      scope_(std::move(scope)),
      admit_(std::move(admit)) {}

Selector QueryService::Scoped(const grpc::CallbackServerContext& context,
                              Selector selector) const {
  if (scope_) {
    if (std::optional<LabelMatcher> scope = scope_(context)) {
      selector.labels.push_back(*std::move(scope));
    }
  }
  return selector;
}

grpc::ServerUnaryReactor* QueryService::ListSeries(grpc::CallbackServerContext* context,
                                                   const v1::ListSeriesRequest* request,
                                                   v1::ListSeriesResponse* response) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return Refused(context, std::move(refused));
  }
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  const absl::StatusOr<PageRequest> paging = ReadPageRequest(
      *request, request->page_size(), request->page_token(), PageToken::Kind::kSeries);
  if (!paging.ok()) {
    reactor->Finish(InvalidArgument(std::string(paging.status().message())));
    return reactor;
  }
  using Cursor = std::shared_ptr<const SeriesKey>;
  const Selector selector = Scoped(*context, SelectorFromProto(request->selector()));
  PageBuilder<v1::SeriesInfo> page(response->mutable_series(), paging->max_items);
  const std::optional<Cursor> next = FillPage(
      page, paging->token ? std::optional<Cursor>(paging->token->series) : std::nullopt,
      [&](const Cursor* after, size_t room) {
        Aggregator::SeriesChunk chunk =
            aggregator_.ListSeriesChunk(selector, after != nullptr ? after->get() : nullptr, room);
        std::optional<Cursor> resume;
        if (chunk.resume_after != nullptr) resume = std::move(chunk.resume_after);
        return std::make_pair(std::move(chunk.series), std::move(resume));
      },
      [](const SeriesSnapshot& s, v1::SeriesInfo* out) { SeriesToProto(s, out); },
      [](const SeriesSnapshot& s) { return s.key; });
  if (next.has_value()) {
    PageToken token;
    token.kind = PageToken::Kind::kSeries;
    token.fingerprint = paging->fingerprint;
    token.series = *next;
    response->set_next_page_token(EncodePageToken(token));
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::GetWindows(grpc::CallbackServerContext* context,
                                                   const v1::GetWindowsRequest* request,
                                                   v1::GetWindowsResponse* response) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return Refused(context, std::move(refused));
  }
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
  const absl::StatusOr<PageRequest> paging = ReadPageRequest(
      *request, request->page_size(), request->page_token(), PageToken::Kind::kWindows);
  if (!paging.ok()) {
    reactor->Finish(InvalidArgument(std::string(paging.status().message())));
    return reactor;
  }
  using Cursor = Aggregator::WindowCursor;
  std::optional<Cursor> from;
  if (paging->token) {
    from = Cursor{paging->token->series, paging->token->after_start_ms,
                  paging->token->after_definition};
  }
  const Selector selector = Scoped(*context, SelectorFromProto(request->selector()));
  const Aggregator::WindowFilter filter{request->start_ms(), request->end_ms(),
                                        static_cast<size_t>(request->limit_per_series())};
  PageBuilder<v1::WindowSummary> page(response->mutable_windows(), paging->max_items);
  const std::optional<Cursor> next = FillPage(
      page, std::move(from),
      [&](const Cursor* after, size_t room) {
        Aggregator::WindowsChunk chunk = aggregator_.GetWindowsChunk(selector, filter, after, room);
        return std::make_pair(std::move(chunk.windows), std::move(chunk.resume));
      },
      [](const ClosedWindow& w, v1::WindowSummary* out) { WindowToProto(w, out); },
      [](const ClosedWindow& w) { return Cursor{w.series, w.start_ms, w.definition}; });
  if (next.has_value()) {
    PageToken token;
    token.kind = PageToken::Kind::kWindows;
    token.fingerprint = paging->fingerprint;
    token.series = next->series;
    token.after_start_ms = next->after_start_ms;
    token.after_definition = next->after_definition;
    response->set_next_page_token(EncodePageToken(token));
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::GetEvents(grpc::CallbackServerContext* context,
                                                  const v1::GetEventsRequest* request,
                                                  v1::GetEventsResponse* response) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return Refused(context, std::move(refused));
  }
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  if (request->limit() < 0) {
    reactor->Finish(InvalidArgument(absl::StrCat("limit ", request->limit(), " is negative")));
    return reactor;
  }
  const absl::StatusOr<PageRequest> paging = ReadPageRequest(
      *request, request->page_size(), request->page_token(), PageToken::Kind::kEvents);
  if (!paging.ok()) {
    reactor->Finish(InvalidArgument(std::string(paging.status().message())));
    return reactor;
  }
  const Selector selector = Scoped(*context, SelectorFromProto(request->selector()));
  uint64_t after = 0;
  uint64_t remaining = 0;  // 0: no limit
  if (paging->token) {
    after = paging->token->after_sequence;
    remaining = paging->token->remaining;
  } else {
    // `limit` picks the most recent events now; the pages then walk forward.
    after = events_.StartOfMostRecent(selector, request->after_sequence(),
                                      static_cast<size_t>(request->limit()));
    remaining = static_cast<uint64_t>(request->limit());
  }
  PageBuilder<v1::Event> page(
      response->mutable_events(),
      remaining == 0 ? paging->max_items : std::min<size_t>(paging->max_items, remaining));
  const std::optional<uint64_t> next = FillPage(
      page, std::optional<uint64_t>(after),
      [&](const uint64_t* from, size_t room) {
        EventLog::Chunk chunk = events_.GetChunk(selector, *from, room);
        std::optional<uint64_t> resume;
        if (!chunk.done) resume = chunk.resume_after;
        return std::make_pair(std::move(chunk.events), resume);
      },
      [](const EventRecord& e, v1::Event* out) { EventToProto(e, out); },
      [](const EventRecord& e) { return e.sequence; });
  const uint64_t listed = static_cast<uint64_t>(response->events_size());
  if (next.has_value() && (remaining == 0 || listed < remaining)) {
    PageToken token;
    token.kind = PageToken::Kind::kEvents;
    token.fingerprint = paging->fingerprint;
    token.after_sequence = *next;
    token.remaining = remaining == 0 ? 0 : remaining - listed;
    response->set_next_page_token(EncodePageToken(token));
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::ListEventTotals(grpc::CallbackServerContext* context,
                                                        const v1::ListEventTotalsRequest* request,
                                                        v1::ListEventTotalsResponse* response) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return Refused(context, std::move(refused));
  }
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  const absl::StatusOr<PageRequest> paging = ReadPageRequest(
      *request, request->page_size(), request->page_token(), PageToken::Kind::kEventTotals);
  if (!paging.ok()) {
    reactor->Finish(InvalidArgument(std::string(paging.status().message())));
    return reactor;
  }
  const Selector selector = Scoped(*context, SelectorFromProto(request->selector()));
  PageBuilder<v1::EventTotals> page(response->mutable_events(), paging->max_items);
  using Entry = std::pair<SeriesKey, EventLog::Totals>;
  const std::optional<SeriesKey> next = FillPage(
      page, paging->token ? std::optional<SeriesKey>(*paging->token->series) : std::nullopt,
      [&](const SeriesKey* after, size_t room) {
        EventLog::TotalsChunk chunk = events_.GetTotalsChunk(selector, after, room);
        return std::make_pair(std::move(chunk.totals), std::move(chunk.resume_after));
      },
      [](const Entry& e, v1::EventTotals* out) {
        out->set_name(e.first.stat);
        for (const auto& [k, v] : e.first.labels) (*out->mutable_labels())[k] = v;
        out->set_received(e.second.count);
        out->set_client_dropped(e.second.client_dropped);
        out->set_last_update_ms(e.second.last_seen_ms);
      },
      [](const Entry& e) { return e.first; });
  if (next.has_value()) {
    PageToken token;
    token.kind = PageToken::Kind::kEventTotals;
    token.fingerprint = paging->fingerprint;
    token.series = std::make_shared<const SeriesKey>(*next);
    response->set_next_page_token(EncodePageToken(token));
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerUnaryReactor* QueryService::CompareRanks(grpc::CallbackServerContext* context,
                                                     const v1::CompareRanksRequest* request,
                                                     v1::CompareRanksResponse* response) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return Refused(context, std::move(refused));
  }
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  auto* reactor = context->DefaultReactor();
  RankComparisonOptions options;
  if (request->aggregation() != v1::AGGREGATION_UNSPECIFIED) {
    if (!v1::Aggregation_IsValid(request->aggregation())) {
      reactor->Finish(
          InvalidArgument(absl::StrCat("aggregation ", request->aggregation(), " is unknown")));
      return reactor;
    }
    options.aggregate.aggregation = protocol::AggregationAs<Aggregation>(request->aggregation());
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
  const std::vector<RankComparison> comparisons = torchmon::server::CompareRanks(
      aggregator_, Scoped(*context, SelectorFromProto(request->selector())), options);
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
      rank->set_ratio(r.ratio);
      rank->set_score(r.score);
      rank->set_straggler(r.straggler);
    }
    for (const std::string& m : c.missing) out->add_missing_ranks(m);
    out->set_min(c.min);
    out->set_max(c.max);
    out->set_median(c.median);
    out->set_slowest_rank(c.slowest_rank);
    out->set_max_over_median(c.max_over_median);
    if (c.all_ranks.has_value()) out->set_all_ranks(*c.all_ranks);
    out->set_mad(c.mad);
    for (const std::string& s : c.stragglers) out->add_stragglers(s);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<v1::WindowSummary>* QueryService::WatchWindows(
    grpc::CallbackServerContext* context, const v1::WatchWindowsRequest* request) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return new RefusedWriteReactor<v1::WindowSummary>(std::move(refused));
  }
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  Selector selector = Scoped(*context, SelectorFromProto(request->selector()));
  return new WatchReactor<ClosedWindow, v1::WindowSummary>(
      windows_out_,
      [selector](const ClosedWindow& w) { return selector.Matches(*w.series); },
      [](const ClosedWindow& w, v1::WindowSummary* out) { WindowToProto(w, out); }, stats_);
}

grpc::ServerWriteReactor<v1::Event>* QueryService::WatchEvents(
    grpc::CallbackServerContext* context, const v1::WatchEventsRequest* request) {
  if (grpc::Status refused = Admission(admit_, *context); !refused.ok()) {
    return new RefusedWriteReactor<v1::Event>(std::move(refused));
  }
  stats_.queries.fetch_add(1, std::memory_order_relaxed);
  Selector selector = Scoped(*context, SelectorFromProto(request->selector()));
  return new WatchReactor<EventRecord, v1::Event>(
      events_out_,
      [selector](const EventRecord& e) { return selector.Matches(e.name, e.labels); },
      [](const EventRecord& e, v1::Event* out) { EventToProto(e, out); }, stats_);
}

}  // namespace torchmon::server

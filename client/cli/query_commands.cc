// series, windows, events, watch, ranks and top: thin shells around the
// Query service.

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "grpcpp/grpcpp.h"
#include "torchmon/channel.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::cli {
namespace {

// A stub on a channel with the client library's TLS and token; null, with
// the reason printed, if the security settings cannot be honoured.
std::unique_ptr<v1::Query::Stub> NewQueryStub(const GlobalOptions& global) {
  auto channel = CreateDaemonChannel(ConnectionOptions(global));
  if (!channel.ok()) {
    std::fprintf(stderr, "torchmonctl: %s\n", std::string(channel.status().message()).c_str());
    return nullptr;
  }
  return v1::Query::NewStub(*channel);
}


template <typename Matchers>
void AddEqualMatchers(const protocol::LabelList& labels, Matchers* matchers) {
  for (const auto& [key, value] : labels) {
    v1::LabelMatcher* matcher = matchers->Add();
    matcher->set_key(key);
    matcher->set_value(value);
    matcher->set_op(v1::EQUAL);
  }
}

void FillSelector(const std::string& stat, const protocol::LabelList& labels,
                  v1::Selector* selector) {
  selector->set_stat(stat);
  AddEqualMatchers(labels, selector->mutable_labels());
}

// Prints the failed call's status and maps it to an exit status: a daemon
// that is absent or silent is kExitUnreachable, any other error kExitFailed.
int ReportRpcError(const GlobalOptions& global, const grpc::Status& status) {
  std::string message = status.error_message();
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    message = absl::StrCat("no answer from torchmond at ", global.target, " within ",
                           protocol::FormatDurationMs(global.timeout_ms));
  } else if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    message = absl::StrCat("cannot reach torchmond at ", global.target, ": ", message);
    // How a TLS handshake the daemon refused looks from here.
    if (absl::StrContains(message, "Socket closed") || absl::StrContains(message, "andshake")) {
      absl::StrAppend(&message,
                      " (if the daemon uses TLS: does it trust this client's certificate, "
                      "--tls-cert/--tls-key, and does --tls-ca sign its own? docs/security.md)");
    }
  } else if (message.empty()) {
    message = absl::StrCat("request failed with gRPC status ", status.error_code());
  }
  std::fprintf(stderr, "torchmonctl: %s\n", message.c_str());
  return status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                 status.error_code() == grpc::StatusCode::UNAVAILABLE
             ? kExitUnreachable
             : kExitFailed;
}

void Print(const std::string& text) {
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

template <typename Request, typename Response>
using UnaryQuery = grpc::Status (v1::Query::Stub::*)(grpc::ClientContext*, const Request&,
                                                     Response*);

// One unary Query call bounded by --timeout: kExitOk with `response` filled,
// or the exit status after printing why not (ReportRpcError).
template <typename Request, typename Response>
int Call(const GlobalOptions& global, v1::Query::Stub& stub, UnaryQuery<Request, Response> method,
         const Request& request, Response& response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(global.timeout_ms));
  const grpc::Status status = (stub.*method)(&context, request, &response);
  return status.ok() ? kExitOk : ReportRpcError(global, status);
}

// A query command: connects, makes the one call and prints its answer as
// `render` writes it.
template <typename Request, typename Response, typename Render>
int CallAndPrint(const GlobalOptions& global, UnaryQuery<Request, Response> method,
                 const Request& request, Render&& render) {
  const auto stub = NewQueryStub(global);
  if (stub == nullptr) return kExitUsage;
  Response response;
  if (const int status = Call(global, *stub, method, request, response); status != kExitOk) {
    return status;
  }
  Print(render(response));
  return kExitOk;
}

// Calls a paged Query method page by page to the last one, handing each
// answer to `on_page` as it arrives; kExitOk, or the failed call's status.
template <typename Request, typename Response, typename OnPage>
int CallPages(const GlobalOptions& global, v1::Query::Stub& stub,
              UnaryQuery<Request, Response> method, Request request, OnPage&& on_page) {
  for (;;) {
    Response response;
    if (const int status = Call(global, stub, method, request, response); status != kExitOk) {
      return status;
    }
    on_page(response);
    if (response.next_page_token().empty()) return kExitOk;
    request.set_page_token(response.next_page_token());
  }
}

// A paged query command: connects and follows the pages to the last one,
// printing each as it arrives (PagedOutput), so that a listing of a million
// series neither waits for nor holds the whole answer. Each page is one call
// bounded by --timeout.
template <typename Request, typename Response, typename MakeTable, typename MakeJson>
int CallPagesAndPrint(const GlobalOptions& global, UnaryQuery<Request, Response> method,
                      const Request& request, const std::string& json_key, MakeTable&& table,
                      MakeJson&& json) {
  const auto stub = NewQueryStub(global);
  if (stub == nullptr) return kExitUsage;
  PagedOutput output(global.json, json_key);
  const int status = CallPages(global, *stub, method, request, [&](const Response& response) {
    Print(global.json ? output.Page(Table({}), json(response)) : output.Page(table(response), {}));
  });
  if (status == kExitOk) Print(output.End());
  return status;
}

sigset_t TerminationSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

}  // namespace

int RunSeries(const GlobalOptions& global, const SeriesCommand& command) {
  v1::ListSeriesRequest request;
  FillSelector(command.stat_glob, command.labels, request.mutable_selector());
  return CallPagesAndPrint(global, &v1::Query::Stub::ListSeries, request, "series", SeriesTable,
                           SeriesJsonElements);
}

int RunWindows(const GlobalOptions& global, const WindowsCommand& command) {
  v1::GetWindowsRequest request;
  FillSelector(command.stat, command.labels, request.mutable_selector());
  request.set_limit_per_series(command.last);
  if (command.since_ms.has_value()) {
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    // 0 means "no lower bound", so a start at or before the epoch becomes 1.
    request.set_start_ms(std::max<int64_t>(now_ms - *command.since_ms, 1));
  }
  return CallPagesAndPrint(global, &v1::Query::Stub::GetWindows, request, "windows",
                           WindowsTable, WindowsJsonElements);
}

int RunRanks(const GlobalOptions& global, const RanksCommand& command) {
  v1::CompareRanksRequest request;
  FillSelector(command.stat, command.labels, request.mutable_selector());
  request.set_aggregation(command.aggregation.aggregation);
  request.set_quantile(command.aggregation.quantile);
  request.set_rank_label(command.rank_label);
  request.set_window_start_ms(command.window_start_ms);
  return CallAndPrint(global, &v1::Query::Stub::CompareRanks, request,
                      [&](const v1::CompareRanksResponse& response) {
                        return global.json ? RenderRanksJson(response, command.aggregation)
                                           : RenderRanksTable(response, command.aggregation);
                      });
}

int RunEvents(const GlobalOptions& global, const EventsCommand& command) {
  v1::GetEventsRequest request;
  request.mutable_selector()->set_name(command.name);
  AddEqualMatchers(command.labels, request.mutable_selector()->mutable_labels());
  request.set_limit(command.last);
  return CallPagesAndPrint(global, &v1::Query::Stub::GetEvents, request, "events", EventsTable,
                           EventsJsonElements);
}

void BlockTerminationSignals() {
  const sigset_t set = TerminationSignals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

int RunWatch(const GlobalOptions& global, const WatchCommand& command) {
  v1::WatchWindowsRequest request;
  FillSelector(command.stat, command.labels, request.mutable_selector());
  auto stub = NewQueryStub(global);
  if (stub == nullptr) return kExitUsage;
  grpc::ClientContext context;  // no deadline: a watch lasts until it is stopped

  // SIGINT/SIGTERM are blocked (BlockTerminationSignals), so this thread can
  // await them and cancel the call; a signal handler could not.
  std::atomic<bool> stream_ended{false};
  std::atomic<bool> interrupted{false};
  std::thread signal_waiter([&] {
    const sigset_t set = TerminationSignals();
    const timespec poll_interval = {0, 100 * 1000 * 1000};
    while (!stream_ended.load()) {
      if (sigtimedwait(&set, nullptr, &poll_interval) > 0) {
        interrupted.store(true);
        context.TryCancel();
        return;
      }
    }
  });

  std::unique_ptr<grpc::ClientReader<v1::WindowSummary>> reader =
      stub->WatchWindows(&context, request);
  v1::WindowSummary window;
  while (reader->Read(&window)) {
    Print(global.json ? RenderWindowJsonLine(window) : RenderWindowLine(window));
  }
  const grpc::Status status = reader->Finish();
  stream_ended.store(true);
  signal_waiter.join();

  if (interrupted.load() || status.ok()) return kExitOk;
  return ReportRpcError(global, status);
}

int RunTop(const GlobalOptions& global, const TopCommand& command) {
  auto stub = NewQueryStub(global);
  if (stub == nullptr) return kExitUsage;
  const bool terminal = isatty(STDOUT_FILENO) != 0 && !global.json;
  // Each series' drop counters at the previous refresh, by its labels.
  std::map<std::pair<std::string, std::map<std::string, std::string>>, v1::SeriesCounters> before;
  const sigset_t signals = TerminationSignals();
  for (int32_t refresh = 0; command.count == 0 || refresh < command.count; ++refresh) {
    if (refresh > 0) {
      const timespec wait = {static_cast<time_t>(command.interval_ms / 1000),
                             static_cast<long>(command.interval_ms % 1000) * 1000 * 1000};
      if (sigtimedwait(&signals, nullptr, &wait) > 0) return kExitOk;  // Ctrl-C
    }
    v1::CompareRanksRequest ranks_request;
    FillSelector("", command.labels, ranks_request.mutable_selector());
    ranks_request.set_aggregation(command.aggregation.aggregation);
    ranks_request.set_quantile(command.aggregation.quantile);
    v1::CompareRanksResponse ranks;
    v1::ListSeriesRequest series_request;
    FillSelector("", command.labels, series_request.mutable_selector());
    if (const int status = Call(global, *stub, &v1::Query::Stub::CompareRanks, ranks_request, ranks);
        status != kExitOk) {
      return status;
    }
    std::vector<SeriesDrops> drops;
    // Every page: a series that drops may be anywhere in the listing.
    const int status = CallPages(
        global, *stub, &v1::Query::Stub::ListSeries, series_request,
        [&](const v1::ListSeriesResponse& series) {
          for (const v1::SeriesInfo& info : series.series()) {
            auto key = std::make_pair(
                info.series().stat(), std::map<std::string, std::string>(
                                          info.series().labels().begin(), info.series().labels().end()));
            const v1::SeriesCounters& now = info.counters();
            const v1::SeriesCounters& then = before[key];  // zero for a new series
            SeriesDrops d;
            d.series = info.series();
            d.capped = now.capped() - std::min(now.capped(), then.capped());
            d.late = now.late() - std::min(now.late(), then.late());
            d.skewed = now.skewed() - std::min(now.skewed(), then.skewed());
            d.client = now.client_dropped() - std::min(now.client_dropped(), then.client_dropped());
            if (d.capped + d.late + d.skewed + d.client > 0) drops.push_back(std::move(d));
            before[key] = now;
          }
        });
    if (status != kExitOk) return status;
    const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch())
                               .count();
    if (global.json) {
      Print(RenderTopJsonLine(now_ms, ranks, command.aggregation, drops));
    } else {
      // A terminal gets a screen redrawn in place; a pipe gets each refresh.
      Print(absl::StrCat(terminal ? "\x1b[H\x1b[2J" : (refresh > 0 ? "\n" : ""),
                         RenderTopTable(now_ms, ranks, command.aggregation, drops)));
    }
  }
  return kExitOk;
}

}  // namespace torchmon::cli

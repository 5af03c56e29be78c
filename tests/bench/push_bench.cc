// The cost of pushing one window of 1k, 10k and 100k series (docs/push.md,
// docs/performance.md "Push"), beside the scrape's (exposition_bench.cc,
// whose series these are: bench_series.h):
//   BM_PushEncode   what the pusher's encoder thread does for one window
//                   end: the requests of one protocol (remote-write:
//                   protobuf + snappy; OTLP: protobuf), in requests of
//                   2,000 series windows; bytes per window reported.
//   BM_PushSend     the same requests POSTed by the exporter's HTTP client
//                   to a loopback receiver that reads and discards them:
//                   what sending adds, on one kept connection (as the
//                   exporters send) or a connection per request; the
//                   connections opened per window reported.
//   BM_CloseWindows what the window timer pays to close the window of
//                   every series, with and without the histogram copies
//                   the push takes (AggregatorOptions::histograms_on_close).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "bench_series.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/push/encode.h"
#include "server/push/http_client.h"
#include "server/push/push_options.h"

namespace torchmon::server {
namespace {

using bench::kClosedMs;
using bench::kT0;

// n series (bench_series.h) with one window each, defined and filled;
// Close() closes it.
struct Series {
  Series(int n, bool histograms, bool histograms_on_close)
      : clock(kT0 + 1), aggregator(Options(histograms_on_close), clock) {
    bench::DefineSeries(aggregator, n, histograms);
  }
  static AggregatorOptions Options(bool histograms_on_close) {
    AggregatorOptions o;
    o.histograms_on_close = histograms_on_close;
    return o;
  }
  std::vector<ClosedWindow> Close() {
    clock.Set(kClosedMs);
    return aggregator.CloseDueWindows();
  }

  ManualClock clock;
  Aggregator aggregator;
};

// One closed window of n series, built once per size and kept.
const std::vector<ClosedWindow>& WindowsOf(int n, bool histograms) {
  static auto* cache = new std::map<std::pair<int, bool>, std::vector<ClosedWindow>>;
  auto& w = (*cache)[{n, histograms}];
  if (w.empty()) {
    Series s(n, histograms, /*histograms_on_close=*/true);
    w = s.Close();
    if (w.size() != static_cast<size_t>(n)) std::abort();
  }
  return w;
}

std::vector<EncodedRequest> EncodeWith(PushProtocol protocol, const std::vector<ClosedWindow>& w) {
  const size_t per_request = PushOptions{}.windows_per_request;
  return protocol == PushProtocol::kRemoteWrite ? EncodeRemoteWrite(w, per_request)
                                                : EncodeOtlp(w, per_request, "bench");
}

void ReportWindow(benchmark::State& state, int n, const std::vector<EncodedRequest>& requests) {
  size_t bytes = 0;
  for (const EncodedRequest& r : requests) bytes += r.body.size();
  state.counters["bytes_per_window"] = static_cast<double>(bytes);
  state.counters["bytes_per_series"] = static_cast<double>(bytes) / n;
  state.counters["requests"] = static_cast<double>(requests.size());
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());  // series windows
}

// Args: series; protocol (0 remote-write, 1 OTLP); a histogram per series.
void BM_PushEncode(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto protocol = static_cast<PushProtocol>(state.range(1));
  const auto& windows = WindowsOf(n, state.range(2) != 0);
  std::vector<EncodedRequest> requests;
  for (auto _ : state) {
    requests = EncodeWith(protocol, windows);
    benchmark::DoNotOptimize(requests.data());
  }
  ReportWindow(state, n, requests);
}
BENCHMARK(BM_PushEncode)
    ->ArgNames({"series", "otlp", "histograms"})
    ->ArgsProduct({{1000, 10000, 100000}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A receiver on loopback that answers 204 to every POST once it has read
// its body: what a remote-write or OTLP endpoint does before storing.
class DiscardingReceiver {
 public:
  DiscardingReceiver() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd_, 64) != 0) {
      std::abort();
    }
    socklen_t len = sizeof(sa);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    port_ = ntohs(sa.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~DiscardingReceiver() {
    stop_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  int port() const { return port_; }
  int64_t connections() const { return connections_.load(std::memory_order_relaxed); }

 private:
  void Serve() {
    static char buf[1 << 16];
    while (!stop_) {
      const int c = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      connections_.fetch_add(1, std::memory_order_relaxed);
      // Requests one after another on the connection, until the client
      // closes it: a receiver that keeps connections, as every one does.
      std::string in;
      bool open = true;
      while (open) {
        size_t end;
        while ((end = in.find("\r\n\r\n")) == std::string::npos) {
          const ssize_t r = read(c, buf, sizeof(buf));
          if (r <= 0) {
            open = false;
            break;
          }
          in.append(buf, static_cast<size_t>(r));
        }
        if (!open) break;
        size_t length = 0;
        const size_t at = in.find("Content-Length: ");
        if (at == std::string::npos || at > end ||
            !absl::SimpleAtoi(in.substr(at + 16, in.find("\r\n", at) - at - 16), &length)) {
          break;
        }
        size_t have = in.size() - end - 4;
        in.clear();
        while (have < length) {
          const ssize_t r = read(c, buf, std::min(sizeof(buf), length - have));
          if (r <= 0) {
            open = false;
            break;
          }
          have += static_cast<size_t>(r);
        }
        if (have > length) break;  // a pipelined request: not sent by the clients here
        static const char kAnswer[] = "HTTP/1.1 204 No Content\r\n\r\n";
        if (write(c, kAnswer, sizeof(kAnswer) - 1) < 0) open = false;
      }
      close(c);
    }
  }
  std::atomic<int64_t> connections_{0};
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Args: series; protocol; kept. Encodes and POSTs a window, as an exporter
// does: on one session kept for the whole run (kept=1, what the exporters
// do), or on a session of its own per request (kept=0: a connection, and
// for https a TLS handshake, per request). Reports the connections opened
// per window.
void BM_PushSend(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto protocol = static_cast<PushProtocol>(state.range(1));
  const bool kept = state.range(2) != 0;
  const auto& windows = WindowsOf(n, false);
  DiscardingReceiver receiver;
  auto endpoint = ParsePushEndpoint(protocol, "bench",
                                    absl::StrCat("http://127.0.0.1:", receiver.port(), "/write"));
  if (!endpoint.ok()) std::abort();
  std::vector<EncodedRequest> requests;
  HttpSession session;
  for (auto _ : state) {
    requests = EncodeWith(protocol, windows);
    for (const EncodedRequest& r : requests) {
      const HttpRequest request{"application/x-protobuf", {}, r.body};
      auto answer = kept ? session.Post(*endpoint, request) : HttpPost(*endpoint, request);
      if (!answer.ok() || answer->status != 204) {
        state.SkipWithError("the receiver did not take a request");
        return;
      }
    }
  }
  state.counters["connections_per_window"] =
      static_cast<double>(receiver.connections()) / static_cast<double>(state.iterations());
  ReportWindow(state, n, requests);
}
BENCHMARK(BM_PushSend)
    ->ArgNames({"series", "otlp", "kept"})
    ->ArgsProduct({{1000, 10000, 100000}, {0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Args: series; histograms_on_close. Every series with p50, p99 and a
// histogram; each iteration closes one window of each (set up untimed).
void BM_CloseWindows(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool copies = state.range(1) != 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto series = std::make_unique<Series>(n, /*histograms=*/true, copies);
    state.ResumeTiming();
    benchmark::DoNotOptimize(series->Close());
    state.PauseTiming();
    series.reset();
    state.ResumeTiming();
  }
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());
}
BENCHMARK(BM_CloseWindows)
    ->ArgNames({"series", "histogram_copies"})
    ->ArgsProduct({{100000}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(5);

}  // namespace
}  // namespace torchmon::server

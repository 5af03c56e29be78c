// The cost of one /metrics scrape for 1k, 10k and 100k series:
//   BM_Exposition   what torchmond does: snapshot + direct writer, in each
//                   format (text 0.0.4, OpenMetrics, protobuf), plain or
//                   gzipped, with or without a native histogram per series;
//   BM_HttpScrape   the same through the real HTTP endpoint over loopback
//                   (HttpServer, chunked), read to the end by a client here;
//   BM_HttpScrapeWhileHeld  10k series through the endpoint while 0 or 256
//                   other connections are held open, idle or with half a
//                   request head sent (the slow peers of docs/security.md);
//   BM_GenericPath  what prometheus-cpp's Exposer would do with the same
//                   data: a ClientMetric per sample, then TextSerializer.
//                   The path torchmond used before; kept here as the
//                   side-by-side baseline, not used by the daemon.
//   BM_ValueSpelling one non-integer value's text, by std::to_chars (this
//                   build's) and by the fallback the portable build's GCC
//                   10 libstdc++ needs (prometheus_text.h).
// Every series has a closed window with three aggregations and the identity
// labels job, rank, local_rank, host (20 stats per rank); with histograms,
// also p50 and p99 and a native histogram of 40 buckets (step times from
// 100 to 237 ms).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
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
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"
#include "server/core/aggregator.h"
#include "server/core/clock.h"
#include "server/core/event_log.h"
#include "server/core/daemon_stats.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "google/protobuf/util/delimited_message_util.h"
#include "io/prometheus/client/metrics.pb.h"
#include "server/exposition/gzip_stream.h"
#include "server/exposition/metrics_exposition.h"
#include "server/exposition/metrics_http_server.h"
#include "server/exposition/prometheus_text.h"

namespace torchmon::server {
namespace {

using bench::kClosedMs;
using bench::kWindowMs;
using bench::kT0;

// N series (bench_series.h), each with one closed window.
struct Exposition {
  Exposition(int n, bool histograms)
      : clock(kT0 + 1),
        aggregator(AggregatorOptions{}, clock),
        events(1000, 600'000, clock),
        exposition(aggregator, events, stats, "bench") {
    bench::DefineSeries(aggregator, n, histograms);
    clock.Set(kClosedMs);
    if (aggregator.CloseDueWindows().size() != static_cast<size_t>(n)) std::abort();
  }

  ManualClock clock;
  Aggregator aggregator;
  EventLog events;
  DaemonStats stats;
  MetricsExposition exposition;
};

// Built once per size and kept for the whole run (repetitions reuse it).
Exposition& ExpositionOf(int n, bool histograms = false) {
  static auto* cache = new std::map<std::pair<int, bool>, std::unique_ptr<Exposition>>;
  auto& e = (*cache)[{n, histograms}];
  if (e == nullptr) e = std::make_unique<Exposition>(n, histograms);
  return *e;
}

// Lines that are samples (not # comments).
size_t SampleLines(absl::string_view text) {
  size_t n = 0;
  for (size_t pos = 0; pos < text.size();) {
    size_t end = text.find('\n', pos);
    if (end == absl::string_view::npos) end = text.size();
    if (end > pos && text[pos] != '#') ++n;
    pos = end + 1;
  }
  return n;
}

void ReportScrape(benchmark::State& state, int n, size_t bytes) {
  state.counters["bytes_per_scrape"] = static_cast<double>(bytes);
  state.counters["bytes_per_series"] = static_cast<double>(bytes) / n;
  state.SetBytesProcessed(static_cast<int64_t>(bytes * state.iterations()));
  state.SetItemsProcessed(static_cast<int64_t>(n) * state.iterations());  // series
}

// Sample lines per series: 3 aggregations, 3 last-window gauges, the
// window size, accepted_total and 4 dropped_total reasons.
constexpr size_t kLinesPerSeries = 12;

// Metrics in a protobuf scrape (every family's), read with the messages
// compiled from Debian's metrics.proto.
size_t ProtobufMetrics(const std::string& bytes) {
  google::protobuf::io::ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  size_t metrics = 0;
  io::prometheus::client::MetricFamily family;
  while (google::protobuf::util::ParseDelimitedFromZeroCopyStream(&family, &input, nullptr)) {
    metrics += static_cast<size_t>(family.metric_size());
  }
  return metrics;
}

// Snapshot + writer, into a sink that only counts (through gzip if asked):
// the daemon's CPU per scrape. Args: series; format (0 text 0.0.4,
// 1 OpenMetrics, 2 protobuf); gzip; a native histogram per series.
void BM_Exposition(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const auto format = static_cast<ExpositionFormat>(state.range(1));
  const bool gzip = state.range(2) != 0;
  const bool histograms = state.range(3) != 0;
  Exposition& e = ExpositionOf(n, histograms);
  size_t bytes = 0;
  for (auto _ : state) {
    size_t sent = 0;
    auto count = [&sent](absl::string_view piece) {
      benchmark::DoNotOptimize(piece.data());
      sent += piece.size();
      return true;
    };
    if (gzip) {
      GzipStream stream(count);
      e.exposition.Render(format, [&](absl::string_view piece) { return stream.Write(piece); });
      stream.Finish();
    } else {
      e.exposition.Render(format, count);
    }
    bytes = sent;
  }
  // Outside the timing: every sample is there.
  const std::string whole = e.exposition.RenderToString(format);
  const size_t samples =
      format == ExpositionFormat::kProtobuf ? ProtobufMetrics(whole) : SampleLines(whole);
  if (samples < n * kLinesPerSeries) state.SkipWithError("exposition is missing samples");
  ReportScrape(state, n, bytes);
  state.counters["uncompressed_bytes"] = static_cast<double>(whole.size());
}

// --- the real endpoint -------------------------------------------------------

// GET /metrics over HTTP/1.1 and read the response to its end (the final
// zero-length chunk), discarding it as a scraper that parses as it reads
// would; `keep` (optional) receives the whole response. Returns the bytes
// received, or 0 on failure.
size_t HttpScrape(int port, std::string* keep, const std::string& headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return 0;
  }
  const std::string request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n" +
                              headers + "\r\n";
  if (write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return 0;
  }
  static char chunk[1 << 18];
  std::string tail;  // the last bytes seen, to check the terminator
  size_t total = 0;
  ssize_t r;
  while ((r = read(fd, chunk, sizeof(chunk))) > 0) {
    total += static_cast<size_t>(r);
    if (keep != nullptr) keep->append(chunk, static_cast<size_t>(r));
    tail.append(chunk, static_cast<size_t>(r));
    if (tail.size() > 64) tail.erase(0, tail.size() - 64);
  }
  close(fd);
  return absl::EndsWith(tail, "\r\n0\r\n\r\n") ? total : 0;
}

// Starts the metrics endpoint of `e` on a free loopback port into `server`;
// its port, or 0 after marking the benchmark skipped.
int ServeOnLoopback(Exposition& e, DaemonStats& stats, std::unique_ptr<MetricsHttpServer>& server,
                    benchmark::State& state) {
  auto started = MetricsHttpServer::Start("127.0.0.1:0", e.exposition, stats);
  if (!started.ok()) {
    state.SkipWithError(std::string(started.status().message()).c_str());
    return 0;
  }
  server = *std::move(started);
  int port = 0;
  const std::string& address = server->address();
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) {
    state.SkipWithError("no port");
    return 0;
  }
  return port;
}

// Args: series; the Accept header of format 0 (none: text 0.0.4), 1
// (OpenMetrics) or 2 (protobuf, as Prometheus with native histograms asks);
// Accept-Encoding: gzip (as Prometheus always asks).
void BM_HttpScrape(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const int64_t format = state.range(1);
  const bool gzip = state.range(2) != 0;
  std::string headers;
  if (format == 1) headers += "Accept: application/openmetrics-text;version=1.0.0\r\n";
  if (format == 2) {
    headers +=
        "Accept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
        "encoding=delimited\r\n";
  }
  if (gzip) headers += "Accept-Encoding: gzip\r\n";
  Exposition& e = ExpositionOf(n);
  DaemonStats http_stats;
  std::unique_ptr<MetricsHttpServer> server;
  const int port = ServeOnLoopback(e, http_stats, server, state);
  if (port == 0) return;
  size_t bytes = 0;
  for (auto _ : state) {
    bytes = HttpScrape(port, nullptr, headers);
    if (bytes == 0) return state.SkipWithError("scrape failed or was cut short");
  }
  // Outside the timing: one more scrape, kept, must hold every sample line
  // (chunk framing adds a few bytes per 256 KiB); BM_Exposition checks the
  // other formats' content.
  std::string whole;
  if (HttpScrape(port, &whole, headers) == 0 ||
      (format == 0 && !gzip && SampleLines(whole) < n * kLinesPerSeries)) {
    state.SkipWithError("scrape is missing samples");
  }
  ReportScrape(state, n, bytes);
}

// Args: connections held open while scraping 10k series: half idle, half
// with half a request head sent.
void BM_HttpScrapeWhileHeld(benchmark::State& state) {
  const int held = static_cast<int>(state.range(0));
  Exposition& e = ExpositionOf(10'000);
  DaemonStats http_stats;
  std::unique_ptr<MetricsHttpServer> server;
  const int port = ServeOnLoopback(e, http_stats, server, state);
  if (port == 0) return;
  std::vector<int> fds;
  for (int i = 0; i < held; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in local{};
    local.sin_family = AF_INET;
    // 16 per address, under the bound per address.
    local.sin_addr.s_addr = htonl(0x7f000100u + static_cast<uint32_t>(i / 16));
    bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(static_cast<uint16_t>(port));
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
      return state.SkipWithError("cannot hold a connection");
    }
    if (i % 2 == 1) {
      const char half[] = "GET /metrics HTTP/1.1\r\nHost: x\r\n";
      if (send(fd, half, sizeof(half) - 1, MSG_NOSIGNAL) < 0) return state.SkipWithError("send");
    }
    fds.push_back(fd);
  }
  size_t bytes = 0;
  for (auto _ : state) {
    bytes = HttpScrape(port, nullptr, "");
    if (bytes == 0) return state.SkipWithError("scrape failed or was cut short");
  }
  state.counters["held_open"] = static_cast<double>(http_stats.http.open.load());
  for (int fd : fds) close(fd);
  ReportScrape(state, 10'000, bytes);
}

// --- the generic path, for comparison ----------------------------------------

// The same series as prometheus-cpp MetricFamily objects, as the Collectable
// torchmond used to serve them through the Exposer: a label vector per
// sample, then TextSerializer.
std::vector<prometheus::MetricFamily> CollectGeneric(const Aggregator& aggregator) {
  using prometheus::ClientMetric;
  using prometheus::MetricFamily;
  auto family = [](std::string name, prometheus::MetricType type) {
    MetricFamily f;
    f.name = std::move(name);
    f.help = "help";
    f.type = type;
    return f;
  };
  auto add = [](MetricFamily& f, std::vector<ClientMetric::Label> labels, double v) {
    ClientMetric m;
    m.label = std::move(labels);
    if (f.type == prometheus::MetricType::Counter) {
      m.counter.value = v;
    } else {
      m.gauge.value = v;
    }
    f.metric.push_back(std::move(m));
  };
  std::vector<MetricFamily> fs = {
      family("torchmon_stat", prometheus::MetricType::Gauge),
      family("torchmon_window_accepted_samples", prometheus::MetricType::Gauge),
      family("torchmon_window_capped_samples", prometheus::MetricType::Gauge),
      family("torchmon_window_end_timestamp_seconds", prometheus::MetricType::Gauge),
      family("torchmon_window_size_seconds", prometheus::MetricType::Gauge),
      family("torchmon_samples_accepted_total", prometheus::MetricType::Counter),
      family("torchmon_samples_dropped_total", prometheus::MetricType::Counter)};
  aggregator.ForEachSeries([&](const Aggregator::SeriesView& s) {
    std::vector<ClientMetric::Label> base = {{"stat", s.key->stat}};
    for (const auto& [k, v] : s.key->labels) base.push_back({k, v});
    add(fs[4], base, static_cast<double>(s.spec.window_ms) / 1000.0);
    add(fs[5], base, static_cast<double>(s.counters.accepted));
    const std::pair<const char*, uint64_t> reasons[] = {{"capped", s.counters.capped},
                                                        {"late", s.counters.late},
                                                        {"skewed", s.counters.skewed},
                                                        {"client", s.counters.client_dropped}};
    for (const auto& [reason, count] : reasons) {
      auto labels = base;
      labels.push_back({"reason", reason});
      add(fs[6], std::move(labels), static_cast<double>(count));
    }
    if (s.last_window == nullptr) return;
    for (Aggregation a : kAllAggregations) {
      if (!Contains(s.spec.aggregations, a)) continue;
      auto labels = base;
      labels.insert(labels.begin() + 1, {"agg", AggregationName(a)});
      add(fs[0], std::move(labels), s.last_window->stats.Get(a));
    }
    add(fs[1], base, static_cast<double>(s.last_window->stats.accepted));
    add(fs[2], base, static_cast<double>(s.last_window->stats.capped));
    add(fs[3], base, static_cast<double>(s.last_window->start_ms + s.spec.window_ms) / 1000.0);
  });
  return fs;
}

void BM_GenericPath(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  Exposition& e = ExpositionOf(n);
  size_t bytes = 0;
  size_t lines = 0;
  for (auto _ : state) {
    std::string text = prometheus::TextSerializer().Serialize(CollectGeneric(e.aggregator));
    bytes = text.size();
    state.PauseTiming();
    lines = SampleLines(text);
    state.ResumeTiming();
  }
  if (lines != n * kLinesPerSeries) {
    state.SkipWithError(absl::StrCat("generic path has ", lines, " samples, not ", n * kLinesPerSeries).c_str());
  }
  ReportScrape(state, n, bytes);
}

// AddSamples (one sample) while another thread scrapes without pause: how
// long ingestion can wait behind a scrape. The walk takes the aggregator's
// lock per chunk of series, so the wait is bounded by one chunk, not by the
// number of series. Reports the 99.9th percentile and the maximum.
// Args: series, scraping (0: a thread that only spins, the baseline for
// what preemption alone costs on this machine).
void BM_IngestDuringScrape(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const bool scraping = state.range(1) != 0;
  Exposition& e = ExpositionOf(n);
  auto id = e.aggregator.Define(SeriesKey{"ingest.probe", {{"rank", "0"}}},
                                StatSpec{AggregationBit(Aggregation::kSum), kWindowMs, 0, {}});
  if (!id.ok()) return state.SkipWithError("Define failed");
  std::atomic<bool> stop{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (!stop.load()) {
      if (scraping) e.exposition.Render(ExpositionFormat::kText, [](absl::string_view) { return true; });
      scrapes.fetch_add(1);
    }
  });
  // Measure only while scrapes run back to back.
  while (scrapes.load() == 0) std::this_thread::yield();
  const int scrapes_before = scrapes.load();
  std::vector<double> waits_us;
  const double v = 1;
  for (auto _ : state) {
    const int64_t ts = e.clock.NowMs() * 1000;
    const auto start = std::chrono::steady_clock::now();
    auto r = e.aggregator.AddSamples(*id, {&v, 1}, {&ts, 1});
    const auto end = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(r);
    waits_us.push_back(std::chrono::duration<double, std::micro>(end - start).count());
  }
  const int scrapes_during = scrapes.load() - scrapes_before;
  stop = true;
  scraper.join();
  std::sort(waits_us.begin(), waits_us.end());
  state.counters["scrapes_during"] = scrapes_during;
  state.counters["p999_us"] = waits_us[waits_us.size() * 999 / 1000];
  state.counters["max_us"] = waits_us.back();
}

// Means and quantiles as a step-time series has them: not integers, most
// of them 15 to 17 significant digits.
void BM_ValueSpelling(benchmark::State& state) {
  std::vector<double> values;
  uint64_t x = 88172645463325252ull;  // xorshift64: the same values every run
  for (int i = 0; i < 4096; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    values.push_back(static_cast<double>(x % 1'000'000) / 7.0 + 0.25);
  }
  const bool fallback = state.range(0) == 1;
  char buf[32];
  size_t i = 0;
  for (auto _ : state) {
    const double v = values[i++ % values.size()];
#if defined(__cpp_lib_to_chars)
    char* end = fallback ? internal::WriteShortestRoundTrip(buf, v)
                         : std::to_chars(buf, buf + sizeof buf, v).ptr;
#else
    char* end = internal::WriteShortestRoundTrip(buf, v);
#endif
    benchmark::DoNotOptimize(end);
    benchmark::ClobberMemory();
  }
  state.SetLabel(fallback ? "WriteShortestRoundTrip" : "std::to_chars");
}

BENCHMARK(BM_Exposition)
    ->Args({1'000, 0, 0, 0})
    ->Args({10'000, 0, 0, 0})
    // 100k series, every format, plain and gzipped, without and with histograms.
    ->ArgsProduct({{100'000}, {0, 1, 2}, {0, 1}, {0, 1}})
    ->ArgNames({"series", "format", "gzip", "histograms"})
    ->Unit(benchmark::kMillisecond)
    // Wall time: gzip compresses on GzipStream::DefaultThreads() threads.
    ->UseRealTime();
BENCHMARK(BM_HttpScrape)
    ->Args({1'000, 0, 0})
    ->Args({10'000, 0, 0})
    ->ArgsProduct({{100'000}, {0, 1, 2}, {0, 1}})
    ->ArgNames({"series", "format", "gzip"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_HttpScrapeWhileHeld)
    ->Arg(0)
    ->Arg(256)
    ->ArgName("held")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_ValueSpelling)->Arg(0)->Arg(1)->ArgName("fallback");
BENCHMARK(BM_GenericPath)->Arg(1'000)->Arg(10'000)->Arg(100'000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_IngestDuringScrape)
    ->Args({100'000, 0})
    ->Args({100'000, 1})
    ->MinTime(2.0)
    ->UseRealTime();

}  // namespace
}  // namespace torchmon::server

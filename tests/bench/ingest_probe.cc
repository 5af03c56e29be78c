// torchmon-ingest-probe: how long one sample takes to be ingested, measured
// from a client beside other load: add one sample, Flush (which returns once
// the daemon acknowledged the batch, after applying it under the
// aggregator's lock), repeat. Used by tests/bench/listing_under_load.py to
// compare ingest latency with and without a full listing running.
//
//   torchmon-ingest-probe --target unix:///path --duration-ms N [--interval-ms 5]
//
// Runs for N ms or until SIGTERM/SIGINT, then prints one JSON object:
// flushes, p50/p90/p99/max in microseconds.
#include <csignal>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "torchmon/client.h"

namespace {

std::atomic<bool> stop{false};

void Stop(int /*signal*/) { stop.store(true); }

int Usage() {
  std::fprintf(stderr,
               "usage: torchmon-ingest-probe --target ADDR --duration-ms N [--interval-ms N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string target;
  int64_t duration_ms = 0;
  int64_t interval_ms = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--target") {
      target = argv[i + 1];
    } else if (flag == "--duration-ms") {
      if (!absl::SimpleAtoi(argv[i + 1], &duration_ms)) return Usage();
    } else if (flag == "--interval-ms") {
      if (!absl::SimpleAtoi(argv[i + 1], &interval_ms)) return Usage();
    } else {
      return Usage();
    }
  }
  if (target.empty() || duration_ms <= 0 || argc % 2 == 0) return Usage();

  std::signal(SIGTERM, Stop);
  std::signal(SIGINT, Stop);
  torchmon::ClientOptions options;
  options.target = target;
  options.labels = {{"probe", "ingest"}};
  options.labels_from_environment = false;
  torchmon::Client client(options);
  torchmon::Stat stat(client, "probe.ingest_latency", {torchmon::Aggregation::COUNT},
                      std::chrono::seconds(1));
  // The definition and the stream first, outside the measurement.
  if (!client.Flush(std::chrono::seconds(30)).ok()) {
    std::fprintf(stderr, "torchmon-ingest-probe: cannot reach %s\n", target.c_str());
    return 3;
  }
  std::vector<double> us;
  int failed = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms);
  while (!stop.load() && std::chrono::steady_clock::now() < end) {
    const auto start = std::chrono::steady_clock::now();
    stat.add(1);
    if (client.Flush(std::chrono::seconds(10)).ok()) {
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() -
                                                             start)
                       .count());
    } else {
      ++failed;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
  std::sort(us.begin(), us.end());
  auto at = [&](double q) {
    return us.empty() ? 0.0 : us[std::min(us.size() - 1, static_cast<size_t>(q * us.size()))];
  };
  std::printf(
      "{\"flushes\":%zu,\"failed\":%d,\"p50_us\":%.0f,\"p90_us\":%.0f,\"p99_us\":%.0f,"
      "\"max_us\":%.0f}\n",
      us.size(), failed, at(0.5), at(0.9), at(0.99), us.empty() ? 0.0 : us.back());
  return failed == 0 ? 0 : 1;
}

// torchmon_load_client: a training process stand-in for the fault tests.
// Adds samples to N stats at a steady rate until SIGTERM/SIGINT, then
// flushes (bounded) and prints its accounting, one line per stat:
//   stat <name> added=A dropped=D delivered=V drops_reported=R current_delivered=C current_drops=K
//   client flush=<OK|message> restarts=N resent=B errors=E
// and "ready" once its stats exist, so a test knows when load has begun.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "torchmon/client.h"

namespace {

// Atomic, not volatile sig_atomic_t: the kernel may run the handler on any
// thread (the client's sender, say), and the main loop reads the flag.
std::atomic<bool> g_stop{false};
static_assert(std::atomic<bool>::is_always_lock_free, "set from a signal handler");
void OnSignal(int) { g_stop.store(true, std::memory_order_relaxed); }

struct Flags {
  std::string target;
  std::string rank = "0";
  int stats = 4;
  int64_t rate = 10'000;  // samples per second, all stats together
  int64_t window_ms = 100;
  int64_t flush_ms = 5000;
  size_t buffer_bytes = torchmon::ClientOptions{}.buffer_bytes;
  // "ones": every sample is 1.0; "seq": each stat's samples are 1, 2, 3...,
  // so that the sum of a stat's windows says which samples they hold (the
  // restart tests compute it independently: n(n+1)/2 for n added).
  std::string values = "ones";
  // Stats are named <prefix><i>.
  std::string prefix = "load.s";
};

bool Parse(int argc, char** argv, Flags* f) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i];
    const char* v = argv[i + 1];
    bool ok = true;
    if (key == "--target") f->target = v;
    else if (key == "--rank") f->rank = v;
    else if (key == "--stats") ok = absl::SimpleAtoi(v, &f->stats);
    else if (key == "--rate") ok = absl::SimpleAtoi(v, &f->rate);
    else if (key == "--window-ms") ok = absl::SimpleAtoi(v, &f->window_ms);
    else if (key == "--flush-ms") ok = absl::SimpleAtoi(v, &f->flush_ms);
    else if (key == "--buffer-bytes") ok = absl::SimpleAtoi(v, &f->buffer_bytes);
    else if (key == "--values") ok = (f->values = v) == "ones" || f->values == "seq";
    else if (key == "--prefix") f->prefix = v;
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "bad flag %s %s\n", key.c_str(), v);
      return false;
    }
  }
  return !f->target.empty();
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  if (!Parse(argc, argv, &flags)) {
    std::fprintf(stderr, "usage: torchmon_load_client --target T [--rank R] [--stats N] ...\n");
    return 2;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  torchmon::ClientOptions options;
  options.target = flags.target;
  options.labels_from_environment = false;
  options.labels = {{"rank", flags.rank}};
  options.buffer_bytes = flags.buffer_bytes;
  options.initial_backoff = std::chrono::milliseconds(20);
  options.max_backoff = std::chrono::milliseconds(200);
  options.destructor_flush_timeout = std::chrono::milliseconds(0);
  options.log_to_stderr = false;
  auto client = std::make_unique<torchmon::Client>(options);
  std::vector<std::unique_ptr<torchmon::Stat>> stats;
  for (int i = 0; i < flags.stats; ++i) {
    stats.push_back(std::make_unique<torchmon::Stat>(
        *client, absl::StrCat(flags.prefix, i),
        std::vector<torchmon::StatAggregation>{torchmon::Aggregation::COUNT,
                                           torchmon::Aggregation::SUM},
        std::chrono::milliseconds(flags.window_ms)));
  }
  std::printf("ready\n");
  std::fflush(stdout);

  // 1 ms ticks; each adds its share of the rate, spread over the stats.
  const auto start = std::chrono::steady_clock::now();
  int64_t done = 0;
  while (!g_stop.load(std::memory_order_relaxed)) {
    const auto elapsed = std::chrono::duration_cast<std::chrono::microseconds>(
        std::chrono::steady_clock::now() - start);
    const int64_t due = elapsed.count() * flags.rate / 1'000'000;
    for (; done < due; ++done) {
      const size_t stat = static_cast<size_t>(done) % stats.size();
      const double value =
          flags.values == "seq" ? static_cast<double>(done / static_cast<int64_t>(stats.size()) + 1)
                                : 1.0;
      stats[stat]->add(value);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  const absl::Status flushed = client->Flush(std::chrono::milliseconds(flags.flush_ms));
  const torchmon::ClientStats s = client->Stats();
  const std::vector<std::string> errors = client->TakeErrors();
  // Stopping the client counts whatever it could not deliver as dropped.
  client.reset();
  for (const auto& stat : stats) {
    const torchmon::StatCounters c = stat->counters();
    std::printf("stat %s added=%llu dropped=%llu delivered=%llu drops_reported=%llu "
                "current_delivered=%llu current_drops=%llu\n",
                stat->name().c_str(), static_cast<unsigned long long>(c.added),
                static_cast<unsigned long long>(c.dropped),
                static_cast<unsigned long long>(c.delivered),
                static_cast<unsigned long long>(c.drops_reported),
                static_cast<unsigned long long>(c.delivered_to_current_daemon),
                static_cast<unsigned long long>(c.drops_reported_to_current_daemon));
  }
  std::printf("client flush=%s restarts=%llu resent=%llu errors=%llu\n",
              flushed.ok() ? "OK" : "FAILED", static_cast<unsigned long long>(s.daemon_restarts),
              static_cast<unsigned long long>(s.batches_resent),
              static_cast<unsigned long long>(s.errors));
  for (const std::string& e : errors) std::printf("error %s\n", e.c_str());
  std::fflush(stdout);
  return 0;
}

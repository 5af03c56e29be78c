// The cost of recording one sample in the training process: the clock read
// alone (the floor), the StatState path behind Stat::add with a consumer
// draining the buffer as the sender thread does, and the real Stat::add with a
// Client streaming to a real torchmond child process.
//
// Every benchmark reports items_per_second over all its threads; the
// "dropped" counter is the fraction of adds that found no room (then
// the figure measures the drop path, not the push, and should be discounted).
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "detail/stat_state.h"
#include "detail/wall_clock.h"
#include "detail/wire_batch.h"
#include "google/protobuf/arena.h"
#include "tests/support/daemon_process.h"
#include "torchmon/client.h"
#include "torchmon/v1/torchmon.pb.h"
#include "torchmon/wait_counter.h"

namespace torchmon {
namespace {

// The same clock read as Stat::add (client/src/stat.cc).
inline int64_t NowMicros() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// Samples one run adds to a stat. A tight add() loop outpaces what the
// sender and daemon sustain on two cores, so a run must fit what a stat may
// buffer with default options from its first add (its first eight chunks,
// about 58,000 samples: SampleLog) whatever the sender manages meanwhile,
// or it would measure the drop path.
constexpr size_t kRunSamples = size_t{1} << 15;

void BM_ClockGettimeRealtime(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(NowMicros());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_ClockGettimeRealtime)->Threads(1)->MinTime(0.1);

#if defined(__x86_64__)
// The TSC read Stat::add stamps with (detail::WallClock::NowMicros), back
// to back: its throughput bounds a tight loop of adds.
void BM_Rdtsc(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(__rdtsc());
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_Rdtsc)->Threads(1)->MinTime(0.1);
#endif

// --- StatState::Add (Stat::add after the timestamp) -------------------------
//
// The push alone: Stat::add minus the clock read and the out-of-line call.
// No consumer runs concurrently: every kDrainEvery adds a thread drains the
// logs with the timer paused, as the sender drains in bulk once per send
// interval. A concurrent consumer thread that naps cannot keep up with
// pushes of a few ns on two cores, and one that spins takes a core from the
// producers; either way the figure would be the drop path's.

constexpr int kDrainEvery = 4096;

struct BufferFixture {
  explicit BufferFixture(size_t budget_bytes)
      : buffers(std::make_shared<detail::ClientBuffers>(budget_bytes)) {
    for (int i = 0; i < 2; ++i) {
      v1::StatDefinition def;
      def.set_id(static_cast<uint32_t>(i + 1));
      def.set_name("bench.stat");
      stats.push_back(std::make_unique<detail::StatState>(def, true, buffers));
    }
  }
  uint64_t added() const { return stats[0]->added() + stats[1]->added(); }
  uint64_t rejected() const {
    return stats[0]->counts.rejected.load(std::memory_order_relaxed) +
           stats[1]->counts.rejected.load(std::memory_order_relaxed);
  }
  // The single consumer, whichever thread calls it: takes every log's
  // samples and counts them to their stats, as the sender does.
  void Drain() {
    absl::MutexLock lock(&buffers->drain_mu);
    double sum = 0;
    for (auto& l : buffers->logs) {
      while (l.log.Drain(buffers->pool, uint64_t{1} << 16,
                         [&](double value, int64_t, uint32_t id) {
                           sum += value;
                           detail::Bump(buffers->sent.At(id).taken, 1);
                         }) != 0) {
      }
    }
    checksum.store(checksum.load(std::memory_order_relaxed) + sum, std::memory_order_relaxed);
  }
  std::shared_ptr<detail::ClientBuffers> buffers;
  std::vector<std::unique_ptr<detail::StatState>> stats;
  std::atomic<double> checksum{0};
};

// Shared by the threads of one run: the first thread to arrive creates it,
// thread 0 lets go of the global after the loop and the last holder destroys
// it.
absl::Mutex g_ring_mu;
std::shared_ptr<BufferFixture> g_ring ABSL_GUARDED_BY(g_ring_mu);

std::shared_ptr<BufferFixture> AcquireRing(size_t budget_bytes) {
  absl::MutexLock lock(&g_ring_mu);
  if (g_ring == nullptr) g_ring = std::make_shared<BufferFixture>(budget_bytes);
  return g_ring;
}

void RunStatStateAdd(benchmark::State& state, bool shared_stat) {
  const std::shared_ptr<BufferFixture> ring = AcquireRing(size_t{1} << state.range(0));
  // No thread adds before the loop's start barrier, so thread 0 reads
  // quiescent counters here and after the loop's stop barrier.
  const uint64_t added_before = ring->added();
  const uint64_t rejected_before = ring->rejected();
  detail::StatState& stat = *ring->stats[shared_stat ? 0 : state.thread_index() % 2];
  double v = 0;
  int64_t timestamp_us = 1'700'000'000'000'000;
  int until_drain = kDrainEvery;
  for (auto _ : state) {
    stat.Add(v, timestamp_us);
    v += 1;
    ++timestamp_us;
    if (--until_drain == 0) {
      state.PauseTiming();
      ring->Drain();
      state.ResumeTiming();
      until_drain = kDrainEvery;
    }
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    const uint64_t added = ring->added() - added_before;
    const uint64_t rejected = ring->rejected() - rejected_before;
    state.counters["dropped"] = added == 0 ? 0 : static_cast<double>(rejected) / added;
    absl::MutexLock lock(&g_ring_mu);
    g_ring.reset();
  }
}

void BM_StatStateAdd_SeparateStats(benchmark::State& state) { RunStatStateAdd(state, false); }
void BM_StatStateAdd_SameStat(benchmark::State& state) { RunStatStateAdd(state, true); }
// Arg: log2 of the client's budget in bytes: the default 2^25 (32 MiB). The
// drains every kDrainEvery adds keep each stat in a few chunks, as the
// sender does.
BENCHMARK(BM_StatStateAdd_SeparateStats)
    ->Arg(25)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime()
    ->MinTime(0.1);
BENCHMARK(BM_StatStateAdd_SameStat)->Arg(25)->Threads(2)->UseRealTime()->MinTime(0.1);

// --- Stat::add end to end ---------------------------------------------------

// The options of every Client these benchmarks make of `daemon`.
ClientOptions BenchClientOptions(const testing::DaemonProcess& daemon) {
  ClientOptions options;
  options.target = daemon.unix_target();
  options.labels_from_environment = false;
  options.labels = {{"job", "bench"}};
  options.client_name = "torchmon_benchmarks";
  return options;
}

// One torchmond child process and one Client for the whole run, created on
// first use (only if these benchmarks are selected) and stopped at exit.
struct DaemonFixture {
  testing::TempDir dir;
  std::unique_ptr<testing::DaemonProcess> daemon;
  std::unique_ptr<Client> client;
  std::vector<std::unique_ptr<Stat>> stats;

  DaemonFixture() {
    auto d = testing::DaemonProcess::Start(dir);
    if (!d.ok()) {
      std::fprintf(stderr, "cannot start torchmond: %s\n", d.status().ToString().c_str());
      std::abort();
    }
    daemon = *std::move(d);
    client = std::make_unique<Client>(BenchClientOptions(*daemon));
    for (const char* name : {"bench.add0", "bench.add1"}) {
      stats.push_back(std::make_unique<Stat>(
          *client, name, std::vector<torchmon::StatAggregation>{Aggregation::MEAN}, std::chrono::seconds(10)));
    }
    // add(v) stamps with clock_gettime until the sender has calibrated the
    // TSC (two points 10 ms apart, taken on its cycles): ~9 ns more per add
    // here. Measure the steady state, not a mix that depends on how soon the
    // runs start.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (!detail::WallClock::UsesTsc() && std::chrono::steady_clock::now() < deadline) {
      stats[0]->add(0);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  ~DaemonFixture() {
    stats.clear();
    client.reset();  // flushes
  }
};

DaemonFixture& Daemon() {
  // Destroyed at exit: the Client flushes, then the daemon is stopped and
  // reaped and its temp directory removed.
  static DaemonFixture fixture;
  return fixture;
}

void RunStatAdd(benchmark::State& state, bool shared_stat) {
  DaemonFixture* f = nullptr;
  uint64_t dropped_before = 0;
  if (state.thread_index() == 0) {
    f = &Daemon();
    // Start each run with empty buffers so that the run measures pushes.
    if (!f->client->Flush(std::chrono::seconds(10)).ok()) {
      state.SkipWithError("Flush before the run failed");
    }
    for (const auto& s : f->stats) dropped_before += s->dropped();
  }
  // Daemon() is a magic static: every thread sees the one fixture.
  Stat* stat = Daemon().stats[shared_stat ? 0 : state.thread_index() % 2].get();
  double v = 0;
  for (auto _ : state) {
    stat->add(v);
    v += 1;
  }
  state.SetItemsProcessed(state.iterations());
  if (state.thread_index() == 0) {
    // 1 when add(v) read the calibrated TSC, 0 when clock_gettime.
    state.counters["tsc"] = detail::WallClock::UsesTsc() ? 1 : 0;
    uint64_t dropped = 0;
    for (const auto& s : f->stats) dropped += s->dropped();
    dropped -= dropped_before;
    state.counters["dropped"] = static_cast<double>(dropped);
    // A sample that finds no room takes the cheaper drop path: a run
    // with drops would not measure add().
    if (dropped != 0) state.SkipWithError("samples were dropped; the figure would mix in drops");
  }
}

void BM_StatAdd_SeparateStats(benchmark::State& state) { RunStatAdd(state, false); }
void BM_StatAdd_SameStat(benchmark::State& state) { RunStatAdd(state, true); }
// Each run adds at most kRunSamples per stat (the buffers are emptied
// before every run).
BENCHMARK(BM_StatAdd_SeparateStats)
    ->Threads(1)
    ->Threads(2)
    ->Iterations(kRunSamples)
    ->UseRealTime();
BENCHMARK(BM_StatAdd_SameStat)->Threads(2)->Iterations(kRunSamples / 2)->UseRealTime();

// --- Stat::add: the steady state and the first touch, apart -----------------
//
// BM_StatAdd_SeparateStats mixes costs in its short runs: the adds into
// chunks the thread's log had just given back, the chunk changes of a log
// that starts small after every flush, and whatever the sender and the
// daemon take from the two cores meanwhile. These two say each part alone.
//
// Steady: one stat, warmed by a burst first, then bursts of kBurstSamples
// adds each after a flush (timed: the adds only), 256 of them: a thread
// adding for about a second in all to chunks its log has written before,
// never dropping (a burst is far under what one log holds after a flush,
// about 0.9 M samples with the default budget, whatever the sender does
// meanwhile). First touch: each burst on a new Client and a new stat, so
// every chunk it writes is fresh memory of a new budget (the start-up of
// a process: its first few hundred thousand samples).
//
// Both report, for the adding thread over the timed adds only (not the
// flushes): its page faults (getrusage RUSAGE_THREAD) per sample and per
// burst, its CPU time per sample (CLOCK_THREAD_CPUTIME_ID) beside the real
// time (items_per_second), and how often it was switched out. Real time
// well over CPU time means the thread waited for a core (the sender, the
// daemon, a neighbour's steal), not that add() got slower.

// Samples per burst: 6 MiB of cells, in 8 chunks of a new log.
constexpr size_t kBurstSamples = size_t{1} << 18;

struct ThreadUsage {
  int64_t minor_faults = 0;
  int64_t cpu_ns = 0;
  int64_t switches = 0;  // involuntary context switches
  static ThreadUsage Now() {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    timespec cpu{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    return {u.ru_minflt, static_cast<int64_t>(cpu.tv_sec) * 1'000'000'000 + cpu.tv_nsec,
            u.ru_nivcsw};
  }
  ThreadUsage operator-(const ThreadUsage& o) const {
    return {minor_faults - o.minor_faults, cpu_ns - o.cpu_ns, switches - o.switches};
  }
  ThreadUsage& operator+=(const ThreadUsage& o) {
    minor_faults += o.minor_faults;
    cpu_ns += o.cpu_ns;
    switches += o.switches;
    return *this;
  }
};

// A client of the fixture's daemon and one stat on it.
struct BurstClient {
  std::unique_ptr<Client> client;
  std::unique_ptr<Stat> stat;
  explicit BurstClient(const DaemonFixture& f) {
    client = std::make_unique<Client>(BenchClientOptions(*f.daemon));
    stat = std::make_unique<Stat>(*client, "bench.burst",
                                  std::vector<torchmon::StatAggregation>{Aggregation::MEAN},
                                  std::chrono::seconds(10));
  }
};

void RunStatAddBursts(benchmark::State& state, bool fresh_client) {
  DaemonFixture& f = Daemon();  // waits for the TSC's calibration
  auto burst = std::make_unique<BurstClient>(f);
  double v = 0;
  if (!fresh_client) {
    for (size_t i = 0; i < kBurstSamples; ++i) burst->stat->add(v += 1);  // warms its chunks
  }
  uint64_t dropped = 0;
  ThreadUsage used;
  int64_t bursts = 0;
  for (auto _ : state) {
    state.PauseTiming();
    if (fresh_client) {
      dropped += burst->stat->dropped();
      burst = std::make_unique<BurstClient>(f);  // the last one flushes as it goes
    }
    // Empty logs, and (for a new client) connected with its stat defined.
    if (!burst->client->Flush(std::chrono::seconds(10)).ok()) {
      state.SkipWithError("Flush before a burst failed");
      break;
    }
    const ThreadUsage before = ThreadUsage::Now();
    state.ResumeTiming();
    Stat& stat = *burst->stat;
    for (size_t i = 0; i < kBurstSamples; ++i) stat.add(v += 1);
    state.PauseTiming();
    used += ThreadUsage::Now() - before;
    state.ResumeTiming();
    ++bursts;
  }
  dropped += burst->stat->dropped();
  const double samples = static_cast<double>(bursts) * kBurstSamples;
  const double per_burst = bursts > 0 ? 1.0 / static_cast<double>(bursts) : 0;
  state.SetItemsProcessed(static_cast<int64_t>(samples));
  state.counters["faults_per_sample"] = samples > 0 ? used.minor_faults / samples : 0;
  state.counters["faults_per_burst"] = used.minor_faults * per_burst;
  state.counters["cpu_ns_per_sample"] = samples > 0 ? used.cpu_ns / samples : 0;
  state.counters["switches_per_burst"] = used.switches * per_burst;
  state.counters["tsc"] = detail::WallClock::UsesTsc() ? 1 : 0;
  state.counters["dropped"] = static_cast<double>(dropped);
  if (dropped != 0) state.SkipWithError("samples were dropped; the figure would mix in drops");
}

void BM_StatAdd_Steady(benchmark::State& state) { RunStatAddBursts(state, false); }
void BM_StatAdd_FirstTouch(benchmark::State& state) { RunStatAddBursts(state, true); }
// Per iteration: a burst of kBurstSamples adds; ns per sample is the time
// over items (items_per_second).
BENCHMARK(BM_StatAdd_Steady)->Iterations(256)->UseRealTime();
BENCHMARK(BM_StatAdd_FirstTouch)->Iterations(32)->UseRealTime();

// --- A wait counter's begin/end pair ------------------------------------------
//
// What each of PyTorch's own waits costs once torchmon records them
// (torchmon::WaitCounter, behind the c10 backend in _torchmon: one atomic
// load more there): three samples, the in-flight count at begin and end and
// the wait at end. Both calls on one thread, as c10's guard makes them.
void BM_WaitCounterBeginEnd(benchmark::State& state) {
  DaemonFixture& f = Daemon();
  if (!f.client->Flush(std::chrono::seconds(10)).ok()) {
    state.SkipWithError("Flush before the run failed");
  }
  static WaitCounter* counter = new WaitCounter(*f.client, "bench.wait");
  for (auto _ : state) {
    counter->Begin();
    counter->End(std::chrono::nanoseconds(1500));
  }
  state.SetItemsProcessed(state.iterations());
}
// 3 samples per pair: a run stays within kRunSamples per stat's log.
BENCHMARK(BM_WaitCounterBeginEnd)->Iterations(kRunSamples / 3)->UseRealTime();

// --- Memory of a defined stat ----------------------------------------------
//
// 10,000 stats on a client that has no daemon (nothing is sent or freed
// meanwhile): heap bytes (glibc's mallinfo2) and resident bytes per stat
// once defined (idle), and after one add each (each stat then holds its
// first chunk of the budget, 256 B, until the sender drains it). Also what
// one such stat's definition takes on the wire and in a batch's arena.

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
size_t HeapInUse() { return mallinfo2().uordblks; }
#else
// glibc before 2.33 (the portable build targets 2.28) has only mallinfo,
// whose int fields wrap at 4 GiB read unsigned: far above the tens of MB
// measured here. (zig's headers mark it deprecated for every glibc.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
size_t HeapInUse() { return static_cast<unsigned>(mallinfo().uordblks); }
#pragma GCC diagnostic pop
#endif

size_t ResidentBytes() {
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  unsigned long size = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%lu %lu", &size, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return resident * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

void BM_StatMemory(benchmark::State& state) {
  constexpr int kStats = 10000;
  testing::TempDir dir;
  ClientOptions options;
  options.target = "unix://" + dir.path() + "/absent.sock";
  options.labels_from_environment = false;
  options.log_to_stderr = false;
  for (auto _ : state) {
    Client client(options);
    std::vector<std::unique_ptr<Stat>> stats;
    stats.reserve(kStats);
    const size_t heap0 = HeapInUse();
    const size_t rss0 = ResidentBytes();
    for (int i = 0; i < kStats; ++i) {
      stats.push_back(std::make_unique<Stat>(
          client, absl::StrCat("mem.s", i),
          std::vector<StatAggregation>{Aggregation::MEAN, Aggregation::MAX},
          std::chrono::seconds(60)));
    }
    const size_t heap1 = HeapInUse();
    const size_t rss1 = ResidentBytes();
    for (auto& s : stats) s->add(1.0);
    const size_t heap2 = HeapInUse();
    const size_t rss2 = ResidentBytes();
    state.counters["idle_heap_B_per_stat"] = static_cast<double>(heap1 - heap0) / kStats;
    state.counters["idle_rss_B_per_stat"] = static_cast<double>(rss1 - rss0) / kStats;
    state.counters["added_heap_B_per_stat"] = static_cast<double>(heap2 - heap0) / kStats;
    state.counters["added_rss_B_per_stat"] = static_cast<double>(rss2 - rss0) / kStats;
    state.counters["sizeof_StatState"] = sizeof(detail::StatState);
    state.counters["sizeof_StatDefinition"] = sizeof(v1::StatDefinition);
  }
  // What defining such a stat costs a batch: the entry
  // OutgoingBatch::AddDefinition appends to its definitions (the stat's
  // bytes with their tag and length), against what parsing those bytes
  // back into the batch's arena took until the batches kept them as bytes;
  // over 1,000 definitions.
  v1::StatDefinition def;
  def.set_id(1234);
  def.set_name("mem.s1234");
  def.mutable_spec()->add_aggregations(v1::MEAN);
  def.mutable_spec()->add_aggregations(v1::MAX);
  def.mutable_spec()->set_window_size_ms(60000);
  const std::string bytes = def.SerializeAsString();
  std::string entries;
  for (int i = 0; i < 1000; ++i) detail::AppendDefinitionEntry(bytes, &entries);
  google::protobuf::Arena arena;
  auto* batch = google::protobuf::Arena::CreateMessage<v1::IngestBatch>(&arena);
  const uint64_t used0 = arena.SpaceUsed();
  for (int i = 0; i < 1000; ++i) {
    if (!batch->add_definitions()->ParseFromString(bytes)) state.SkipWithError("parse failed");
  }
  state.counters["definition_wire_B"] = static_cast<double>(bytes.size());
  state.counters["definition_batch_B"] = static_cast<double>(entries.size()) / 1000;
  state.counters["definition_parsed_B"] = static_cast<double>(arena.SpaceUsed() - used0) / 1000;
}
BENCHMARK(BM_StatMemory)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace torchmon

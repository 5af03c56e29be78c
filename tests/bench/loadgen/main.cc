// torchmon-loadgen: drives torchmond through the real client and checks that
// every sample is accounted for. docs/loadgen.md describes flags and output.
#include <signal.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"
#include "loadgen/forked_ranks.h"
#include "loadgen/options.h"
#include "loadgen/process_metrics.h"
#include "loadgen/rank_worker.h"
#include "loadgen/report.h"
#include "loadgen/sync_job.h"
#include "machine/machine.h"
#include "tests/support/daemon_launch.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::loadgen {
namespace {

// Lead time between telling the ranks to start and the start itself, so
// that every producer thread is waiting when the clock starts.
constexpr std::chrono::milliseconds kStartLead{100};
constexpr std::chrono::milliseconds kDaemonReadyTimeout{10000};
constexpr std::chrono::milliseconds kDaemonStopTimeout{10000};

std::string RandomJob() {
  std::random_device random;
  return absl::StrFormat("loadgen-%08x", random());
}

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "torchmon-loadgen: %s\n", message.c_str());
  return code;
}

// Reads the daemon's CPU time, or -1 (with a warning once) if unknown.
double DaemonCpu(pid_t pid) {
  if (pid <= 0) return -1;
  absl::StatusOr<double> cpu = ProcessCpuSeconds(pid);
  if (!cpu.ok()) {
    std::fprintf(stderr, "torchmon-loadgen: warning: %s\n",
                 std::string(cpu.status().message()).c_str());
    return -1;
  }
  return *cpu;
}

absl::StatusOr<v1::ListSeriesResponse> ListJobSeries(const std::string& target,
                                                     const std::string& job,
                                                     std::chrono::milliseconds timeout) {
  // Pages of at most 4 MiB: the default receive limit holds them.
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::Query::NewStub(channel);
  v1::ListSeriesRequest request;
  v1::LabelMatcher* matcher = request.mutable_selector()->add_labels();
  matcher->set_key("job");
  matcher->set_value(job);
  matcher->set_op(v1::EQUAL);
  // Every page, each within the deadline.
  v1::ListSeriesResponse all;
  for (;;) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + timeout);
    v1::ListSeriesResponse page;
    const grpc::Status status = stub->ListSeries(&context, request, &page);
    if (!status.ok()) {
      return absl::UnavailableError(
          absl::StrCat("ListSeries on ", target, " failed: ", status.error_message()));
    }
    for (v1::SeriesInfo& info : *page.mutable_series()) *all.add_series() = std::move(info);
    if (page.next_page_token().empty()) return all;
    request.set_page_token(page.next_page_token());
  }
}

// Keeps the series whose rank label is within [first, end).
void KeepRanks(int first, int end, v1::ListSeriesResponse& response) {
  auto* all = response.mutable_series();
  all->erase(std::remove_if(all->begin(), all->end(),
                            [&](const v1::SeriesInfo& info) {
                              const auto it = info.series().labels().find("rank");
                              int rank;
                              return it == info.series().labels().end() ||
                                     !absl::SimpleAtoi(it->second, &rank) || rank < first ||
                                     rank >= end;
                            }),
             all->end());
}

int Run(int argc, char** argv) {
  absl::StatusOr<LoadgenOptions> parsed = ParseLoadgenOptions(argc, argv);
  if (!parsed.ok()) {
    std::fprintf(stderr, "torchmon-loadgen: %s\n\n%s",
                 std::string(parsed.status().message()).c_str(), LoadgenUsage().c_str());
    return kExitUsage;
  }
  const LoadgenOptions& options = *parsed;
  if (options.help) {
    std::fputs(LoadgenUsage().c_str(), stdout);
    return kExitExact;
  }
  signal(SIGPIPE, SIG_IGN);  // a dead rank must not kill the parent
  const std::string job = options.job_name.empty() ? RandomJob() : options.job_name;
  const std::chrono::milliseconds query_timeout(options.query_timeout_ms);

  // The spawned daemon, and its directory (which outlives it).
  std::unique_ptr<testing::TempDir> daemon_dir;
  std::unique_ptr<testing::LaunchedDaemon> daemon;
  Measurements measurements;
  measurements.target = options.target;
  const bench::Machine machine = bench::DescribeMachine();
  measurements.machine_line = bench::MachineLine(machine);
  measurements.machine_json = bench::MachineJson(machine);
  measurements.daemon_pid = options.daemon_pid;
  if (!options.spawn_daemon.empty()) {
    daemon_dir = std::make_unique<testing::TempDir>("torchmon-loadgen");
    std::vector<std::string> args = {"--listen", "unix://" + daemon_dir->path() + "/torchmond.sock",
                                     "--metrics-listen", "127.0.0.1:0"};
    args.insert(args.end(), options.daemon_args.begin(), options.daemon_args.end());
    absl::StatusOr<std::unique_ptr<testing::LaunchedDaemon>> started =
        testing::LaunchedDaemon::Start(options.spawn_daemon, args,
                                       daemon_dir->path() + "/torchmond.stderr",
                                       kDaemonReadyTimeout);
    if (!started.ok()) return Fail(kExitUnreachable, std::string(started.status().message()));
    daemon = std::move(*started);
    measurements.target = daemon->ready().UnixTarget();
    measurements.daemon_pid = daemon->pid();
  }
  const std::string& target = measurements.target;
  const double rate_per_thread =
      options.rate / static_cast<double>(options.ranks * options.threads_per_rank);

  // Forked ranks first: nothing in this process may have touched gRPC yet.
  std::unique_ptr<ForkedRanks> forked;
  std::vector<std::unique_ptr<RankWorker>> workers;
  std::unique_ptr<SyncJob> sync_job;
  if (options.sync_job) {
    sync_job = std::make_unique<SyncJob>(options, target, job);
    if (absl::Status s = sync_job->Connect(query_timeout); !s.ok()) {
      return Fail(kExitUnreachable, std::string(s.message()));
    }
  } else if (options.processes) {
    absl::StatusOr<std::unique_ptr<ForkedRanks>> started = ForkedRanks::Start(options, target, job);
    if (!started.ok()) return Fail(kExitUnreachable, std::string(started.status().message()));
    forked = std::move(*started);
    if (absl::Status s = forked->WaitReady(Clock::now() + query_timeout + std::chrono::seconds(5));
        !s.ok()) {
      return Fail(kExitUnreachable, std::string(s.message()));
    }
  } else {
    for (int rank = 0; rank < options.ranks; ++rank) {
      workers.push_back(std::make_unique<RankWorker>(options, target, job, rank));
    }
    // The clients connect in parallel; each wait is bounded.
    for (auto& worker : workers) {
      if (absl::Status s = worker->Connect(query_timeout); !s.ok()) {
        return Fail(kExitUnreachable, std::string(s.message()));
      }
    }
  }

  // The measured phase: production and every rank's final flush.
  const Clock::time_point start = Clock::now() + kStartLead;
  std::vector<RankResult> results(static_cast<size_t>(options.ranks));
  std::vector<std::thread> rank_threads;
  if (forked) {
    if (absl::Status s = forked->Go(start); !s.ok()) {
      return Fail(kExitUnreachable, std::string(s.message()));
    }
  } else if (sync_job) {
    rank_threads.emplace_back([&] { results = sync_job->Run(start); });
  } else {
    for (size_t i = 0; i < workers.size(); ++i) {
      rank_threads.emplace_back([&, i] { results[i] = workers[i]->Run(start, rate_per_thread); });
    }
  }
  std::this_thread::sleep_until(start);
  const double client_cpu_start = SelfCpuSeconds();
  const double daemon_cpu_start = DaemonCpu(measurements.daemon_pid);

  if (forked) {
    // Every rank's flush is bounded; this bound only guards against a hung child.
    const Clock::time_point deadline = start + std::chrono::milliseconds(options.duration_ms) +
                                       std::chrono::milliseconds(options.flush_timeout_ms) +
                                       std::chrono::seconds(30);
    absl::StatusOr<std::vector<RankResult>> collected = forked->Collect(deadline);
    if (!collected.ok()) return Fail(kExitMismatch, std::string(collected.status().message()));
    results = std::move(*collected);
  } else {
    for (std::thread& t : rank_threads) t.join();
  }

  if (forked) {
    measurements.client_cpu_seconds = 0;
    for (const RankResult& r : results) measurements.client_cpu_seconds += r.cpu_seconds;
  } else {
    measurements.client_cpu_seconds = SelfCpuSeconds() - client_cpu_start;
  }
  if (const double end = DaemonCpu(measurements.daemon_pid); end >= 0 && daemon_cpu_start >= 0) {
    measurements.daemon_cpu_seconds = end - daemon_cpu_start;
  }
  if (measurements.daemon_pid > 0) {
    if (absl::StatusOr<ProcessMemory> memory = ReadProcessMemory(measurements.daemon_pid);
        memory.ok()) {
      measurements.daemon_peak_rss_bytes = memory->peak_rss_bytes;
      measurements.daemon_rss_bytes = memory->current_rss_bytes;
    }
  }

  absl::StatusOr<v1::ListSeriesResponse> series = ListJobSeries(target, job, query_timeout);
  if (!series.ok()) return Fail(kExitUnreachable, std::string(series.status().message()));
  if (options.sync_job) {
    // The job's other ranks may be played beside this daemon too: only
    // this process's are its to account for.
    KeepRanks(options.first_rank, options.first_rank + options.ranks, *series);
  }
  const Report report = BuildReport(job, results, *series, measurements);

  workers.clear();
  sync_job.reset();
  if (daemon) {
    absl::StatusOr<int> stopped = daemon->Stop(SIGTERM, kDaemonStopTimeout);
    if (!stopped.ok()) {
      std::fprintf(stderr, "torchmon-loadgen: warning: %s\n",
                   std::string(stopped.status().message()).c_str());
    } else if (*stopped != 0) {
      std::fprintf(stderr, "torchmon-loadgen: warning: torchmond exited with wait status %d\n",
                   *stopped);
    }
  }
  const std::string text = options.json ? FormatJson(options, report) : FormatText(options, report);
  std::fputs(text.c_str(), stdout);
  return report.exact() ? kExitExact : kExitMismatch;
}

}  // namespace
}  // namespace torchmon::loadgen

int main(int argc, char** argv) { return torchmon::loadgen::Run(argc, argv); }

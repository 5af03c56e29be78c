// Google Benchmark's main, with absl::Mutex set up as torchmond runs it
// (server/daemon/main.cc: no deadlock detection), so that the benchmarks
// measure what the daemon does.
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

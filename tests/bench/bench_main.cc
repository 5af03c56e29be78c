// Google Benchmark's main, with absl::Mutex set up as torchmond runs it
// (server/daemon/main.cc: no deadlock detection), so that the benchmarks
// measure what the daemon does, and the machine (CPU model, caches,
// clocksource) in the context printed above every report.
#include "absl/synchronization/mutex.h"
#include "benchmark/benchmark.h"
#include "machine/machine.h"

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const torchmon::bench::Machine machine = torchmon::bench::DescribeMachine();
  benchmark::AddCustomContext("machine", torchmon::bench::MachineLine(machine));
  benchmark::AddCustomContext("cpu_model", machine.cpu_model);
  benchmark::AddCustomContext("clocksource", machine.clocksource);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

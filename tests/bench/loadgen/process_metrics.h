// CPU time and memory of processes, read from getrusage and /proc.
// Linux only. Every function is thread-safe.
#ifndef TORCHMON_TESTS_BENCH_LOADGEN_PROCESS_METRICS_H_
#define TORCHMON_TESTS_BENCH_LOADGEN_PROCESS_METRICS_H_

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace torchmon::loadgen {

// User + system CPU seconds of the calling process, all threads.
double SelfCpuSeconds();

// User + system CPU seconds of process `pid`, all threads, from
// /proc/PID/stat (clock-tick resolution, usually 10 ms). NotFound if the
// process is gone or unreadable.
absl::StatusOr<double> ProcessCpuSeconds(pid_t pid);

struct ProcessMemory {
  uint64_t peak_rss_bytes = 0;     // VmHWM
  uint64_t current_rss_bytes = 0;  // VmRSS
};

// From /proc/PID/status. NotFound if the process is gone or unreadable.
absl::StatusOr<ProcessMemory> ReadProcessMemory(pid_t pid);

}  // namespace torchmon::loadgen

#endif  // TORCHMON_TESTS_BENCH_LOADGEN_PROCESS_METRICS_H_

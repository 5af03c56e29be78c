// What machine a figure came from: every benchmark, the load generator and
// the comparison script print it beside their figures, because the same
// code runs at different speeds on CPUs of one cloud machine type (an AMD
// EPYC with 1 MiB of L2 a core pays for what fits in 2 MiB elsewhere).
#ifndef TORCHMON_TESTS_BENCH_MACHINE_MACHINE_H_
#define TORCHMON_TESTS_BENCH_MACHINE_MACHINE_H_

#include <cstdint>
#include <string>

namespace torchmon::bench {

struct Machine {
  std::string cpu_model;    // /proc/cpuinfo "model name"; "unknown" if absent
  int cpus = 0;             // online CPUs
  uint64_t l2_bytes = 0;    // per core (cpu0's), 0 if unknown
  uint64_t l3_bytes = 0;    // cpu0's, 0 if unknown
  std::string clocksource;  // the kernel's current clocksource, "unknown" if unreadable
  bool hypervisor = false;  // the "hypervisor" CPU flag: a VM, whose neighbours add noise
};

// Reads /proc and /sys; never fails (what it cannot read is "unknown" or 0).
Machine DescribeMachine();

// One line: "AMD EPYC 9R14, 2 CPUs, L2 1 MiB, L3 32 MiB, clocksource tsc, VM".
std::string MachineLine(const Machine& m);

// A JSON object with the same fields.
std::string MachineJson(const Machine& m);

}  // namespace torchmon::bench

#endif  // TORCHMON_TESTS_BENCH_MACHINE_MACHINE_H_

// torchmon-machine: prints the machine a benchmark runs on, as the
// benchmarks and the load generator print it beside their figures (one
// line, or --json). tests/bench/compare.sh heads its report with it.
#include <cstdio>
#include <cstring>

#include "machine/machine.h"

int main(int argc, char** argv) {
  const bool json = argc == 2 && std::strcmp(argv[1], "--json") == 0;
  if (argc > 2 || (argc == 2 && !json)) {
    std::fprintf(stderr, "usage: torchmon-machine [--json]\n");
    return 2;
  }
  const torchmon::bench::Machine m = torchmon::bench::DescribeMachine();
  std::printf("%s\n", (json ? MachineJson(m) : MachineLine(m)).c_str());
  return 0;
}

// The machine's floor under every "many series" figure: how long one
// dependent load takes when its address is random within N MiB, on
// ordinary 4 KiB pages. At 100,000 series the daemon's add of a sample
// starts with such a load (the series is cold: docs/performance.md, "Many
// stats"), so this bounds what any code can do per sample on a given CPU;
// with the machine line above the report, it tells a slow figure from a
// slow machine.
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"

namespace torchmon {
namespace {

// Args: MiB; 0 for 4 KiB pages, 1 for transparent huge pages where the
// kernel grants them. A random cycle through one pointer per cache line,
// so each load depends on the last and no prefetcher can guess the next.
void BM_MemoryLatency(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0)) << 20;
  const bool huge = state.range(1) != 0;
  const size_t lines = bytes / 64;
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) return state.SkipWithError("mmap failed");
  // 4 KiB pages are what the daemon's heap gets unless THP is "always":
  // under a hypervisor a TLB miss walks two page tables.
  madvise(memory, bytes, huge ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  auto* slots = static_cast<uintptr_t*>(memory);
  std::vector<size_t> order(lines);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin() + 1, order.end(), std::mt19937_64(42));
  for (size_t i = 0; i < lines; ++i) {
    slots[order[i] * 8] = reinterpret_cast<uintptr_t>(&slots[order[(i + 1) % lines] * 8]);
  }
  constexpr int kLoadsPerIteration = 1024;
  const uintptr_t* p = &slots[0];
  for (auto _ : state) {
    for (int i = 0; i < kLoadsPerIteration; ++i) p = reinterpret_cast<const uintptr_t*>(*p);
    benchmark::DoNotOptimize(p);
  }
  state.SetItemsProcessed(state.iterations() * kLoadsPerIteration);
  state.counters["ns_per_load"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * kLoadsPerIteration,
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  munmap(memory, bytes);
}
// L2-sized, L3-sized, and beyond L3 (where 100k series of ~0.6 KiB live).
BENCHMARK(BM_MemoryLatency)
    ->ArgsProduct({{1, 16, 256}, {0, 1}})
    ->ArgNames({"MiB", "huge_pages"})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace torchmon

// For the TSan interposers (tsan_absl_mutex.cc, tsan_grpc_completion.cc):
// finds the real definition of a function the executable also defines.
#ifndef TORCHMON_TESTS_SANITIZERS_TSAN_REAL_FUNCTION_H_
#define TORCHMON_TESTS_SANITIZERS_TSAN_REAL_FUNCTION_H_

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

namespace torchmon::tsan {

// The definition of `symbol` after the executable's own. A library that
// Python loaded with RTLD_LOCAL (Abseil or gRPC under the torchmon
// extension module) is not in RTLD_NEXT's scope, so `soname` is asked too.
inline void* FindReal(const char* symbol, const char* soname) {
  void* real = dlsym(RTLD_NEXT, symbol);
  if (real == nullptr) {
    if (void* lib = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD)) {
      real = dlsym(lib, symbol);
      dlclose(lib);
    }
  }
  if (real == nullptr) {
    std::fprintf(stderr, "torchmon TSan support: cannot find the real %s in %s\n", symbol, soname);
    std::abort();
  }
  return real;
}

// One per interposed function, resolved on first use (racing resolutions
// find the same address).
template <typename Fn>
class RealFunction {
 public:
  constexpr RealFunction(const char* symbol, const char* soname)
      : symbol_(symbol), soname_(soname) {}
  Fn get() {
    void* f = fn_.load(std::memory_order_acquire);
    if (f == nullptr) {
      f = FindReal(symbol_, soname_);
      fn_.store(f, std::memory_order_release);
    }
    return reinterpret_cast<Fn>(f);
  }

 private:
  const char* const symbol_;
  const char* const soname_;
  std::atomic<void*> fn_{nullptr};
};

}  // namespace torchmon::tsan

#endif  // TORCHMON_TESTS_SANITIZERS_TSAN_REAL_FUNCTION_H_

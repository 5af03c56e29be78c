// The Python interpreter's main(), built into the sanitizer builds as
// torchmon-sanitized-python: the Python tests run under it (tests/python/).
//
// Why not /usr/bin/python3: a sanitizer runtime must be in the process from
// its start. Debian's python3 is not instrumented, and LLVM 14's shared
// TSan runtime crashes when preloaded into it (its __cxa_atexit interceptor
// runs before the runtime is initialized), so under TSan there is no other
// way. This executable links the runtime statically like every other one of
// the build and hands everything else to libpython3.11, the same
// interpreter and packages (torch, pytest) as /usr/bin/python3.
#include <Python.h>
#include <fcntl.h>

#include <cstdint>

#include <sanitizer/common_interface_defs.h>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
// CPython and torch keep objects alive until exit by design; LeakSanitizer
// would report them at exit. The daemon and torchmonctl the tests start are
// separate processes, leak-checked as everywhere else.
extern "C" __attribute__((visibility("default"), used)) int __lsan_is_turned_off() { return 1; }
#endif
#endif

int main(int argc, char** argv) {
  // Reports to this process's stderr as it is now. pytest captures fd 2
  // during each test (it dup2()s a file onto it) and prints that file only
  // for a test that fails: a report that ended the process in the middle of
  // a test was lost, and the run ended with status 1 and no word of why.
  if (const int report_fd = fcntl(2, F_DUPFD_CLOEXEC, 3); report_fd >= 0) {
    __sanitizer_set_report_fd(reinterpret_cast<void*>(static_cast<uintptr_t>(report_fd)));
  }
  return Py_BytesMain(argc, argv);
}

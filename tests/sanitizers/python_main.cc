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

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
// CPython and torch keep objects alive until exit by design; LeakSanitizer
// would report them at exit. The daemon and torchmonctl the tests start are
// separate processes, leak-checked as everywhere else.
extern "C" __attribute__((visibility("default"), used)) int __lsan_is_turned_off() { return 1; }
#endif
#endif

int main(int argc, char** argv) { return Py_BytesMain(argc, argv); }

// Default options of the sanitizer runtimes, compiled into every executable
// of a sanitizer build (cmake/Sanitizers.cmake), so that the daemon and the
// tools a test starts as child processes run with the same settings as the
// test itself. ASAN_OPTIONS, UBSAN_OPTIONS and TSAN_OPTIONS still override
// them for a run by hand.

#if defined(__has_feature)
#define TORCHMON_HAS_FEATURE(x) __has_feature(x)
#else
#define TORCHMON_HAS_FEATURE(x) 0
#endif

#define TORCHMON_SANITIZER_HOOK extern "C" __attribute__((visibility("default"), used))

#if TORCHMON_HAS_FEATURE(address_sanitizer)
// Leaks are errors (LeakSanitizer runs at exit); so are dynamic
// initialization order bugs and uses of a returned function's stack.
TORCHMON_SANITIZER_HOOK const char* __asan_default_options() {
  return "detect_leaks=1:check_initialization_order=1:strict_init_order=1:"
         "detect_stack_use_after_return=1:strict_string_checks=1";
}

// UBSan is built with -fno-sanitize-recover=all: the first report ends the
// process; the stack says where.
TORCHMON_SANITIZER_HOOK const char* __ubsan_default_options() {
  return "print_stacktrace=1:halt_on_error=1";
}
#endif

#if TORCHMON_HAS_FEATURE(thread_sanitizer)
// ignore_noninstrumented_modules: TSan cannot see the loads and stores of
// Debian's uninstrumented libraries (gRPC, protobuf, Abseil, libstdc++), so
// it checks their calls to malloc, free, memcpy and the like neither: the
// objects gRPC allocates on one thread and frees on another after a
// hand-over through its own atomics are not reported. Their locking is
// still seen (pthread calls, and absl::Mutex through tsan_absl_mutex.cc).
// tsan.supp says what else is suppressed and why. halt_on_error: the first
// race ends the process, so a race in a daemon a test started fails it.
TORCHMON_SANITIZER_HOOK const char* __tsan_default_options() {
  return "suppressions=" TORCHMON_SANITIZER_DIR "/tsan.supp:ignore_noninstrumented_modules=1:"
         "halt_on_error=1:second_deadlock_stack=1";
}
#endif

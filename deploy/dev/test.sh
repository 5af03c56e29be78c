#!/usr/bin/env bash
# Builds torchmon and runs every test. What CI runs (.ci/run) and what the
# README tells a newcomer to run.
#
# Five builds, warnings as errors (TORCHMON_WERROR) in each: build/ (gcc,
# RelWithDebInfo) runs the whole suite, the wheel's and the packages' tests
# included; build-release/ (gcc, Release, TORCHMON_BUILD_TESTS=OFF) builds
# every product target the way a user's `cmake --build` does, so a Release-only
# warning or a product that needs the tests to build cannot come back;
# build-fuzz/ (clang, the fuzz preset) runs each libFuzzer target under ASan +
# UBSan for TORCHMON_FUZZ_SECONDS (default 20); build-asan-ubsan/ and
# build-tsan/ (clang, the presets of the same names) run the whole suite
# again under ASan + UBSan and under TSan (all but the wheel's and the
# packages' tests), and check the thread-safety annotations of all the code
# with -Wthread-safety. On the 2-core development machine, shared with other
# builds, 25½ minutes in all, 12 of them for the two sanitizer builds and
# their suites (docs/testing.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TORCHMON_BUILD_DIR:-$root/build}
release_build=${TORCHMON_RELEASE_BUILD_DIR:-$root/build-release}
fuzz_build=${TORCHMON_FUZZ_BUILD_DIR:-$root/build-fuzz}
asan_build=${TORCHMON_ASAN_BUILD_DIR:-$root/build-asan-ubsan}
tsan_build=${TORCHMON_TSAN_BUILD_DIR:-$root/build-tsan}
jobs=$(nproc)

"$root/deploy/dev/install-deps.sh" --test
cmake -S "$root" -B "$release_build" -DCMAKE_BUILD_TYPE=Release -DTORCHMON_BUILD_TESTS=OFF \
  -DTORCHMON_WERROR=ON
cmake --build "$release_build" -j"$jobs"

cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTORCHMON_WERROR=ON
cmake --build "$build" -j"$jobs"
# tests/install installs (cmake --install, cpack) from the Release build: a
# product build that never built a test target.
TORCHMON_INSTALL_BUILD_DIR="$release_build" \
  ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 300

# Only what the fuzzers and the thread-safety check need: the fuzz targets
# (with the server, client and CLI libraries under them) and torchmond.
cmake -S "$root" -B "$fuzz_build" --preset fuzz -DTORCHMON_WERROR=ON ${TORCHMON_FUZZ_SECONDS:+-DTORCHMON_FUZZ_SECONDS=$TORCHMON_FUZZ_SECONDS}
cmake --build "$fuzz_build" -j"$jobs" --target ingest_fuzzer selector_fuzzer make_seed_corpus torchmond
ctest --test-dir "$fuzz_build" --output-on-failure -j"$jobs"

# The whole suite again, under ASan + UBSan, then under TSan.
cmake -S "$root" -B "$asan_build" --preset asan-ubsan -DTORCHMON_WERROR=ON
cmake --build "$asan_build" -j"$jobs"
ctest --test-dir "$asan_build" --output-on-failure -j"$jobs" --timeout 600
cmake -S "$root" -B "$tsan_build" --preset tsan -DTORCHMON_WERROR=ON
cmake --build "$tsan_build" -j"$jobs"
ctest --test-dir "$tsan_build" --output-on-failure -j"$jobs" --timeout 600

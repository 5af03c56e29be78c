#!/usr/bin/env bash
# Builds torchmon and runs every test. What CI runs (.ci/run) and what the
# README tells a newcomer to run.
#
# Warnings are errors (TORCHMON_WERROR) in every build:
#   build-release/     gcc, Release, TORCHMON_BUILD_TESTS=OFF: every product
#                      target as a user builds it, so a Release-only warning or
#                      a product that needs the tests to build cannot come
#                      back; tests/install installs from it.
#   build/             gcc, Release, everything: the whole suite, the wheel's
#                      and the packages' tests included. The same flags as
#                      build-release/, so its product objects come from the
#                      compiler cache and only the tests are compiled here.
#   build-portable/    the portable artefacts (deploy/release/build.sh) and
#                      their tests in Debian roots (tests/release).
#   build-asan-ubsan/  clang, the asan-ubsan preset: the whole suite under
#                      ASan + UBSan (all but the wheel's and the packages'
#                      tests), and the libFuzzer targets, each fuzzed for
#                      TORCHMON_FUZZ_SECONDS (default 20).
#   build-tsan/        clang, the tsan preset: the whole suite under TSan.
# Both clang builds check the thread-safety annotations (-Wthread-safety);
# neither builds the benchmarks, which measure and assert nothing.
#
# Every compiler runs under ccache (gcc, clang, and zig's clang in the
# portable build), its cache in TORCHMON_CCACHE_DIR (default
# ~/.cache/torchmon-ccache), with paths taken relative to the clone so that
# another clone hits it. Each stage prints its time; the run ends with a
# table of them, the compiler cache's hits and one line summing every test
# run. Times from a fresh clone, cold and warm: docs/testing.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TORCHMON_BUILD_DIR:-$root/build}
release_build=${TORCHMON_RELEASE_BUILD_DIR:-$root/build-release}
asan_build=${TORCHMON_ASAN_BUILD_DIR:-$root/build-asan-ubsan}
tsan_build=${TORCHMON_TSAN_BUILD_DIR:-$root/build-tsan}
jobs=$(nproc)

# Each stage prints how long it took, and the end a table of them, because
# CI has 90 minutes and machines of one type differ (an AMD EPYC one took
# 56 minutes from a fresh clone): the stage that grows is then plain to see.
# Each ctest's summary is kept, and the run ends with their sum as one
# plain line, "tests: N passed, N failed".
stage_times=()
summaries=()
started=$SECONDS
stage() {  # stage NAME COMMAND...
  local name=$1 t=$SECONDS
  shift
  "$@"
  stage_times+=("$(printf '%-40s %5d s' "$name" $((SECONDS - t)))")
  echo "test.sh: $name: $((SECONDS - t)) s (total $((SECONDS - started)) s)"
}
run_ctest() {  # run_ctest DIR CTEST-ARGS...: ctest, its summary kept
  local dir=$1 out
  shift
  out=$(mktemp)
  ctest --test-dir "$dir" "$@" | tee "$out"
  summaries+=("$(basename "$dir"): $(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$out" || echo 'no summary')")
  rm -f "$out"
}

run_pytest() {  # run_pytest DIR: pytest, its summary kept as ctest's is
  local dir=$1 out passed failed
  out=$(mktemp)
  /usr/bin/python3 -m pytest "$dir" -v -p no:cacheprovider | tee "$out" || true
  # pytest's last line: "N passed, M skipped, K failed, E errors in S s"
  # (any of them absent). awk, not grep, so that an absent count is 0 and
  # not a failed pipeline.
  passed=$(tail -1 "$out" | awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^passed/) n += $(i - 1) } END { print n + 0 }')
  failed=$(tail -1 "$out" | awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^(failed|errors?)/) n += $(i - 1) } END { print n + 0 }')
  summaries+=("$(basename "$dir") (pytest): $failed tests failed out of $((passed + failed))")
  rm -f "$out"
  ((failed == 0 && passed > 0))
}

stage "install dependencies" "$root/deploy/dev/install-deps.sh" --test

# The compiler cache. CMake takes the launcher from the environment when it
# configures a new build directory, deps.sh's libraries included. Paths
# under the clone are made relative (CCACHE_BASEDIR) and the working
# directory is left out of the hash (CCACHE_NOHASHDIR), so a fresh clone
# elsewhere hits what the last one compiled; the debug information of such
# an object names the directory of the clone that compiled it.
export CCACHE_DIR=${TORCHMON_CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-ccache}
export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-12G}
export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
ccache --zero-stats >/dev/null

stage "configure build-release" cmake -S "$root" -B "$release_build" -DCMAKE_BUILD_TYPE=Release \
  -DTORCHMON_BUILD_TESTS=OFF -DTORCHMON_WERROR=ON
stage "build build-release" cmake --build "$release_build" -j"$jobs"

stage "configure build" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTORCHMON_WERROR=ON
stage "build build" cmake --build "$build" -j"$jobs"
# tests/install installs (cmake --install, cpack) from the Release build: a
# product build that never built a test target.
TORCHMON_INSTALL_BUILD_DIR="$release_build" \
  stage "test build (the whole suite)" run_ctest "$build" --output-on-failure -j"$jobs" --timeout 300

# The portable artefacts (deploy/release/build.sh: zig's clang for glibc
# 2.28, the libraries built once from Debian's sources and cached under
# ~/.cache/torchmon-release) and their proofs: the ELF audit and the Debian
# roots (tests/release, pytest).
release_dir=$root/build-portable/artefacts
stage "build portable artefacts" "$root/deploy/release/build.sh" "$release_dir"
TORCHMON_RELEASE_DIR="$release_dir" TORCHMON_BUILD_DIR="$build" \
  stage "test portable artefacts" run_pytest "$root/tests/release"

# The whole suite again, under ASan + UBSan (with the fuzzers: the preset
# compiles everything with libFuzzer's coverage too), then under TSan.
stage "configure build-asan-ubsan" cmake -S "$root" -B "$asan_build" --preset asan-ubsan -DTORCHMON_WERROR=ON \
  ${TORCHMON_FUZZ_SECONDS:+-DTORCHMON_FUZZ_SECONDS=$TORCHMON_FUZZ_SECONDS}
stage "build build-asan-ubsan" cmake --build "$asan_build" -j"$jobs"
stage "test build-asan-ubsan" run_ctest "$asan_build" --output-on-failure -j"$jobs" --timeout 600
stage "configure build-tsan" cmake -S "$root" -B "$tsan_build" --preset tsan -DTORCHMON_WERROR=ON
stage "build build-tsan" cmake --build "$tsan_build" -j"$jobs"
stage "test build-tsan" run_ctest "$tsan_build" --output-on-failure -j"$jobs" --timeout 600

echo
# The machine as every benchmark describes it (tests/bench/machine).
echo "test.sh: stages on $("$build/tests/bench/torchmon-machine"):"
printf '  %s\n' "${stage_times[@]}"
echo "  total $((SECONDS - started)) s"
# ccache 4.7's summary: hits, misses and the cache's size.
echo "  compiler cache ($CCACHE_DIR): $(ccache --print-stats | awk -F'\t' '
  $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hit += $2 }
  $1 == "cache_miss" { miss = $2 }
  END { printf "%d hits, %d misses", hit, miss }')"
passed=0
failed=0
for s in "${summaries[@]}"; do
  echo "  $s"
  if [[ $s =~ ([0-9]+)\ tests?\ failed\ out\ of\ ([0-9]+) ]]; then
    failed=$((failed + BASH_REMATCH[1]))
    passed=$((passed + BASH_REMATCH[2] - BASH_REMATCH[1]))
  fi
done
echo "tests: $passed passed, $failed failed"

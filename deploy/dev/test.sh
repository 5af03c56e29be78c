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
#   build-asan-ubsan/  clang, the asan-ubsan preset: the whole suite under
#                      ASan + UBSan (all but the wheel's and the packages'
#                      tests), and the libFuzzer targets, each fuzzed for
#                      TORCHMON_FUZZ_SECONDS (default 20).
#   build-tsan/        clang, the tsan preset: the whole suite under TSan.
#   build-portable/    last, the portable artefacts (deploy/release/build.sh)
#                      and their tests in Debian roots (tests/release). The
#                      libraries and roots they need are made in the
#                      background from the start, in the CPU the other
#                      stages leave idle.
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
# Tests run two per CPU: they mostly wait on daemons, clocks and
# subprocesses (the Release suite kept 0.7 of 2 CPUs busy at -j2), and the
# longest are started first (CTest's COST).
test_jobs=${TORCHMON_TEST_JOBS:-$((2 * jobs))}

# Each stage prints how long it took, and the end a table of them, because
# CI has 90 minutes and machines of one type differ (an AMD EPYC one took
# 56 minutes from a fresh clone): the stage that grows is then plain to see.
# Each ctest's summary is kept, and the run ends with their sum as one
# plain line, "tests: N passed, N failed".
# Beside its time, the CPU a stage's own processes used (user + system):
# a cold run is CPU-bound, the background's compiling taking what the
# stages leave, so a cut shows there even where the machine's noise hides
# it in the times.
stage_times=()
summaries=()
started=$SECONDS
times_file=$(mktemp)
cpu_now=0
children_cpu() {  # children_cpu FILE: the user + system seconds of the children in FILE, times' output
  # times' second line: the children's "XmY.YYYs XmY.YYYs"
  awk 'NR == 2 { for (i = 1; i <= 2; i++) { split($i, p, /[ms]/); cpu += p[1] * 60 + p[2] } }
       END { printf "%d", cpu }' "$1"
}
read_cpu() {  # read_cpu: cpu_now = user + system seconds of the waited-for children so far
  times >"$times_file"  # in this shell, not $(...): a subshell's times are its own
  cpu_now=$(children_cpu "$times_file")
}
stage() {  # stage NAME COMMAND...
  local name=$1 t=$SECONDS cpu
  shift
  read_cpu
  cpu=$cpu_now
  "$@"
  read_cpu
  cpu=$((cpu_now - cpu))
  stage_times+=("$(printf '%-40s %5d s %6d CPU s' "$name" $((SECONDS - t)) "$cpu")")
  echo "test.sh: $name: $((SECONDS - t)) s, $cpu CPU s (total $((SECONDS - started)) s)"
}
run_ctest() {  # run_ctest DIR CTEST-ARGS...: ctest, its summary kept
  local dir=$1 out
  shift
  out=$(mktemp)
  ctest --test-dir "$dir" "$@" | tee "$out"
  summaries+=("$(basename "$dir"): $(grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$out" || echo 'no summary')")
  rm -f "$out"
}

run_pytest() {  # run_pytest DIR [FILE...] [!FILE...] [!*]: pytest, its summary kept as ctest's is
  # Each FILE of DIR in a pytest process of its own and the rest of DIR in
  # one more, side by side, their outputs printed one after another: for
  # files that mostly wait, or compile on one CPU, while the others run.
  # !FILE leaves FILE out of the rest; !* runs no rest.
  local dir=$1 out passed=0 failed=0 rest=() group groups=() i pids=() p f
  shift
  if [[ " $* " != *" !* "* ]]; then
    for f in "$dir"/test_*.py; do
      [[ " $* " == *" $(basename "$f") "* || " $* " == *" !$(basename "$f") "* ]] || rest+=("$f")
    done
  fi
  for f; do
    [[ $f != !* ]] || continue
    # A name that is not there would run nothing, and say so only quietly.
    [[ -f $dir/$f ]] || { echo "test.sh: run_pytest: no $dir/$f" >&2; return 1; }
    groups+=("$dir/$f")
  done
  # (An empty group would be a pytest with no files: the whole working directory.)
  ((${#rest[@]} == 0)) || groups+=("${rest[*]}")
  out=$(mktemp -d)
  for i in "${!groups[@]}"; do
    # --durations: its slowest tests, with their setup (a Debian root, a
    # build), so that the stage's time can be told apart test by test.
    # shellcheck disable=SC2086  # a group is a list of files
    /usr/bin/python3 -m pytest ${groups[i]} -v -p no:cacheprovider --durations=15 --rootdir "$dir" \
      --basetemp "$out/tmp$i" >"$out/$i.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!groups[@]}"; do
    wait "${pids[i]}" || true
    cat "$out/$i.log"
    # pytest's last line: "N passed, M skipped, K failed, E errors in S s"
    # (any of them absent). awk, not grep, so that an absent count is 0 and
    # not a failed pipeline.
    group=$(tail -1 "$out/$i.log")
    read -r p f < <(awk '{ for (i = 2; i <= NF; i++) {
                             if ($i ~ /^passed/) p += $(i - 1)
                             if ($i ~ /^(failed|errors?)/) f += $(i - 1) } }
                         END { print p + 0, f + 0 }' <<<"$group")
    passed=$((passed + p))
    failed=$((failed + f))
    # A process that ended without its summary line (killed, crashed) fails the run.
    [[ $group == *" in "* ]] || { echo "test.sh: pytest ${groups[i]} ended without a summary" >&2; failed=$((failed + 1)); }
  done
  summaries+=("$(basename "$dir") (pytest): $failed tests failed out of $((passed + failed))")
  rm -rf "$out"
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

# What the portable stage needs and no other stage touches is made in the
# background from here on, at a lower priority: zig with its C++ runtime,
# the bundled libraries and snappy (under configure.sh's lock, which
# build.sh then waits on) and the Debian roots of tests/release. From
# nothing they are most of a cold run's compiling, and the roots mostly
# wait on the network; beside the builds and suites below they take the
# CPU those leave idle (a suite mostly waits on daemons and clocks). With
# the caches warm each finds its entry and ends at once. The portable stage
# comes last, waits for them, and prints their logs if one failed.
release_cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
prefetch_logs=$(mktemp -d)
declare -A prefetch_pids
prefetch() {  # prefetch NAME COMMAND...: COMMAND in the background, niced, logged
  local name=$1
  shift
  (
    t=$SECONDS
    rc=0
    nice -n 10 "$@" >"$prefetch_logs/$name.log" 2>&1 || rc=$?
    # Its CPU too: the background's share of a cold run, job by job.
    times >"$prefetch_logs/$name.times"
    echo "test.sh: background $name: $((SECONDS - t)) s, $(children_cpu "$prefetch_logs/$name.times")" \
      "CPU s, exit $rc (total $((SECONDS - started)) s)"
    exit "$rc"
  ) &
  prefetch_pids[$name]=$!
}
mkdir -p "$release_cache"
# A run that stops early stops them too (a half-made entry is remade next
# time: each is marked ready only when whole).
kill_tree() {  # kill_tree PID: PID and every process under it
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null || true
}
stop_prefetch() {
  local pid
  for pid in "${prefetch_pids[@]}"; do kill_tree "$pid"; done
}
trap stop_prefetch EXIT
# Both architectures' (aarch64's cross-compiled: deploy/release/arch.sh),
# x86_64's first, which the portable stage builds first.
# shellcheck disable=SC2016  # $1 is the inner shell's
prefetch libraries flock "$release_cache/make.lock" bash -c \
  'set -e; for arch in x86_64 aarch64; do export TORCHMON_RELEASE_ARCH=$arch
     "$1/toolchain.sh"; "$1/deps.sh"; "$1/snappy.sh"; done' _ "$root/deploy/release"
# The roots in two chains, one per suite, each made from its suite's first
# (roots.sh): they mostly wait on the network, so side by side.
prefetch_roots() {  # prefetch_roots NAME ROOT...: the roots in order, in the background
  local name=$1
  shift
  # shellcheck disable=SC2016  # $1 is the inner shell's
  prefetch "$name" bash -c 'set -e; dir=$1; shift; for r; do "$dir/roots.sh" "$r"; done' \
    _ "$root/tests/release" "$@"
}
prefetch_roots bullseye-roots bullseye bullseye-cxx
prefetch_roots trixie-roots trixie trixie-torch trixie-receivers
# The arm64 roots of the aarch64 artefacts' tests: their packages are
# configured under emulation (roots.sh), so they take CPU as well as the
# network; one chain after the other.
prefetch_roots arm64-roots bullseye-arm64 bullseye-cxx-arm64 trixie-arm64 trixie-torch-arm64
await_prefetch() {  # await_prefetch NAME...: waits; a failure prints its log
  local name
  for name in "$@"; do
    local pid=${prefetch_pids[$name]}
    unset "prefetch_pids[$name]"  # ended: its pid may be another's soon
    if ! wait "$pid"; then
      echo "test.sh: the background $name failed; its log:" >&2
      cat "$prefetch_logs/$name.log" >&2
      return 1
    fi
  done
}

stage "configure build-release" cmake -S "$root" -B "$release_build" -DCMAKE_BUILD_TYPE=Release \
  -DTORCHMON_BUILD_TESTS=OFF -DTORCHMON_WERROR=ON
stage "build build-release" cmake --build "$release_build" -j"$jobs"

stage "configure build" cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTORCHMON_WERROR=ON
stage "build build" cmake --build "$build" -j"$jobs"
# tests/install installs (cmake --install, cpack) from the Release build: a
# product build that never built a test target.
TORCHMON_INSTALL_BUILD_DIR="$release_build" \
  stage "test build (the whole suite)" run_ctest "$build" --output-on-failure -j"$test_jobs" --timeout 300

# The whole suite again, under ASan + UBSan (with the fuzzers: the preset
# compiles everything with libFuzzer's coverage too), then under TSan. With
# line tables for debug information, not -g's whole: a sanitizer's report
# names every frame's function, file and line from them, and nothing here
# runs a debugger (12 % less compile time for a daemon source file).
sanitizer_debug_info=(-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG"
                      -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -gline-tables-only -DNDEBUG")
stage "configure build-asan-ubsan" cmake -S "$root" -B "$asan_build" --preset asan-ubsan -DTORCHMON_WERROR=ON \
  "${sanitizer_debug_info[@]}" \
  ${TORCHMON_FUZZ_SECONDS:+-DTORCHMON_FUZZ_SECONDS=$TORCHMON_FUZZ_SECONDS}
stage "build build-asan-ubsan" cmake --build "$asan_build" -j"$jobs"
stage "test build-asan-ubsan" run_ctest "$asan_build" --output-on-failure -j"$test_jobs" --timeout 600
stage "configure build-tsan" cmake -S "$root" -B "$tsan_build" --preset tsan -DTORCHMON_WERROR=ON \
  "${sanitizer_debug_info[@]}"
stage "build build-tsan" cmake --build "$tsan_build" -j"$jobs"
stage "test build-tsan" run_ctest "$tsan_build" --output-on-failure -j"$test_jobs" --timeout 600

# The portable artefacts (deploy/release/build.sh: zig's clang for glibc
# 2.28, the libraries built once from Debian's sources and cached under
# ~/.cache/torchmon-release) and their proofs: the ELF audit and the Debian
# roots (tests/release, pytest). Last, so that the background above had
# every idle moment of the run.
stage "wait for the background libraries and roots" await_prefetch libraries bullseye-roots trixie-roots \
  arm64-roots
release_dir=$root/build-portable/artefacts
stage "build portable artefacts" "$root/deploy/release/build.sh" "$release_dir"
# Its longest files beside the rest, each in a process of its own, with
# their times from nothing: torch 2.6's aarch64 cases under emulation
# (180 s), the Debian roots' tests (168 s, most of them emulated), torch
# 2.6's x86_64 cases and the C++ client beside libtorch (115 s), and the C++
# client configured and compiled from source (60 s); every other test took
# 47 s together. With the roots' tests among them, the rest took 184 s with
# the caches warm (26e4f6c) and ended the stage alone.
TORCHMON_RELEASE_DIR="$release_dir" TORCHMON_BUILD_DIR="$build" \
  stage "test portable artefacts" run_pytest "$root/tests/release" test_torch26_aarch64.py \
  test_roots.py test_torch26.py test_client_only.py '!test_stragglers.py'
# Alone: real training jobs whose straggler must be named within seconds,
# and whose healthy stretch must raise nothing, with the CPUs to themselves.
TORCHMON_RELEASE_DIR="$release_dir" TORCHMON_BUILD_DIR="$build" \
  stage "test stragglers in real jobs" run_pytest "$root/tests/release" test_stragglers.py '!*'
rm -rf "$prefetch_logs"

echo
# The machine as every benchmark describes it (tests/bench/machine).
echo "test.sh: stages on $("$build/tests/bench/torchmon-machine"):"
printf '  %s\n' "${stage_times[@]}"
read_cpu
echo "  total $((SECONDS - started)) s, $cpu_now CPU s, the background's included"
rm -f "$times_file"
# ccache 4.7's counters: its hits and misses in this run.
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

#!/usr/bin/env bash
# Reruns tests many times on a loaded machine, to show a flaky test flaky
# (or fixed): CTest runs the tests matching REGEX in BUILD_DIR, N times
# each, -j JOBS at a time, beside HOGS processes that keep a CPU busy each.
#
#   tests/rerun-under-load.sh [-n N] [-j JOBS] [--hogs HOGS] BUILD_DIR REGEX
#
#   -n N         runs of each test (default 200)
#   -j JOBS      CTest's parallel jobs (default 2, as deploy/dev/test.sh)
#   --hogs HOGS  busy processes beside them (default 2); 0 for none
#
# Every run is counted, a failure does not stop the others: the end says
# how many of the runs of each test failed, and the output of each failed
# run is kept in BUILD_DIR/Testing/Temporary/LastTestsFailed.log and
# LastTest.log. Exits 0 only if no run failed. Under a sanitizer build
# (build-tsan/, build-asan-ubsan/) the same command reruns it there.
set -euo pipefail
runs=200
jobs=2
hogs=2
usage() {
  echo "usage: tests/rerun-under-load.sh [-n N] [-j JOBS] [--hogs HOGS] BUILD_DIR REGEX" >&2
  exit 2
}
while (($#)); do
  case $1 in
    -n) runs=${2:?}; shift 2 ;;
    -j) jobs=${2:?}; shift 2 ;;
    --hogs) hogs=${2:?}; shift 2 ;;
    -h|--help) usage ;;
    -*) usage ;;
    *) break ;;
  esac
done
(($# == 2)) || usage
build=$1
regex=$2
[[ $runs =~ ^[1-9][0-9]*$ && $jobs =~ ^[1-9][0-9]*$ && $hogs =~ ^[0-9]+$ ]] || usage
[[ -f $build/CTestTestfile.cmake ]] || { echo "rerun-under-load.sh: $build is no CTest build directory" >&2; exit 2; }

tests=$(ctest --test-dir "$build" -N -R "$regex" | sed -n 's/^ *Test *#[0-9]*: //p')
[[ -n $tests ]] || { echo "rerun-under-load.sh: no test in $build matches $regex" >&2; exit 2; }
echo "rerun-under-load.sh: $(wc -l <<<"$tests") test(s), $runs runs each, -j$jobs, beside $hogs busy process(es):"
sed 's/^/  /' <<<"$tests"

# The hogs: a shell loop each, ended with this script however it ends.
hog_pids=()
cleanup() { ((${#hog_pids[@]})) && kill "${hog_pids[@]}" 2>/dev/null; true; }
trap cleanup EXIT
for ((i = 0; i < hogs; i++)); do
  (while :; do :; done) &
  hog_pids+=($!)
done

declare -A failed
for t in $tests; do failed[$t]=0; done
started=$SECONDS
log=$(mktemp)
for ((r = 1; r <= runs; r++)); do
  # One pass over every matching test, -j at a time, so that they load the
  # machine together as in the suite; --timeout as deploy/dev/test.sh.
  ctest --test-dir "$build" -R "$regex" -j"$jobs" --timeout 600 --output-on-failure >"$log" 2>&1 || true
  while read -r name; do
    failed[$name]=$((failed[$name] + 1))
    cp "$log" "$build/Testing/Temporary/rerun-failed-$name-$r.log"
    echo "rerun-under-load.sh: run $r: $name failed (log: $build/Testing/Temporary/rerun-failed-$name-$r.log)"
  done < <(sed -n 's/^[[:space:]]*[0-9]* - \([^ ]*\) (.*/\1/p' "$log")
  if ((r % 20 == 0)); then echo "rerun-under-load.sh: $r of $runs passes, $((SECONDS - started)) s"; fi
done
rm -f "$log"

total=0
echo "rerun-under-load.sh: $runs runs in $((SECONDS - started)) s, -j$jobs beside $hogs busy process(es):"
for t in $tests; do
  printf '  %-80s %d of %d failed\n' "$t" "${failed[$t]}" "$runs"
  total=$((total + failed[$t]))
done
((total == 0))

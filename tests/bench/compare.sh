#!/usr/bin/env bash
# Compares the headline benchmarks of a base commit and the working tree,
# run alternately on this machine, and prints each side's median and the
# ratio new / base: Stat::add, the daemon's ingest, the scrape of 100k
# series, the 20 M samples/s load run, many stats (4 ranks x 25,000 at
# 1 M/s) and Python's add against torch.monitor (tests/bench/compare.py).
# Run it before resolving any issue that touches a hot path, and quote its
# output: a guard against the next regression, never a test (speed is
# measured here, not asserted).
#
#   tests/bench/compare.sh BASE [--rounds N] [--quick] [--json FILE]
#
# BASE is any commit (bd2bd53, main, HEAD~3). Its tree is exported with
# git archive into $TORCHMON_COMPARE_DIR (default ~/.cache/torchmon-compare)
# and built there once (RelWithDebInfo, as the figures in
# docs/performance.md); the working tree, uncommitted changes included, is
# built into build-compare/ so that build/ is left as the tests use it.
# Builds are incremental and run one at a time (2 cores). About 8 minutes
# for 3 rounds once built; --quick (1 round of short runs) checks that it
# works in about 2. The first line of the report is the machine.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
base_rev=$(git -C "$root" rev-parse --verify --quiet "$1^{commit}") ||
  { echo "compare.sh: \"$1\" is not a commit of $root" >&2; exit 2; }
shift
cache=${TORCHMON_COMPARE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-compare}
base_src=$cache/src-$base_rev
base_build=$cache/build-$base_rev
new_build=${TORCHMON_COMPARE_BUILD_DIR:-$root/build-compare}
targets=(torchmond torchmon-loadgen torchmon_benchmarks _torchmon)

if [ ! -f "$base_src/CMakeLists.txt" ]; then
  rm -rf "$base_src.tmp"
  mkdir -p "$base_src.tmp"
  git -C "$root" archive "$base_rev" | tar -x -C "$base_src.tmp"
  mv "$base_src.tmp" "$base_src"
fi

build() {  # build SRC DIR: the targets the comparison runs
  local src=$1 dir=$2 t have=()
  local start=$SECONDS log=$dir/compare-build.log
  mkdir -p "$dir"
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$log" 2>&1 ||
    { echo "compare.sh: configuring $src failed; see $log" >&2; exit 1; }
  # Whichever of them (and torchmon-machine, which a base may predate) the tree has.
  local listed
  listed=$(cmake --build "$dir" --target help)
  for t in "${targets[@]}" torchmon-machine; do
    grep -qx "\.\.\. $t" <<<"$listed" && have+=(--target "$t")
  done
  cmake --build "$dir" -j"$(nproc)" "${have[@]}" >>"$log" 2>&1 ||
    { echo "compare.sh: building $src failed; see $log" >&2; exit 1; }
  echo "built $src in $dir ($((SECONDS - start)) s)" >&2
}
mkdir -p "$cache"
build "$base_src" "$base_build"
build "$root" "$new_build"

new_name="working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo '+changes'))"
exec python3 "$root/tests/bench/compare.py" --base "$base_build" --new "$new_build" \
  --base-name "$(git -C "$root" rev-parse --short "$base_rev")" --new-name "$new_name" "$@"

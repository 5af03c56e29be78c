#!/usr/bin/env bash
# Side-by-side zero-loss comparison: torchmond vs Etsy StatsD 0.9.0, same
# workload, same machine, one run. Results and how to read them:
# docs/performance.md, "Side by side with StatsD".
#
#   tests/bench/statsd_compare.sh [--quick] [compare.py flags...]
#
# Installs statsd@0.9.0 from npm into a temporary folder, then runs
# tests/bench/statsd/compare.py, which raises the offered rate on each system
# until it loses samples and prints each one's highest zero-loss rate and the
# ratio. Loopback only. Bounded in time: the search stops starting steps after
# --budget seconds (480 by default: 5 repeats of 5 s steps, about 7 minutes;
# --quick: 3 repeats of 2 s steps, about 2 minutes). Later flags override
# earlier ones, e.g. --quick --repeats 1.
#
# Environment:
#   TORCHMON_BUILD_DIR  build folder with server/torchmond and
#                       tests/bench/torchmon-loadgen (default: <repo>/build)
#   STATSD_DIR          an existing folder with node_modules/statsd (skips npm)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${TORCHMON_BUILD_DIR:-$repo/build}"
loadgen="$build/tests/bench/torchmon-loadgen"
torchmond="$build/server/torchmond"
python="${PYTHON:-/usr/bin/python3}"

mode=(--repeats 5 --duration 5 --bisect 2 --budget 480)
if [[ "${1:-}" == "--quick" ]]; then
  shift
  mode=(--repeats 3 --duration 2 --bisect 1 --budget 120)
fi

for tool in node npm "$python"; do
  command -v "$tool" >/dev/null || { echo "statsd_compare: $tool not found" >&2; exit 2; }
done
for bin in "$loadgen" "$torchmond"; do
  [[ -x "$bin" ]] || {
    echo "statsd_compare: $bin missing; build first (cmake --build $build) or set TORCHMON_BUILD_DIR" >&2
    exit 2
  }
done

tmp="$(mktemp -d -t torchmon-statsd.XXXXXX)"
child=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$child" ]] && kill -0 "$child" 2>/dev/null; then
    kill -TERM "$child" 2>/dev/null || true
    wait "$child" 2>/dev/null || true
  fi
  rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

statsd_dir="${STATSD_DIR:-}"
if [[ -z "$statsd_dir" ]]; then
  statsd_dir="$tmp/statsd"
  mkdir -p "$statsd_dir"
  echo "installing statsd@0.9.0 (npm) into $statsd_dir ..." >&2
  # --ignore-scripts: skips building the optional syslog addon, which the
  # console backend does not use.
  (cd "$statsd_dir" && timeout 180 npm install --silent --no-audit --no-fund \
      --ignore-scripts statsd@0.9.0 >&2)
fi
[[ -f "$statsd_dir/node_modules/statsd/stats.js" ]] || {
  echo "statsd_compare: no statsd in $statsd_dir/node_modules" >&2
  exit 2
}

machine=$("$build/tests/bench/torchmon-machine" 2>/dev/null) || machine="unknown (build tests/bench/torchmon-machine)"
echo "machine: $machine, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "node $(node --version), statsd $(node -p "require('$statsd_dir/node_modules/statsd/package.json').version")" >&2

"$python" "$here/statsd/compare.py" --statsd-dir "$statsd_dir" \
    --loadgen "$loadgen" --torchmond "$torchmond" "${mode[@]}" "$@" &
child=$!
wait "$child"

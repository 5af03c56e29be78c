#!/usr/bin/env bash
# From a fresh Debian bookworm machine to live stats in one command:
# installs the build dependencies, builds torchmond, torchmonctl, the demo
# client and the Python module (installed for /usr/bin/python3), starts
# torchmond and four demo "ranks" sending training stats, and prints where to
# look. Ctrl-C stops everything.
#
#   TORCHMON_DEMO_SECONDS=N   stop by itself after N seconds (default: run until Ctrl-C)
#   TORCHMON_DEMO_METRICS=H:P metrics address (default 127.0.0.1:9464; a busy port falls back to a free one)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TORCHMON_BUILD_DIR:-$root/build}
# torchmond_wait_ready: the daemon's ready line, read by its documented format.
# shellcheck source=tests/support/torchmond.sh
. "$root/tests/support/torchmond.sh"

"$root/deploy/dev/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target torchmond torchmonctl torchmon-demo _torchmon
# The Python package, for /usr/bin/python3 (docs/python.md).
sudo_cmd=()
[ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
"${sudo_cmd[@]}" cmake --install "$build" --component python >/dev/null
# If `python3` on PATH is another interpreter (pyenv, a venv) of the same
# CPython ABI, make `python3 -c "import torchmon"` work there too.
if py=$(command -v python3) && [[ "$(readlink -f "$py")" != "$(readlink -f /usr/bin/python3)" ]]; then
  abi() { "$1" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))'; }
  if [[ "$(abi "$py")" == "$(abi /usr/bin/python3)" ]]; then
    site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
    rm -rf "$site/torchmon" && cp -r "$build/client/python/torchmon" "$site/"
  fi
fi

run=$(mktemp -d /tmp/torchmon-demo.XXXXXX)
sock=$run/torchmond.sock
pids=()
cleanup() {
  trap - EXIT INT TERM
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT INT TERM

metrics=${TORCHMON_DEMO_METRICS:-127.0.0.1:9464}
start_daemon() {
  "$build/server/torchmond" --listen "unix://$sock" --metrics-listen "$1" --grace 500ms \
    >"$run/ready" 2>"$run/torchmond.log" &
  pids+=($!)
  torchmond_wait_ready "$run/ready" "${pids[-1]}" 10
}
if ! start_daemon "$metrics"; then
  echo "torchmond could not use $metrics ($(cat "$run/torchmond.log")); trying a free port" >&2
  start_daemon 127.0.0.1:0 || { cat "$run/ready" "$run/torchmond.log" >&2; exit 1; }
fi
ready=$torchmond_ready
metrics=$torchmond_metrics

for rank in 0 1 2 3; do
  RANK=$rank LOCAL_RANK=$rank TORCHMON_LABELS=job=demo \
    "$build/client/examples/torchmon-demo" --target "unix://$sock" 2>>"$run/demo.log" &
  pids+=($!)
done

# The first windows close one second (window) plus 0.5 s (grace) after the
# ranks start; wait for them so the first curl already shows stats.
for _ in $(seq 100); do
  curl -sf "http://$metrics/metrics" | grep -q '^torchmon_stat{' && break
  sleep 0.1
done

cat <<TXT
$ready

torchmond is running with 4 demo ranks (job=demo, rank=0..3) sending live stats.
  Prometheus metrics:  curl -s http://$metrics/metrics | grep '^torchmon_stat'
  Series:              $build/client/cli/torchmonctl --target unix://$sock series
  Windows as they close: $build/client/cli/torchmonctl --target unix://$sock watch 'train.*'
  A PyTorch loop:      TORCHMON_TARGET=unix://$sock /usr/bin/python3 $root/client/python/examples/train.py

A few lines of the scrape right now:
TXT
curl -s "http://$metrics/metrics" | grep '^torchmon_stat{' | grep 'rank="0"' | head -n 8 || true
echo
if [[ -n "${TORCHMON_DEMO_SECONDS:-}" ]]; then
  echo "Stopping after ${TORCHMON_DEMO_SECONDS}s."
  sleep "$TORCHMON_DEMO_SECONDS"
else
  echo "Ctrl-C to stop."
  wait "${pids[0]}"
fi

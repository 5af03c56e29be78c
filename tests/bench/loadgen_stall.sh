#!/bin/bash
# 20 M samples/s from 2 ranks x 50 stats for 6 s into a real torchmond that
# is stopped (SIGSTOP) for STOP_MS milliseconds 3 s in (0: not stopped);
# prints the share of samples the clients dropped (counted, every one).
# What a daemon stall costs at that rate (docs/performance.md, "20 M/s").
#
#   tests/bench/loadgen_stall.sh BUILD_DIR STOP_MS [LOADGEN]
#
# LOADGEN defaults to BUILD_DIR's; the daemon is always BUILD_DIR's, so two
# clients can be compared against the same daemon.
set -euo pipefail
build=$1
stop_ms=$2
loadgen=${3:-$build/tests/bench/torchmon-loadgen}
tmp=$(mktemp -d /tmp/torchmon-stall.XXXXXX)
daemon=
cleanup() {
  if [[ -n $daemon ]]; then
    kill -CONT "$daemon" 2>/dev/null || true
    kill "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
"$build/server/torchmond" --listen "unix://$tmp/d.sock" --metrics-listen 127.0.0.1:0 \
  >"$tmp/daemon.out" 2>&1 &
daemon=$!
for _ in $(seq 100); do [[ -S $tmp/d.sock ]] && break; sleep 0.1; done
"$loadgen" --target "unix://$tmp/d.sock" --daemon-pid "$daemon" --ranks 2 --stats 50 \
  --rate 20000000 --duration 6s --json >"$tmp/out.json" &
run=$!
sleep 3
if (( stop_ms > 0 )); then
  kill -STOP "$daemon"
  python3 -c "import time; time.sleep($stop_ms / 1000)"
  kill -CONT "$daemon"
fi
wait "$run"
python3 - "$tmp/out.json" "$stop_ms" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(f"daemon stopped {sys.argv[2]} ms: {100 * d['client_dropped'] / d['sent']:.2f} % dropped "
      f"({d['client_dropped']} of {d['sent']}); client {d['client_cpu_seconds_per_million']:.4f}, "
      f"daemon {d['daemon_cpu_seconds_per_million']:.4f} CPU-s per million")
PY

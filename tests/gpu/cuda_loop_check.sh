#!/usr/bin/env bash
# Device check (not run by CI): the portable tarball's torchmond and the
# portable wheel on a GPU host's own OS, beside a CUDA training loop of the
# host's torch. Usage, from the repository root on the GPU host:
#   tests/gpu/cuda_loop_check.sh DIST_DIR [OUT_DIR]
# DIST_DIR holds what `deploy/release/build.sh DIST_DIR` made. Needs no
# network: the wheel is installed with --no-index into a venv that sees the
# host's torch. Prints each step and a JSON summary (also OUT_DIR/summary.json).
# Then PyTorch's own metrics on CUDA (torch_metrics_cuda.py: memory, an
# out-of-memory, the keys CUDA's torch counts; OUT_DIR/torch-metrics.json) and
# what the switch costs a step (tests/bench/torch_metrics_overhead.py,
# CHECK_OVERHEAD_ROUNDS rounds, default 8, with CHECK_OVERHEAD_ARGS; then a
# CUDA model's step, CHECK_OVERHEAD_CUDA_ROUNDS rounds, default 4, 0: none).
# CHECK_LOOP=0 skips the CUDA loop's own check (cuda_loop.py).
set -uo pipefail
# torchmond_wait_ready: the daemon's ready line, read by its documented format.
# shellcheck source=tests/support/torchmond.sh
. "$(dirname "$0")/../support/torchmond.sh"
dist=$(cd "${1:?DIST_DIR}" && pwd)
out=${2:-${OUT:-/tmp/torchmon-gpu-check}}
mkdir -p "$out"
work=$(mktemp -d)
daemon=
# shellcheck disable=SC2317  # run by the trap
cleanup() { [ -n "$daemon" ] && kill -TERM "$daemon" 2>/dev/null && wait "$daemon"; rm -rf "$work"; }
trap cleanup EXIT

echo "== host"
uname -srm; grep -E '^(PRETTY_NAME)=' /etc/os-release; ldd --version | head -1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
py=
for p in python3 python /opt/conda/bin/python /usr/bin/python3; do
  if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then py=$(command -v "$p"); break; fi
done
[ -n "$py" ] || { echo "no python with torch found"; exit 1; }
"$py" -c 'import sys, torch; print(sys.executable, sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())'

echo "== the tarball's daemon"
tar xzf "$dist"/torchmon-*-linux-x86_64.tar.gz -C "$work"
root=$(echo "$work"/torchmon-*-linux-x86_64)
"$root/bin/torchmond" --version --verbose || exit 1
"$root/bin/torchmond" --listen "unix://$work/d.sock" --metrics-listen 127.0.0.1:0 \
  --grace 200ms > "$work/ready" 2> "$out/daemon.log" &
daemon=$!
torchmond_wait_ready "$work/ready" "$daemon" 10 || { cat "$work/ready" "$out/daemon.log"; exit 1; }
echo "$torchmond_ready"

echo "== the wheel in a venv that sees the host's torch"
if "$py" -m venv --system-site-packages "$work/venv" 2>"$work/venv.err"; then
  vpy=$work/venv/bin/python
  # Where the host's torch is itself in a venv, --system-site-packages sees
  # the base interpreter's packages only: name the host's as well.
  "$py" -c 'import site, sysconfig; print("\n".join(dict.fromkeys(
      [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])))' \
    > "$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-torch.pth"
  "$vpy" -m pip install -q --no-index --no-deps "$dist"/torchmon-*.whl || exit 1
else
  echo "no venv ($(tail -1 "$work/venv.err")): pip install --target instead"
  "$py" -m pip install -q --no-index --no-deps --target "$work/site" "$dist"/torchmon-*.whl || exit 1
  export PYTHONPATH=$work/site
  vpy=$py
fi
"$vpy" -c 'import torchmon; print("torchmon", torchmon.__version__, torchmon.__file__)'

rc=0
if [ "${CHECK_LOOP:-1}" != 0 ]; then
  echo "== the CUDA loop"
  # shellcheck disable=SC2086  # CHECK_ARGS is a list of options
  "$vpy" "$(dirname "$0")/cuda_loop.py" --ctl "$root/bin/torchmonctl" \
    --target "unix://$work/d.sock" --summary "$out/summary.json" ${CHECK_ARGS:-}
  rc=$?
fi

echo "== PyTorch's own metrics on CUDA (TORCHMON_TORCH_METRICS=1)"
TORCHMON_TORCH_METRICS=1 "$vpy" "$(dirname "$0")/torch_metrics_cuda.py" \
  --ctl "$root/bin/torchmonctl" --target "unix://$work/d.sock" \
  --summary "$out/torch-metrics.json" || rc=1
kill -TERM "$daemon"; wait "$daemon"; echo "torchmond exited $?"; daemon=

echo "== what the switch costs a training step (tests/bench/torch_metrics_overhead.py)"
site=$("$vpy" -c 'import os, torchmon; print(os.path.dirname(os.path.dirname(torchmon.__file__)))')
# shellcheck disable=SC2086  # CHECK_OVERHEAD_ARGS is a list of options
"$vpy" "$(dirname "$0")/../bench/torch_metrics_overhead.py" --rounds "${CHECK_OVERHEAD_ROUNDS:-8}" \
  --torchmond "$root/bin/torchmond" --python-dir "$site" ${CHECK_OVERHEAD_ARGS:-} \
  | tee "$out/torch-metrics-overhead.txt"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
if [ "${CHECK_OVERHEAD_CUDA_ROUNDS:-4}" != 0 ] && "$vpy" -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  echo "== the same with a CUDA model's step"
  "$vpy" "$(dirname "$0")/../bench/torch_metrics_overhead.py" --device cuda \
    --rounds "${CHECK_OVERHEAD_CUDA_ROUNDS:-4}" --torchmond "$root/bin/torchmond" \
    --python-dir "$site" | tee "$out/torch-metrics-overhead-cuda.txt"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi

# tests/python's side-by-side tests need pytest: the host's, or one named in
# CHECK_PYTEST_PATH (pure Python, e.g. Debian's python3-pytest copied over).
echo "== torch.monitor side by side, and PyTorch's own metrics, on the host's torch"
if "$vpy" -c 'import pytest' 2>/dev/null; then
  CHECK_PYTEST_PATH=  # the host's own
fi
if PYTHONPATH=${CHECK_PYTEST_PATH:-}${PYTHONPATH:+:$PYTHONPATH} "$vpy" -c 'import pytest' 2>/dev/null; then
  "$vpy" -m pytest --version
  mkdir -p "$work/b/server" "$work/b/client/cli"
  ln -s "$root/bin/torchmond" "$work/b/server/torchmond"
  ln -s "$root/bin/torchmonctl" "$work/b/client/cli/torchmonctl"
  site=$("$vpy" -c 'import os, torchmon; print(os.path.dirname(os.path.dirname(torchmon.__file__)))')
  (cd "$(dirname "$0")/../python" &&
   TORCHMON_BUILD_DIR=$work/b TORCHMON_PYTHON_DIR=$site \
   PYTHONPATH=${CHECK_PYTEST_PATH:-}${PYTHONPATH:+:$PYTHONPATH} \
   "$vpy" -m pytest -q -p no:cacheprovider -o junit_family=xunit2 \
     --junitxml="$out/torch-mirror.xml" test_monitor_mirror.py test_dropin.py \
     test_torch_metrics.py) | tail -25
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
else
  echo "skipped: no pytest for $vpy"
fi
exit $rc

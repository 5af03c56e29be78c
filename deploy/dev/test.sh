#!/usr/bin/env bash
# Builds torchmon and runs every test. What CI runs (.ci/run) and what the
# README tells a newcomer to run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TORCHMON_BUILD_DIR:-$root/build}

"$root/deploy/dev/install-deps.sh" --test
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j"$(nproc)"
ctest --test-dir "$build" --output-on-failure -j"$(nproc)" --timeout 300

#!/usr/bin/env bash
# The CTest entry of a libFuzzer target (tests/fuzz/CMakeLists.txt):
#   run_fuzzer.sh <fuzzer> <seconds> <seed corpus> <work dir> [<dict>]
# Replays the committed seeds, then fuzzes for <seconds>. New interesting
# inputs go to <work dir>/corpus (the committed corpus is never written), a
# crashing input to <work dir>/artifacts/. Any crash, leak, sanitizer report,
# broken invariant or timeout fails the test; the fuzzer's report says which
# input, and docs/testing.md how to replay and minimize it.
set -euo pipefail
fuzzer=$1 seconds=$2 seeds=$3 work=$4 dict=${5:-}
mkdir -p "$work/corpus" "$work/artifacts"
args=(-max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1
      -artifact_prefix="$work/artifacts/")
[[ -n "$dict" ]] && args+=(-dict="$dict")
exec "$fuzzer" "${args[@]}" "$work/corpus" "$seeds"

#!/usr/bin/env bash
# Builds torchmon and runs every test. What CI runs (.ci/run) and what the
# README tells a newcomer to run.
#
# Two builds: build/ (gcc) runs the whole suite; build-fuzz/ (clang, the
# fuzz preset) checks the thread-safety annotations with -Wthread-safety and
# runs each libFuzzer target under ASan + UBSan for TORCHMON_FUZZ_SECONDS
# (default 20). The whole suite under ASan+UBSan and under TSan is not run
# here (each takes about as long again as the gcc build and suite); see
# docs/testing.md.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${TORCHMON_BUILD_DIR:-$root/build}
fuzz_build=${TORCHMON_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=$(nproc)

"$root/deploy/dev/install-deps.sh" --test
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" --timeout 300

# Only what the fuzzers and the thread-safety check need: the fuzz targets
# (with the server, client and CLI libraries under them) and torchmond.
cmake -S "$root" -B "$fuzz_build" --preset fuzz ${TORCHMON_FUZZ_SECONDS:+-DTORCHMON_FUZZ_SECONDS=$TORCHMON_FUZZ_SECONDS}
cmake --build "$fuzz_build" -j"$jobs" --target ingest_fuzzer selector_fuzzer make_seed_corpus torchmond
ctest --test-dir "$fuzz_build" --output-on-failure -j"$jobs"

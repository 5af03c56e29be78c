#!/usr/bin/env bash
# The portable build (deploy/release) against today's Debian-linked build,
# side by side on this machine: compare.py's headline measurements, run
# alternately, each build's median and the ratio portable / debian.
#
#   tests/bench/portable_compare.sh [--rounds N] [--quick] [--json FILE]
#
# debian:   build-bench/ (RelWithDebInfo, gcc 12, libstdc++ and Debian's
#           shared gRPC, protobuf and abseil), or TORCHMON_BUILD_DIR; made
#           here if absent (deploy/dev/test.sh's build/ is Release)
# portable: build-portable-bench/ (RelWithDebInfo too, zig's clang 19 for
#           glibc 2.28, GCC 10's libstdc++ and every library linked statically:
#           deploy/release/configure.sh), with torchmond, torchmon-loadgen
#           and the Python extension
# Of the Google Benchmark rows, the portable side has Stat::add
# (torchmon_client_benchmarks, with GoogleTest and Google Benchmark built for
# glibc 2.28 by deploy/release/deps.sh --bench); ingest and scrape are n/a there:
# torchmon_benchmarks also links prometheus-cpp, for its baseline. Builds
# are incremental and one at a time (2 cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
portable=${TORCHMON_PORTABLE_BENCH_DIR:-$root/build-portable-bench}
base=${TORCHMON_BUILD_DIR:-$root/build-bench}
jobs=$(nproc)
"$root/deploy/release/configure.sh" --bench "$portable" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTORCHMON_BUILD_LOADGEN=ON >&2
cmake --build "$portable" -j"$jobs" --target torchmond torchmon-loadgen torchmon-machine _torchmon \
  torchmon_client_benchmarks >&2
[[ -f $base/CMakeCache.txt ]] ||
  cmake -S "$root" -B "$base" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTORCHMON_WERROR=ON >&2
cmake --build "$base" -j"$jobs" --target torchmond torchmon-loadgen torchmon_benchmarks _torchmon >&2
exec /usr/bin/python3 "$root/tests/bench/compare.py" --base "$base" --new "$portable" \
  --base-name debian --new-name portable "$@"

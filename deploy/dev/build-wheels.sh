#!/usr/bin/env bash
# Builds the torchmon wheel into dist/ (or $1): one cp310-abi3 wheel that
# installs into every CPython >= 3.10, self-contained (docs/install.md).
#
#   deploy/dev/build-wheels.sh [OUT_DIR]
#
# pip builds client/python (setuptools driving this tree's CMake, no
# network, no build isolation: the build tools are Debian's), then
# repair_wheel.py grafts the shared libraries it needs into the wheel and
# sets its manylinux tag. TORCHMON_WHEEL_BUILD_DIR reuses a configured build
# (deploy/dev/test.sh passes its Release build) instead of a fresh one under
# client/python/build/. The portable build (deploy/release/build.sh) also sets
# TORCHMON_WHEEL_MIN_GLIBC (the tag's glibc floor), TORCHMON_BUNDLED_SOURCES
# (the libraries linked in, for the wheel's metadata) and
# TORCHMON_BUNDLED_LICENSES (their licences, into .dist-info/licenses/), and
# for its aarch64 build TORCHMON_WHEEL_ARCH=aarch64: the wheel is tagged for
# that architecture, not the build machine's (_PYTHON_HOST_PLATFORM, which
# setuptools' platform tag honours, as for any cross-compiled wheel).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(realpath -m "${1:-$root/dist}")
python=${TORCHMON_WHEEL_PYTHON:-/usr/bin/python3}
# pip builds from client/python: a relative build directory means the caller's.
if [[ -n ${TORCHMON_WHEEL_BUILD_DIR:-} ]]; then
  export TORCHMON_WHEEL_BUILD_DIR=$(realpath "$TORCHMON_WHEEL_BUILD_DIR")
fi

if [[ -n ${TORCHMON_WHEEL_ARCH:-} && $TORCHMON_WHEEL_ARCH != "$(uname -m)" ]]; then
  export _PYTHON_HOST_PLATFORM=linux-$TORCHMON_WHEEL_ARCH
fi

raw=$(mktemp -d "${TMPDIR:-/tmp}/torchmon-wheel.XXXXXX")
trap 'rm -rf "$raw"' EXIT
"$python" -m pip wheel "$root/client/python" --no-build-isolation --no-deps --no-index -w "$raw"
mkdir -p "$out"
# The wheels of this architecture only: build.sh puts both in one folder.
rm -f "$out"/torchmon-*_"${TORCHMON_WHEEL_ARCH:-$(uname -m)}".whl
for wheel in "$raw"/torchmon-*.whl; do
  "$python" "$root/deploy/dev/repair_wheel.py" "$wheel" -w "$out" \
    ${TORCHMON_WHEEL_MIN_GLIBC:+--min-glibc "$TORCHMON_WHEEL_MIN_GLIBC"} \
    ${TORCHMON_BUNDLED_SOURCES:+--bundled "$TORCHMON_BUNDLED_SOURCES"} \
    ${TORCHMON_BUNDLED_LICENSES:+--licenses "$TORCHMON_BUNDLED_LICENSES"}
done

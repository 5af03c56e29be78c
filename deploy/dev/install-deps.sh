#!/usr/bin/env bash
# Installs everything torchmon needs to build and test, from Debian bookworm packages only.
# Idempotent: skips apt when every package is already present.
set -euo pipefail

# Usage: install-deps.sh [--test | --daemon | --release]
#   --test    also install what the test suite uses (prometheus and promtool from Debian's
#             prometheus package, for tests/prometheus; pytest;
#             grpcio and protobuf for Python, the generic gRPC client of tests/grpc_tooling;
#             openssl, which makes the security tests' certificates at test time; clang with
#             its sanitizer and libFuzzer runtimes, llvm-symbolizer for their reports;
#             systemd-analyze and PyYAML, which check the files under deploy/ in tests/deploy
#             and tests/prometheus; chromium, the headless browser of tests/live_page, and
#             node with npm, which install playwright-core to drive it;
#             lintian, which checks the Debian packages in tests/install. tests/wheel also
#             uses pyenv's CPythons 3.9-3.13, which this script does not install)
#   --daemon  only what building torchmond and torchmonctl needs (the container image's
#             build stage, deploy/container/Dockerfile): no Python, torch or test libraries
#   --release also what the portable build (deploy/release/build.sh) and its tests in
#             Debian roots need: npm (the pinned zig), unicode-data (re2's tables), rpm
#             (rpmbuild, rpm2cpio), cpio, debootstrap; binutils-aarch64-linux-gnu (strip
#             and ar for the aarch64 artefacts) and qemu-user-static (their tests, in arm64
#             Debian roots under emulation); ccache, the compiler cache
#             deploy/dev/test.sh puts every build under. --test includes these
daemon_packages=(
  build-essential cmake
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev libcurl4-openssl-dev zlib1g-dev golang-github-prometheus-client-model-dev libssl-dev
  libsnappy-dev
)
packages=(
  "${daemon_packages[@]}" pkg-config git curl prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-dev python3-torch
  # the wheel (deploy/dev/build-wheels.sh) and the Debian packages (cpack -G DEB)
  python3-setuptools python3-wheel python3-pip python3-venv patchelf file dpkg-dev
)
release_packages=(unicode-data rpm cpio debootstrap binutils binutils-aarch64-linux-gnu qemu-user-static ccache)
case "${1:-}" in
  "") ;;
  --release) packages+=("${release_packages[@]}") ;;
  --test) packages+=("${release_packages[@]}" prometheus python3-pytest python3-grpcio python3-protobuf python3-yaml chromium
                     python3-prometheus-client
                     systemd openssl clang libclang-rt-14-dev llvm lintian) ;;
  --daemon) packages=("${daemon_packages[@]}") ;;
  *) echo "install-deps.sh: unknown option \"$1\" (expected --test, --daemon or --release)" >&2; exit 2 ;;
esac

# node and npm, which install playwright-core (the driver of tests/live_page's
# Chromium): Debian's, unless a node with npm is already on PATH (NodeSource's
# nodejs package carries its own npm and conflicts with Debian's).
# The portable build fetches its zig with npm too.
if [[ ${1:-} == --test || ${1:-} == --release ]] && ! { command -v node && command -v npm; } >/dev/null 2>&1; then
  packages+=(nodejs npm)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

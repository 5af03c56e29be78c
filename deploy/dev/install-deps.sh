#!/usr/bin/env bash
# Installs everything torchmon needs to build and test, from Debian bookworm packages only.
# Idempotent: skips apt when every package is already present.
set -euo pipefail

# Usage: install-deps.sh [--test]
#   --test  also install what the test suite uses (prometheus and promtool from Debian's
#           prometheus, pytest, PyYAML for the Prometheus tests' config copy;
#           openssl, which makes the security tests' certificates at test time; clang with
#           its sanitizer and libFuzzer runtimes, llvm-symbolizer for their reports)
packages=(
  build-essential cmake pkg-config git curl
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libcivetweb-dev prometheus-cpp-dev libboost-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-dev pybind11-dev python3-torch
)
if [[ "${1:-}" == "--test" ]]; then
  packages+=(prometheus python3-pytest python3-yaml openssl clang libclang-rt-14-dev llvm)
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

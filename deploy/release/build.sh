#!/usr/bin/env bash
# Builds torchmon's portable artefacts into OUT_DIR, from a clean tree:
#
#   deploy/release/build.sh [--arch x86_64|aarch64]... OUT_DIR
#
#   torchmond_<v>-1_amd64.deb            Debian 11-13, Ubuntu 20.04-24.04
#   torchmond-<v>-1.x86_64.rpm           RHEL/Rocky/Alma 8 and 9
#   torchmon-<v>-linux-x86_64.tar.gz     any x86_64 Linux with glibc >= 2.28
#   torchmon-<v>-cp310-abi3-manylinux_2_28_x86_64.whl
#   torchmond_<v>-1_arm64.deb            the same for aarch64 (Grace: GH200,
#   torchmond-<v>-1.aarch64.rpm          GB200, GB300), cross-compiled from
#   torchmon-<v>-linux-aarch64.tar.gz    the same sources and recipes
#   torchmon-<v>-cp310-abi3-manylinux_2_28_aarch64.whl
#
# Both architectures unless --arch names some (arch.sh), side by side. Each
# has its own toolchain, libraries and CMake build.
#
# torchmond, torchmonctl and the Python extension are built by zig's clang
# for glibc 2.28 (toolchain.sh) and link everything but glibc statically:
# gRPC, protobuf, abseil, OpenSSL, c-ares, re2 and zlib as
# deps.sh builds them from Debian's source packages, snappy (torchmond's)
# as snappy.sh does, and GCC 10's libstdc++ (the toolchain's C++ runtime).
# The tarball's C++ client library comes from the same build and the same
# libraries, for the user's g++ (>= 10) to link with their libstdc++. Only
# protoc and grpc_cpp_plugin (build tools, Debian's of the same versions),
# Boost's headers (Asio, header-only) and Python's headers (the limited API)
# come from the build machine, which is Debian bookworm with
# deploy/dev/install-deps.sh --release. tests/release/audit_elf.py checks
# every ELF file of every artefact; docs/install.md says what runs where.
#
# TORCHMON_PORTABLE_BUILD_DIR: the x86_64 CMake build (default
# build-portable/); aarch64's is the same with -aarch64 appended.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
usage() {
  echo "usage: deploy/release/build.sh [--arch x86_64|aarch64]... OUT_DIR" >&2
  exit 2
}
archs=()
while (($# > 1)); do
  case $1 in
    --arch) [[ ${2:-} == x86_64 || ${2:-} == aarch64 ]] || usage; archs+=("$2"); shift 2 ;;
    *) usage ;;
  esac
done
(($# == 1)) && [[ $1 != -* ]] || usage
((${#archs[@]})) || archs=(x86_64 aarch64)
out=$(realpath -m "$1")
jobs=${TORCHMON_RELEASE_JOBS:-$(nproc)}
started=$SECONDS
log() { echo "build.sh: $*" >&2; }
version=$(sed -n 's/^project(torchmon VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")
mkdir -p "$out"

build_arch() {  # build_arch: the four artefacts of TORCHMON_RELEASE_ARCH into $out
  # shellcheck source=deploy/release/arch.sh
  source "$here/arch.sh"
  build=$(realpath -m "${TORCHMON_PORTABLE_BUILD_DIR:-$root/build-portable}")
  [[ $release_arch == x86_64 ]] || build=$build-$release_arch
  rm -f "$out"/torchmond_*_"$release_debian_arch".deb "$out"/torchmond-*."$release_arch".rpm \
    "$out"/torchmon-*-linux-"$release_arch".tar.gz "$out"/torchmon-*_"$release_arch".whl
  log "$release_arch: $build"

  # configure.sh makes the toolchain and the libraries if they are not cached.
  "$here/configure.sh" "$build" -DCMAKE_BUILD_TYPE=Release -DTORCHMON_PORTABLE=ON \
    -DCMAKE_INSTALL_PREFIX=/usr -DTORCHMON_SYSTEMD_UNIT_DIR=/usr/lib/systemd/system >&2
  prefix=$("$here/deps.sh")
  snappy=$("$here/snappy.sh")
  glibc=$(awk '$1 == "glibc" { print $2 }' "$here/deps.lock")
  # What configure.sh named as bundled (TORCHMON_BUNDLED_SOURCES): deps.sh's
  # libraries, then snappy.sh's.
  bundled=$(cat "$prefix/versions" "$snappy/versions" | paste -sd,)
  log "configured with the libraries of $prefix and $snappy ($((SECONDS - started)) s)"
  # The C++ client library (torchmon_client, torchmon_proto) is the tarball's.
  cmake --build "$build" -j"$jobs" --target torchmond torchmonctl _torchmon torchmon_client torchmon_proto >&2
  log "$release_arch: built ($((SECONDS - started)) s)"

  # The packages: cpack's DEB and RPM generators over the daemon component.
  (cd "$build" && cpack -G "DEB;RPM" -B "$build/packages" >&2)
  cp "$build"/packages/torchmond_"$version"-1_"$release_debian_arch".deb \
    "$build"/packages/torchmond-"$version"-1."$release_arch".rpm "$out/"

  # The tarball: the daemon component under one directory, relocatable.
  name=torchmon-$version-linux-$release_arch
  stage=$build/tarball
  rm -rf "$stage"
  cmake --install "$build" --component daemon --prefix "$stage/$name" >&2
  "${release_binutils}strip" --strip-all "$stage/$name/bin/torchmond" "$stage/$name/bin/torchmonctl"
  # The unit is a template for wherever the tarball is unpacked; it names
  # /opt/torchmon (docs/install.md).
  sed -i "s|$stage/$name|/opt/torchmon|g" "$stage/$name/lib/systemd/system/torchmond.service"
  # The unit and the sysusers.d / tmpfiles.d entries are for an administrator
  # to install; share/torchmon holds them, lib/ nothing.
  mkdir -p "$stage/$name/share/torchmon"
  mv "$stage/$name/lib/systemd/system/torchmond.service" "$stage/$name/share/torchmon/"
  mv "$stage/$name/lib/sysusers.d/torchmon.conf" "$stage/$name/share/torchmon/torchmon.sysusers"
  mv "$stage/$name/lib/tmpfiles.d/torchmon.conf" "$stage/$name/share/torchmon/torchmon.tmpfiles"
  rm -r "$stage/$name/lib"
  # The C++ client: its headers, static libraries, CMake package and
  # torchmon.pc (the portable ones: cmake/torchmonConfig-portable.cmake.in),
  # and beside them one archive of everything they link, with those
  # libraries' headers. One archive: the linker resolves the libraries'
  # references among themselves in any order, and a user names one library.
  # protobuf-lite is left out (libprotobuf holds all of it), and so are
  # grpc++_reflection and curl, which only torchmond links.
  cmake --install "$build" --component dev --prefix "$stage/$name" >&2
  {
    echo "create $stage/$name/lib/libtorchmon_bundled.a"
    for archive in "$prefix"/lib/lib*.a; do
      case $archive in
        */libprotobuf-lite.a | */libgrpc++_reflection.a | */libcurl*.a) ;;
        *) echo "addlib $archive" ;;
      esac
    done
    echo save
    echo end
  } | "${release_binutils}ar" -M
  "${release_binutils}strip" --strip-debug "$stage/$name"/lib/*.a
  (cd "$prefix/include" && cp -r absl google grpc grpc++ grpcpp openssl re2 ares*.h zlib.h zconf.h \
    "$stage/$name/include/")
  cp "$root/LICENSE" "$stage/$name/"
  printf '%s\n' "$bundled" | tr , '\n' >"$stage/$name/share/torchmon/bundled-versions"
  tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"

  # The wheel: pip over this build's extension, tagged for glibc 2.28. The
  # extension links every library of deps.lock but curl, and not snappy
  # (both the daemon's).
  TORCHMON_WHEEL_BUILD_DIR=$build TORCHMON_WHEEL_ARCH=$release_arch TORCHMON_WHEEL_MIN_GLIBC=$glibc \
    TORCHMON_BUNDLED_LICENSES=$prefix/licenses \
    TORCHMON_BUNDLED_SOURCES=$(tr , '\n' <<<"$bundled" | grep -Ev '^(curl|snappy) ' | paste -sd,) \
    flock "$wheel_lock" "$root/deploy/dev/build-wheels.sh" "$out" >&2
  log "$release_arch: done ($((SECONDS - started)) s)"
}

# Both architectures side by side: one alone kept two CPUs two thirds busy
# (its links, its packages and its wheel are one process each). Each one's
# output is printed when both are done. pip builds the wheel in
# client/python, so one wheel at a time (wheel_lock). The lock and the logs
# live in one temporary folder, removed however the script ends.
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
wheel_lock=$scratch/wheel.lock
if ((${#archs[@]} == 1)); then
  (export TORCHMON_RELEASE_ARCH=${archs[0]}; build_arch)
else
  pids=()
  for arch in "${archs[@]}"; do
    (export TORCHMON_RELEASE_ARCH=$arch; build_arch) >"$scratch/$arch.log" 2>&1 &
    pids+=($!)
  done
  failed=()
  for i in "${!archs[@]}"; do
    wait "${pids[i]}" || failed+=("${archs[i]}")
  done
  for arch in "${archs[@]}"; do
    cat "$scratch/$arch.log" >&2
  done
  ((${#failed[@]} == 0)) || { log "failed: ${failed[*]}"; exit 1; }
fi
log "done in $((SECONDS - started)) s:"
ls -l "$out" >&2

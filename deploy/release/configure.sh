#!/usr/bin/env bash
# Configures a CMake build of this tree with the portable toolchain and
# libraries (toolchain.sh, deps.sh, snappy.sh), making them first if they are
# not cached:
#
#   deploy/release/configure.sh [--bench] BUILD_DIR [CMAKE_ARGS...]
#
# build.sh configures the release this way (Release, TORCHMON_PORTABLE);
# tests/bench/portable_compare.sh a benchmark build beside today's, with
# --bench (GoogleTest and Google Benchmark for the toolchain's runtime:
# deps.sh --bench). Tests are off: the test frameworks on this machine are
# built for glibc 2.36. TORCHMON_RELEASE_ARCH (arch.sh) names the
# architecture, x86_64 or aarch64, of the toolchain and the libraries.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=deploy/release/arch.sh
source "$here/arch.sh"
bench=false
case "${1:-}" in
  --bench) bench=true; shift ;;
esac
if (($# < 1)); then
  echo "usage: deploy/release/configure.sh [--bench] BUILD_DIR [CMAKE_ARGS...]" >&2
  exit 2
fi
build=$(realpath -m "$1")
shift
# One maker of the toolchain and the libraries at a time (a build and the
# tests beside it): a second caller waits here, then finds them cached.
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
mkdir -p "$cache"
exec 9>"$cache/make.lock"
flock 9
toolchain=$("$here/toolchain.sh")
prefix=$("$here/deps.sh")
# The libraries linked in and named as bundled: deps.sh's, and snappy.sh's
# (torchmond's), kept apart from deps.sh's, whose recipe it does not change.
bundled_prefixes=("$prefix" "$("$here/snappy.sh")")
prefixes=$(IFS=';'; echo "${bundled_prefixes[*]}")
! $bench || prefixes="$prefixes;$("$here/deps.sh" --bench)"
flock -u 9
toolchain_file=$toolchain/toolchain.cmake
glibc=$(awk '$1 == "glibc" { print $2 }' "$here/deps.lock")
bundled=$(cat "${bundled_prefixes[@]/%//versions}" | paste -sd,)
# Their licences in one directory (licenses/<package>/ of each prefix), which
# the install rules copy (cmake/Install.cmake): copies, not links, since
# install(DIRECTORY) would install a link as a link. torchmond carries them
# all; the C++ client library (the dev component) all but the daemon's own,
# curl and snappy.
licenses=$build/bundled-licenses
client_licenses=$build/bundled-licenses-client
rm -rf "$licenses" "$client_licenses"
mkdir -p "$licenses" "$client_licenses"
for p in "${bundled_prefixes[@]}"; do
  cp -r "$p/licenses/." "$licenses/"
done
cp -r "$prefix/licenses/." "$client_licenses/"
rm -r "$client_licenses/curl"

# The build machine's headers that the build uses, each alone in a directory
# of its own: zig's clang must not see /usr/include (bookworm's glibc 2.36
# headers) beside its glibc 2.28 ones.
host=$build/host-headers
rm -rf "$host"
mkdir -p "$host/boost" "$host/python"
ln -s /usr/include/boost "$host/boost/boost"
python_include=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
cp -r "$python_include"/. "$host/python/"
# Debian's pyconfig.h includes the one of the compiler's architecture: the
# build machine's for its own, Debian's libpython3.X-dev of the same version
# for another (python_headers.sh).
python=$(basename "$python_include")
if [[ $release_arch == "$(uname -m)" ]]; then
  multiarch_pyconfig=/usr/include/$release_arch-linux-gnu/$python/pyconfig.h
else
  multiarch_pyconfig=$("$here/python_headers.sh" "$python")/pyconfig.h
fi
[[ ! -f $multiarch_pyconfig ]] || cp "$multiarch_pyconfig" "$host/python/pyconfig.h"

# A build directory configured against other prefixes (a changed pin gives
# the libraries a new one, and the old one may be gone) starts its
# configuration again: its cache names packages found in the old prefix.
if [[ -f $build/CMakeCache.txt ]] &&
  ! grep -qxF "CMAKE_PREFIX_PATH:UNINITIALIZED=$prefixes" "$build/CMakeCache.txt"; then
  echo "configure.sh: $build was configured against other libraries; configuring it afresh" >&2
  rm -f "$build/CMakeCache.txt"
fi

# The build machine's /usr is hidden from every find_*: what the build finds
# is the portable prefix's, or named here.
cmake -S "$root" -B "$build" -G "Unix Makefiles" \
  -DCMAKE_TOOLCHAIN_FILE="$toolchain_file" \
  -DTORCHMON_BUILD_TESTS=OFF -DTORCHMON_WERROR=ON \
  -DCMAKE_PREFIX_PATH="$prefixes" -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON \
  -DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local" \
  -DOPENSSL_ROOT_DIR="$prefix" -DOPENSSL_USE_STATIC_LIBS=ON -DZLIB_ROOT="$prefix" -DZLIB_USE_STATIC_LIBS=ON \
  -DBoost_INCLUDE_DIR="$host/boost" -DBoost_NO_BOOST_CMAKE=ON -DBoost_NO_SYSTEM_PATHS=ON \
  -DPython3_EXECUTABLE=/usr/bin/python3 -DPython3_INCLUDE_DIR="$host/python" \
  -DTORCHMON_PROTOC=/usr/bin/protoc -DTORCHMON_GRPC_CPP_PLUGIN=/usr/bin/grpc_cpp_plugin \
  -DTORCHMON_PROMETHEUS_CLIENT_MODEL_DIR=/usr/share/gocode/src/github.com/prometheus/client_model \
  -DTORCHMON_GLIBC_FLOOR="$glibc" -DTORCHMON_BUNDLED_SOURCES="$bundled" \
  -DTORCHMON_BUNDLED_LICENSES="$licenses" -DTORCHMON_CLIENT_BUNDLED_LICENSES="$client_licenses" "$@"

#!/usr/bin/env bash
# Builds the libraries torchmon's portable artefacts link statically, from
# Debian bookworm's source packages at the versions deps.lock pins, with the
# toolchain of toolchain.sh (glibc 2.28), and prints the install prefix:
#
#   deploy/release/deps.sh              ->  $cache/deps-<key>/prefix
#   deploy/release/deps.sh --bench      ->  $cache/deps-bench-<key>/prefix
#
# for the architecture TORCHMON_RELEASE_ARCH names (x86_64 or aarch64:
# arch.sh), from the same sources and recipes.
# zlib, OpenSSL, c-ares, re2, abseil, protobuf, gRPC (grpc++ and what it
# needs, nothing more), grpc++_reflection and curl: static,
# position-independent, hidden visibility, no tests, no tools, no debug
# information. Their C++ is compiled for toolchain.sh's one C++ runtime, GCC
# 10's libstdc++, so that the same archives serve torchmond, torchmonctl and
# the Python extension (which link libstdc++ statically and export no C++)
# and the tarball's C++ client library (which a user links with their own
# g++ >= 10 and libstdc++; grpc++_reflection and curl are the daemon's and
# stay out of it: build.sh).
#
#   --bench      GoogleTest and Google Benchmark (deps.lock's bench lines,
#                the versions the Debian-linked build uses), for the same
#                runtime: the portable build's benchmarks (tests/bench/
#                portable_compare.sh), beside the default prefix. Nothing
#                released links them.
# The key is a hash of deps.lock, this script, the toolchain's key (which
# holds the architecture) and the flavour, so a changed pin or recipe rebuilds and an unchanged one costs
# nothing. Sources come from `apt-get source` with a
# private apt state (debian-apt.sh: the Debian mirror of this machine's apt
# sources, or TORCHMON_DEBIAN_MIRROR; the archive's signed Sources index
# checks them; the system's apt configuration is not touched) and Debian's
# patches applied.
# A log per library is kept in $cache/deps-<key>/logs.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${TORCHMON_RELEASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmon-release}
jobs=${TORCHMON_RELEASE_JOBS:-$(nproc)}
flavour=release
case "${1:-}" in
  "") ;;
  --bench) flavour=bench ;;
  *) echo "usage: deploy/release/deps.sh [--bench]" >&2; exit 2 ;;
esac
# shellcheck source=deploy/release/arch.sh
source "$here/arch.sh"
toolchain=$("$here/toolchain.sh")
recipe() {  # what the flavour's libraries are made from: a change rebuilds them
  if [[ $flavour == bench ]]; then
    cat "$here/deps.lock" "$here/deps.sh"
  else
    # The benchmarks' lines and section are not the release libraries' recipe.
    grep -v '^bench ' "$here/deps.lock"
    sed '/^# --- the benchmarks/,/^# --- end of the benchmarks/d' "$here/deps.sh"
    cat "$here/grpc-config.cmake.in" "$here/grpc-unity.cmake"
  fi
  basename "$toolchain"
  echo "$flavour"
}
key=$(recipe | sha256sum | cut -c1-12)
# TORCHMON_DEPS_KEY names the directory instead, for working on a recipe: a
# step that finished there (stamps/) is not run again.
key=${TORCHMON_DEPS_KEY:-$key}
dir=$cache/deps-$key
[[ $flavour != bench ]] || dir=$cache/deps-bench-$key
# The source packages of the flavour: deps.lock's source lines, or its bench lines.
sources=source
[[ $flavour != bench ]] || sources=bench
if [[ -f $dir/ready ]]; then
  echo "$dir/prefix"
  exit 0
fi

[[ -n ${TORCHMON_DEPS_KEY:-} ]] || rm -rf "$dir"
mkdir -p "$dir"/{src,build,logs,stamps,prefix/lib,prefix/include}
prefix=$dir/prefix
started=$SECONDS
log() { echo "deps.sh: $*" >&2; }

# --- sources -----------------------------------------------------------------
# shellcheck source=deploy/release/debian-apt.sh
source "$here/debian-apt.sh"
debian_apt_state "$cache/apt" deb-src bookworm bookworm-updates bookworm-security
apt_opts=("${debian_apt_opts[@]}")
log "fetching the source packages of deps.lock"
apt-get "${apt_opts[@]}" -qq update >&2
declare -A srcdir
while read -r _ name version; do
  srcdir[$name]=$dir/src/$name
  [[ ! -d ${srcdir[$name]} ]] || continue
  (cd "$dir/src" && apt-get "${apt_opts[@]}" -qq --download-only source "$name=$version" >&2)
  dsc=$(ls "$dir"/src/"${name}"_"${version#*:}".dsc)
  # Debian's patches applied; the signature is the archive's Release file's.
  (cd "$dir/src" && dpkg-source --no-check -x "$dsc" "$name" >"$dir/logs/$name-source.log" 2>&1)
done < <(grep "^$sources " "$here/deps.lock")

# --- common flags -------------------------------------------------------------
# The compiler cache, where deploy/dev/test.sh set one up, takes paths
# relative to the release cache: a changed recipe builds under a new key,
# in a new directory, and still hits what it did not change.
export CCACHE_BASEDIR=$cache
# -fvisibility=hidden: nothing of these libraries is exported from a shared
# object that links them (the Python extension exports its init function only).
export CC=$toolchain/bin/cc CXX=$toolchain/bin/c++ AR=$toolchain/bin/ar RANLIB=$toolchain/bin/ranlib
toolchain_file=$toolchain/toolchain.cmake
common="-O2 -g0 -fPIC -ffunction-sections -fdata-sections -fvisibility=hidden"
export CFLAGS="$common" CXXFLAGS="$common -fvisibility-inlines-hidden"
cmake_common=(-G "Unix Makefiles" -DCMAKE_TOOLCHAIN_FILE="$toolchain_file"
              -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE=-DNDEBUG -DCMAKE_CXX_FLAGS_RELEASE=-DNDEBUG
              -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_LIBDIR=lib -DCMAKE_PREFIX_PATH="$prefix"
              -DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON -DBUILD_SHARED_LIBS=OFF
              -DCMAKE_CXX_STANDARD=17 -DCMAKE_POSITION_INDEPENDENT_CODE=ON)
step() {  # step NAME COMMAND...: runs COMMAND with its output in logs/NAME.log
  local name=$1 t=$SECONDS
  shift
  [[ ! -f $dir/stamps/$name ]] || return 0
  log "building $name"
  if ! "$@" >"$dir/logs/$name.log" 2>&1; then
    tail -40 "$dir/logs/$name.log" >&2
    log "building $name failed: the whole log is $dir/logs/$name.log"
    exit 1
  fi
  log "$name: $((SECONDS - t)) s"
  touch "$dir/stamps/$name"
}
cmake_lib() {  # cmake_lib NAME CMAKE-ARGS...: configure, build, install
  local name=$1
  shift
  cmake -S "${srcdir[$name]}" -B "$dir/build/$name" "${cmake_common[@]}" "$@" &&
    cmake --build "$dir/build/$name" -j"$jobs" &&
    cmake --install "$dir/build/$name"
}

# --- the libraries, in link order ---------------------------------------------
# The libraries built without CMake get the compiler cache its launcher
# variable names (deploy/dev/test.sh sets it), as the CMake ones do.
launched_cc="${CMAKE_C_COMPILER_LAUNCHER:+$CMAKE_C_COMPILER_LAUNCHER }$CC"
build_zlib() {
  cd "${srcdir[zlib]}" && CC=$launched_cc ./configure --static --prefix="$prefix" &&
    make -j"$jobs" libz.a && make install
}
[[ $flavour == bench ]] || step zlib build_zlib

build_openssl() {
  # No shared libraries, engines, modules or dlopen: one libcrypto.a and
  # libssl.a. OPENSSLDIR /etc/ssl is where Debian, Ubuntu and SUSE keep
  # openssl.cnf and the CA certificates.
  cd "${srcdir[openssl]}" &&
    CC=$launched_cc ./Configure "$release_openssl_target" no-shared no-module no-engine no-dso no-afalgeng no-tests \
      no-ui-console --prefix="$prefix" --libdir=lib --openssldir=/etc/ssl $common &&
    make -j"$jobs" build_libs && make install_dev
}
[[ $flavour == bench ]] || step openssl build_openssl

[[ $flavour == bench ]] || step c-ares cmake_lib c-ares -DCARES_STATIC=ON -DCARES_SHARED=OFF -DCARES_BUILD_TOOLS=OFF \
  -DCARES_BUILD_TESTS=OFF -DCARES_STATIC_PIC=ON
# libcurl, torchmond's push client: HTTP and HTTPS only, on the OpenSSL,
# zlib and c-ares above (c-ares: name lookups bounded and cancellable
# without a thread), no CA bundle of its own (torchmond finds the system's
# at run time: server/push/http_client.cc), no HTTP/2, IDN, PSL, SSH, LDAP
# or GSSAPI, no curl tool.
[[ $flavour == bench ]] || step curl cmake_lib curl -DBUILD_SHARED_LIBS=OFF -DBUILD_CURL_EXE=OFF \
  -DBUILD_TESTING=OFF -DHTTP_ONLY=ON -DCURL_USE_OPENSSL=ON -DENABLE_ARES=ON -DCURL_ZLIB=ON \
  -DCURL_BROTLI=OFF -DCURL_ZSTD=OFF -DUSE_NGHTTP2=OFF -DUSE_LIBIDN2=OFF -DCURL_USE_LIBPSL=OFF \
  -DCURL_USE_LIBSSH2=OFF -DCURL_USE_LIBSSH=OFF -DCURL_USE_GSSAPI=OFF -DCURL_DISABLE_LDAP=ON \
  -DENABLE_UNIX_SOCKETS=OFF -DENABLE_MANUAL=OFF -DCURL_CA_BUNDLE=none -DCURL_CA_PATH=none \
  -DCURL_CA_FALLBACK=OFF -DOPENSSL_ROOT_DIR="$prefix" -DOPENSSL_USE_STATIC_LIBS=ON \
  -DZLIB_ROOT="$prefix" -DZLIB_USE_STATIC_LIBS=ON
build_re2() {
  # Debian's re2 is repacked without its generated Unicode tables; they are
  # made again from Debian's unicode-data, as debian/rules does.
  (cd "${srcdir[re2]}" && perl re2/make_perl_groups.pl >re2/perl_groups.cc &&
    python3 re2/make_unicode_casefold.py >re2/unicode_casefold.cc &&
    python3 re2/make_unicode_groups.py >re2/unicode_groups.cc) &&
    cmake_lib re2 -DRE2_BUILD_TESTING=OFF
}
[[ $flavour == bench ]] || step re2 build_re2
build_abseil() {
  # Debian's latomic.diff links GCC's libatomic into every abseil target
  # (-Wl,--push-state,--as-needed -latomic), for its 32-bit ports; clang's
  # compiler-rt has the atomics on x86_64 and aarch64 and zig's linker has no
  # --push-state, so that one patch is taken back out.
  #
  # On aarch64 its hardware-AES Randen (absl/random) is compiled with GCC's
  # -march=armv8-a+crypto, which zig's driver reads as a CPU it does not
  # know ("armv8"): the same feature in zig's words is -mcpu=generic+aes
  # (the code checks the CPU for AES before it runs it). x86_64 does not
  # use these flags.
  (cd "${srcdir[abseil]}" && patch -R -p1 <debian/patches/latomic.diff &&
    sed -i 's/"-march=armv8-a+crypto"/"-mcpu=generic+aes"/' absl/copts/GENERATED_AbseilCopts.cmake &&
    grep -q '"-mcpu=generic+aes"' absl/copts/GENERATED_AbseilCopts.cmake) &&
    cmake_lib abseil -DABSL_PROPAGATE_CXX_STD=ON -DBUILD_TESTING=OFF -DABSL_BUILD_TESTING=OFF
}
[[ $flavour == bench ]] || step abseil build_abseil
# protoc and grpc_cpp_plugin are build tools, not linked into anything: the
# build machine's Debian packages of these same versions run them.
[[ $flavour == bench ]] || step protobuf cmake_lib protobuf -Dprotobuf_BUILD_TESTS=OFF -Dprotobuf_BUILD_PROTOC_BINARIES=OFF \
  -Dprotobuf_BUILD_LIBPROTOC=OFF -Dprotobuf_WITH_ZLIB=ON -Dprotobuf_BUILD_SHARED_LIBS=OFF

build_grpc() {
  # Only grpc++ and what it links (grpc, gpr, address_sorting, upb): gRPC's
  # install rules want every library (the _unsecure copies of the whole core
  # among them), so the libraries and headers are copied and a CMake package
  # written from grpc-config.cmake.in. gRPC 1.51 writes
  # `Traits::template CallSeqFactory(...)`, which clang 19 refuses by
  # default (P1787); the code means what it says.
  #
  # Without xDS: torchmon neither resolves nor balances through an xDS
  # control plane, and xDS was 36 of the 527 C++ files compiled here (its
  # largest among them) and 240 of the 309 C files (generated). GRPC_NO_XDS
  # leaves its plugins unregistered, as gRPC's Bazel build does with
  # --define=grpc_no_xds=true; gRPC's CMake build has no such switch, so
  # their sources (and grpc++'s XdsCredentials, which nothing here calls)
  # are taken out of its source lists here.
  #
  # Its C++ is compiled in unity batches of 32 files, less the files that
  # cannot share one (grpc-unity.cmake, which says how that was checked):
  # under a third of the CPU it took file by file.
  local b=$dir/build/grpc
  sed -i -E '\#^  src/core/ext/(xds|upbdefs-generated|upb-generated/envoy)/#d
             \#^  src/core/ext/filters/(rbac|client_channel/(lb_policy|resolver)/xds|client_channel/resolver/google_c2p)/#d
             \#^  src/core/lib/security/credentials/xds/#d
             \#^  src/cpp/(client|server)/xds_(server_)?credentials\.cc$#d' "${srcdir[grpc]}/CMakeLists.txt" &&
  cmake -S "${srcdir[grpc]}" -B "$b" "${cmake_common[@]}" \
    -DCMAKE_CXX_FLAGS="$CXXFLAGS -DGRPC_NO_XDS -Wno-missing-template-arg-list-after-template-kw" -DgRPC_INSTALL=OFF \
    -DgRPC_BUILD_TESTS=OFF -DgRPC_BUILD_CODEGEN=OFF -DgRPC_BUILD_CSHARP_EXT=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
    -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -DOPENSSL_ROOT_DIR="$prefix" -DOPENSSL_USE_STATIC_LIBS=ON -DZLIB_ROOT="$prefix" -DZLIB_USE_STATIC_LIBS=ON \
    -DgRPC_BUILD_GRPC_CPP_PLUGIN=OFF -DgRPC_BUILD_GRPC_CSHARP_PLUGIN=OFF -DgRPC_BUILD_GRPC_NODE_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_OBJECTIVE_C_PLUGIN=OFF -DgRPC_BUILD_GRPC_PHP_PLUGIN=OFF \
    -DgRPC_BUILD_GRPC_PYTHON_PLUGIN=OFF -DgRPC_BUILD_GRPC_RUBY_PLUGIN=OFF \
    -DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=32 -DCMAKE_PROJECT_INCLUDE="$here/grpc-unity.cmake" &&
    cmake --build "$b" -j"$jobs" --target grpc++ &&
    cp "$b"/libgrpc++.a "$b"/libgrpc.a "$b"/libgpr.a "$b"/libaddress_sorting.a "$b"/libupb.a "$prefix/lib/" &&
    cp -r "${srcdir[grpc]}"/include/grpc "${srcdir[grpc]}"/include/grpcpp "${srcdir[grpc]}"/include/grpc++ \
      "$prefix/include/" &&
    mkdir -p "$prefix/lib/cmake/grpc" &&
    sed "s|@VERSION@|$(grep '^source grpc ' "$here/deps.lock" | cut -d' ' -f3)|" \
      "$here/grpc-config.cmake.in" >"$prefix/lib/cmake/grpc/gRPCConfig.cmake"
}
[[ $flavour == bench ]] || step grpc build_grpc

build_grpc_reflection() {
  # grpc++_reflection (torchmond serves reflection): gRPC builds it only with
  # its code generators, which need libprotoc; here its two sources and the
  # generated reflection.proto code, generated by the build machine's
  # protoc and grpc_cpp_plugin of the same versions.
  local src=${srcdir[grpc]} b=$dir/build/grpc-reflection
  mkdir -p "$b/project" "$b/gen"
  protoc --proto_path="$src" --cpp_out="$b/gen" --grpc_out="$b/gen" \
    --plugin=protoc-gen-grpc="$(command -v grpc_cpp_plugin)" \
    "$src/src/proto/grpc/reflection/v1alpha/reflection.proto" &&
    cat >"$b/project/CMakeLists.txt" <<PROJECT &&
cmake_minimum_required(VERSION 3.16)
project(grpc_reflection CXX)
find_package(gRPC CONFIG REQUIRED)
add_library(grpc++_reflection STATIC
  $b/gen/src/proto/grpc/reflection/v1alpha/reflection.pb.cc
  $b/gen/src/proto/grpc/reflection/v1alpha/reflection.grpc.pb.cc
  $src/src/cpp/ext/proto_server_reflection.cc
  $src/src/cpp/ext/proto_server_reflection_plugin.cc)
target_include_directories(grpc++_reflection PRIVATE $b/gen $src)
target_link_libraries(grpc++_reflection PUBLIC gRPC::grpc++)
PROJECT
    cmake -S "$b/project" -B "$b/build" "${cmake_common[@]}" -DOPENSSL_ROOT_DIR="$prefix" \
      -DOPENSSL_USE_STATIC_LIBS=ON -DZLIB_ROOT="$prefix" -DZLIB_USE_STATIC_LIBS=ON &&
    cmake --build "$b/build" -j"$jobs" &&
    cp "$b/build/libgrpc++_reflection.a" "$prefix/lib/"
}
[[ $flavour == bench ]] || step grpc-reflection build_grpc_reflection

# --- the benchmarks' frameworks (--bench) --------------------------------------
# As Debian builds them, but static. Debian's benchmark takes its version
# from the package (its patch 0001: not from git tags), as debian/rules
# passes it.
if [[ $flavour == bench ]]; then
  step googletest cmake_lib googletest -DBUILD_GMOCK=ON -DINSTALL_GTEST=ON
  benchmark_version=$(awk '$1 == "bench" && $2 == "benchmark" { sub(/-[^-]*$/, "", $3); print $3 }' \
    "$here/deps.lock")
  step benchmark cmake_lib benchmark -DGIT_VERSION="$benchmark_version" \
    -DBENCHMARK_ENABLE_TESTING=OFF -DBENCHMARK_ENABLE_GTEST_TESTS=OFF \
    -DBENCHMARK_ENABLE_WERROR=OFF -DBENCHMARK_ENABLE_INSTALL=ON
fi
# --- end of the benchmarks' frameworks ------------------------------------------

# What was built, for `torchmond --version --verbose` and the wheel's metadata.
grep "^$sources " "$here/deps.lock" | cut -d' ' -f2,3 >"$prefix/versions"
# Their licences, which every artefact that carries them ships: each
# upstream's own licence and notice files and Debian's copyright file.
while read -r name _; do
  mkdir -p "$prefix/licenses/$name"
  cp "${srcdir[$name]}/debian/copyright" "$prefix/licenses/$name/copyright"
  find "${srcdir[$name]}" -maxdepth 1 -type f \( -iname 'LICENSE*' -o -iname 'COPYING*' -o -iname 'NOTICE*' \) \
    -exec cp {} "$prefix/licenses/$name/" \;
done <"$prefix/versions"
rm -rf "$dir/src" "$dir/build"
touch "$dir/ready"
log "all built in $((SECONDS - started)) s"
echo "$prefix"

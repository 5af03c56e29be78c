# shellcheck shell=bash disable=SC2034  # release_* are for the script that sources this
# The architecture the portable build makes its artefacts for, from
# TORCHMON_RELEASE_ARCH: x86_64 (the default) or aarch64. Sourced by
# toolchain.sh, deps.sh, snappy.sh, configure.sh and build.sh; it sets
#   release_arch            x86_64 or aarch64 (uname -m's and the GNU triple's)
#   release_debian_arch     amd64 or arm64 (Debian's name: the .deb's)
#   release_openssl_target  OpenSSL's Configure target
#   release_cflags          what the compiler wrappers add for it: for
#                           aarch64 -moutline-atomics, as GCC and clang do by
#                           default there (zig does not): atomics call
#                           compiler-rt's helpers, which use the LSE
#                           instructions of ARMv8.1 and later (Grace's
#                           Neoverse V2) and LL/SC loops on older cores; the
#                           baseline CPU is generic ARMv8-A either way
#   release_binutils        the prefix of binutils' strip and ar for it:
#                           empty for the build machine's own architecture,
#                           aarch64-linux-gnu- (binutils-aarch64-linux-gnu)
#                           for aarch64 on x86_64
#   release_cmake_system    the CMake toolchain lines that make a build of
#                           another architecture than the build machine's a
#                           cross-compilation, its strip named (empty for
#                           the machine's own)
release_arch=${TORCHMON_RELEASE_ARCH:-x86_64}
case $release_arch in
  x86_64) release_debian_arch=amd64 release_openssl_target=linux-x86_64 release_cflags= ;;
  aarch64) release_debian_arch=arm64 release_openssl_target=linux-aarch64
           release_cflags=" -moutline-atomics" ;;
  *)
    echo "TORCHMON_RELEASE_ARCH=$release_arch: the portable build makes x86_64 or aarch64" >&2
    exit 2
    ;;
esac
release_binutils= release_cmake_system=
if [[ $release_arch != "$(uname -m)" ]]; then
  release_binutils=$release_arch-linux-gnu-
  if ! command -v "${release_binutils}strip" >/dev/null; then
    echo "arch.sh: ${release_binutils}strip is missing: deploy/dev/install-deps.sh --release installs it" >&2
    exit 1
  fi
  release_cmake_system="
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR $release_arch)
set(CMAKE_STRIP \"$(command -v "${release_binutils}strip")\" CACHE FILEPATH \"\")"
fi

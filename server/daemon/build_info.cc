#include "server/daemon/build_info.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/stubs/common.h"
#include "grpcpp/grpcpp.h"

namespace torchmon::server {
namespace {

std::string CxxRuntime() {
#if defined(_LIBCPP_VERSION)
  return absl::StrCat("libc++ ", _LIBCPP_VERSION, ", linked statically");
#elif defined(__GLIBCXX__) && defined(TORCHMON_GLIBC_FLOOR)
  // The portable build (deploy/release/toolchain.sh).
  return absl::StrCat("libstdc++ ", __GLIBCXX__, ", linked statically");
#elif defined(__GLIBCXX__)
  return absl::StrCat("libstdc++ ", __GLIBCXX__);
#else
  return "unknown";
#endif
}

}  // namespace

std::string VerboseVersion() {
  std::string out = absl::StrCat("torchmond ", TORCHMON_VERSION, "\n");
#if defined(__clang__)
  absl::StrAppend(&out, "compiler: clang ", __clang_version__, "\n");
#else
  absl::StrAppend(&out, "compiler: GCC ", __VERSION__, "\n");
#endif
  absl::StrAppend(&out, "C++ runtime: ", CxxRuntime(), "\n");
#ifdef TORCHMON_GLIBC_FLOOR
  absl::StrAppend(&out, "glibc: ", TORCHMON_GLIBC_FLOOR, " or newer\n");
#endif
  // As each library reports itself, at run time where it can.
  absl::StrAppend(&out, "gRPC: ", grpc::Version(), "\n");
  absl::StrAppend(&out, "protobuf: ",
                  google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION), "\n");
  absl::StrAppend(&out, "zlib: ", zlibVersion(), "\n");
  absl::StrAppend(&out, "OpenSSL: ", OpenSSL_version(OPENSSL_VERSION), "\n");
  absl::StrAppend(&out, "libcurl: ", curl_version_info(CURLVERSION_NOW)->version, "\n");
#ifdef TORCHMON_BUNDLED_SOURCES
  // "zlib 1:1.2.13.dfsg-1,openssl 3.0.20-1~deb12u2,...": deps.lock's pins.
  absl::StrAppend(&out, "bundled, built from Debian's source packages:\n");
  for (absl::string_view entry : absl::StrSplit(TORCHMON_BUNDLED_SOURCES, ',', absl::SkipEmpty())) {
    absl::StrAppend(&out, "  ", entry, "\n");
  }
#else
  absl::StrAppend(&out, "linked: the system's shared libraries\n");
#endif
  return out;
}

}  // namespace torchmon::server

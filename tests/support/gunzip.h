// Decompresses one whole gzip stream for tests of /metrics' gzip: a
// standard inflate (zlib, gzip wrapper only), failing the test unless the
// stream ends cleanly.
#ifndef TORCHMON_TESTS_SUPPORT_GUNZIP_H_
#define TORCHMON_TESTS_SUPPORT_GUNZIP_H_

#include <zlib.h>

#include <string>

#include "gtest/gtest.h"

namespace torchmon::testing {

inline std::string Gunzip(const std::string& compressed) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);  // gzip only
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  z.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  char buf[16384];
  int rc;
  do {
    z.next_out = reinterpret_cast<Bytef*>(buf);
    z.avail_out = sizeof buf;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buf, sizeof buf - z.avail_out);
  } while (rc == Z_OK);
  EXPECT_EQ(rc, Z_STREAM_END) << "not one whole gzip stream";
  EXPECT_EQ(z.avail_in, 0u) << "bytes after the gzip stream";
  inflateEnd(&z);
  return out;
}

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_GUNZIP_H_

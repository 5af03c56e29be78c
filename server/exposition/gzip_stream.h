// gzip (RFC 1952) over a stream of pieces, for /metrics with
// Accept-Encoding: gzip: each piece the writer hands over is compressed as
// it comes and the compressed bytes go on to the next sink, so a scrape is
// never held whole, compressed or not.
#ifndef TORCHMON_SERVER_EXPOSITION_GZIP_STREAM_H_
#define TORCHMON_SERVER_EXPOSITION_GZIP_STREAM_H_

#include <cstddef>
#include <functional>
#include <memory>

#include "absl/strings/string_view.h"

namespace torchmon::server {

// Thread-compatible.
class GzipStream {
 public:
  using Sink = std::function<bool(absl::string_view)>;
  // Level 1 (zlib's fastest): a scrape compresses ~10 times at a fraction
  // of the cost of the default level (docs/performance.md).
  static constexpr int kLevel = 1;

  explicit GzipStream(Sink sink);
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Compresses `piece`; false if the next sink refused (the reader went
  // away) or zlib failed, and from then on.
  bool Write(absl::string_view piece);
  // Ends the stream (the gzip trailer); false as Write.
  bool Finish();

 private:
  bool Deflate(absl::string_view piece, int flush);

  struct State;
  std::unique_ptr<State> state_;
  Sink sink_;
  bool ok_ = true;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_GZIP_STREAM_H_

#include "server/exposition/gzip_stream.h"

#include <zlib.h>

#include <utility>

namespace torchmon::server {

struct GzipStream::State {
  z_stream z{};
  bool initialized = false;
  unsigned char out[64 * 1024];
};

GzipStream::GzipStream(Sink sink) : state_(std::make_unique<State>()), sink_(std::move(sink)) {
  // windowBits 15 + 16: a gzip header and trailer around the deflate data.
  state_->initialized = deflateInit2(&state_->z, kLevel, Z_DEFLATED, 15 + 16, 8,
                                     Z_DEFAULT_STRATEGY) == Z_OK;
  ok_ = state_->initialized;
}

GzipStream::~GzipStream() {
  if (state_->initialized) deflateEnd(&state_->z);
}

bool GzipStream::Deflate(absl::string_view piece, int flush) {
  if (!ok_) return false;
  z_stream& z = state_->z;
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(piece.data()));
  z.avail_in = static_cast<uInt>(piece.size());
  do {
    z.next_out = state_->out;
    z.avail_out = sizeof state_->out;
    const int rc = deflate(&z, flush);
    if (rc == Z_STREAM_ERROR) return ok_ = false;
    const size_t produced = sizeof state_->out - z.avail_out;
    if (produced > 0 &&
        !sink_(absl::string_view(reinterpret_cast<const char*>(state_->out), produced))) {
      return ok_ = false;
    }
    // Until zlib leaves room in the output: then it took all the input
    // (and, finishing, wrote the trailer).
  } while (z.avail_out == 0);
  return true;
}

bool GzipStream::Write(absl::string_view piece) {
  return piece.empty() ? ok_ : Deflate(piece, Z_NO_FLUSH);
}

bool GzipStream::Finish() { return Deflate(absl::string_view(), Z_FINISH); }

}  // namespace torchmon::server

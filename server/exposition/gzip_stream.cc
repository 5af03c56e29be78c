#include "server/exposition/gzip_stream.h"

#include <zlib.h>

#include <algorithm>
#include <utility>

namespace torchmon::server {
namespace {

constexpr size_t kWindowBytes = 32 * 1024;  // deflate's window: a block's dictionary

// A gzip member's header: deflate, no name or time, XFL 4 (fastest), Unix.
constexpr char kHeader[] = {'\x1f', '\x8b', '\x08', '\x00', '\x00', '\x00',
                            '\x00', '\x00', '\x04', '\x03'};
// An empty final block (fixed Huffman: BFINAL, BTYPE 01, end of block).
constexpr char kFinalBlock[] = {'\x03', '\x00'};

void PutLittleEndian32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

}  // namespace

struct GzipStream::State {
  z_stream z{};
  bool initialized = false;
  unsigned char out[64 * 1024];
};

size_t GzipStream::DefaultThreads() {
  return std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 4);
}

GzipStream::GzipStream(Sink sink, size_t threads)
    : sink_(std::move(sink)), threads_(std::max<size_t>(threads, 1)) {
  if (threads_ == 1) {
    state_ = std::make_unique<State>();
    // windowBits 15 + 16: a gzip header and trailer around the deflate data.
    state_->initialized = deflateInit2(&state_->z, kLevel, Z_DEFLATED, 15 + 16, 8,
                                       Z_DEFAULT_STRATEGY) == Z_OK;
    ok_ = state_->initialized;
    return;
  }
  crc_ = static_cast<uint32_t>(crc32(0, nullptr, 0));
  workers_.reserve(threads_);
  for (size_t i = 0; i < threads_; ++i) workers_.emplace_back([this] { Work(); });
}

GzipStream::~GzipStream() {
  if (state_ != nullptr && state_->initialized) deflateEnd(&state_->z);
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    queue_.clear();  // a reader that went away needs none of it
  }
  for (std::thread& t : workers_) t.join();
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

void GzipStream::Compress(Block& block) {
  z_stream z{};
  // Raw deflate (negative window bits): the member's header and trailer
  // are the stream's.
  if (deflateInit2(&z, kLevel, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    block.failed = true;
    return;
  }
  if (!block.dictionary.empty()) {
    deflateSetDictionary(&z, reinterpret_cast<const Bytef*>(block.dictionary.data()),
                         static_cast<uInt>(block.dictionary.size()));
  }
  block.output.resize(deflateBound(&z, static_cast<uLong>(block.input.size())) + 16);
  z.next_in = reinterpret_cast<Bytef*>(block.input.data());
  z.avail_in = static_cast<uInt>(block.input.size());
  z.next_out = reinterpret_cast<Bytef*>(block.output.data());
  z.avail_out = static_cast<uInt>(block.output.size());
  // Ends on a byte boundary without ending the stream: the next block's
  // data follows directly.
  const int rc = deflate(&z, Z_SYNC_FLUSH);
  block.failed = rc != Z_OK || z.avail_in != 0;
  block.output.resize(block.output.size() - z.avail_out);
  deflateEnd(&z);
  block.crc = static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(block.input.data()), static_cast<uInt>(block.input.size())));
  block.input_size = block.input.size();
  std::string().swap(block.input);
  std::string().swap(block.dictionary);
}

void GzipStream::Work() {
  for (;;) {
    std::shared_ptr<Block> block;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &GzipStream::WorkOrStop));
      if (queue_.empty()) return;  // stopping
      block = std::move(queue_.front());
      queue_.pop_front();
    }
    Compress(*block);
    absl::MutexLock lock(&mu_);
    block->done = true;
  }
}

void GzipStream::Submit(std::string input) {
  auto block = std::make_shared<Block>();
  block->dictionary = tail_;
  // The next block's dictionary: the last 32 KiB of input so far.
  if (input.size() >= kWindowBytes) {
    tail_.assign(input, input.size() - kWindowBytes, kWindowBytes);
  } else {
    tail_.append(input);
    if (tail_.size() > kWindowBytes) tail_.erase(0, tail_.size() - kWindowBytes);
  }
  block->input = std::move(input);
  in_flight_.push_back(block);
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(block));
}

bool GzipStream::Drain(size_t keep) {
  while (!in_flight_.empty()) {
    const std::shared_ptr<Block>& front = in_flight_.front();
    {
      absl::MutexLock lock(&mu_);
      if (in_flight_.size() <= keep && !front->done) return ok_;
      mu_.Await(absl::Condition(&front->done));
    }
    if (front->failed) ok_ = false;
    if (ok_ && !header_sent_) {
      ok_ = sink_(absl::string_view(kHeader, sizeof kHeader));
      header_sent_ = true;
    }
    if (ok_ && !front->output.empty()) ok_ = sink_(front->output);
    crc_ = static_cast<uint32_t>(crc32_combine(crc_, front->crc, static_cast<z_off_t>(front->input_size)));
    total_in_ += front->input_size;
    in_flight_.pop_front();
  }
  return ok_;
}

bool GzipStream::Write(absl::string_view piece) {
  if (threads_ == 1) return piece.empty() ? ok_ : Deflate(piece, Z_NO_FLUSH);
  if (!ok_) return false;
  pending_.append(piece.data(), piece.size());
  if (pending_.size() >= kBlockBytes) {
    Submit(std::move(pending_));
    pending_.clear();
    // Two blocks per worker in flight: the workers never wait for the writer.
    return Drain(2 * threads_);
  }
  return true;
}

bool GzipStream::Finish() {
  if (threads_ == 1) return Deflate(absl::string_view(), Z_FINISH);
  if (!ok_) return false;
  if (!pending_.empty()) {
    Submit(std::move(pending_));
    pending_.clear();
  }
  if (!Drain(0)) return false;
  std::string end;
  if (!header_sent_) end.assign(kHeader, sizeof kHeader);
  header_sent_ = true;
  end.append(kFinalBlock, sizeof kFinalBlock);
  PutLittleEndian32(end, crc_);
  PutLittleEndian32(end, static_cast<uint32_t>(total_in_));  // ISIZE: the size mod 2^32
  return ok_ = sink_(end);
}

}  // namespace torchmon::server

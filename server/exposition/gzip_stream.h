// gzip (RFC 1952) over a stream of pieces, for /metrics with
// Accept-Encoding: gzip: pieces are compressed as they come and the
// compressed bytes go on to the next sink in order, so a scrape is never
// held whole, compressed or not.
//
// Compressing costs several times what writing the text does (zlib's
// fastest level runs at ~650 MB/s on a scrape's repetitive text), so with
// more than one thread the pieces are compressed in parallel, as pigz
// does: each block of input is deflated on its own, primed with the 32 KiB
// before it (so the ratio barely changes) and ended on a byte boundary
// (Z_SYNC_FLUSH); the blocks' deflate data, concatenated in order, then an
// empty final block, make one ordinary gzip member whose CRC is combined
// from the blocks'. The output is one standard gzip stream either way.
#ifndef TORCHMON_SERVER_EXPOSITION_GZIP_STREAM_H_
#define TORCHMON_SERVER_EXPOSITION_GZIP_STREAM_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace torchmon::server {

// Thread-compatible (one writer thread); its own workers are internal.
class GzipStream {
 public:
  using Sink = std::function<bool(absl::string_view)>;
  // Level 1 (zlib's fastest): a scrape compresses ~25 times at a fraction
  // of the cost of the default level (docs/performance.md).
  static constexpr int kLevel = 1;
  // Input compressed as one block by one worker.
  static constexpr size_t kBlockBytes = 256 * 1024;

  // Threads that compress: the cores there are, at most 4 (a scrape every
  // few seconds should not take every core from ingestion).
  static size_t DefaultThreads();

  // `threads` compress in parallel; 1: in the calling thread.
  explicit GzipStream(Sink sink, size_t threads = DefaultThreads());
  ~GzipStream();
  GzipStream(const GzipStream&) = delete;
  GzipStream& operator=(const GzipStream&) = delete;

  // Compresses `piece`; false if the next sink refused (the reader went
  // away) or zlib failed, and from then on.
  bool Write(absl::string_view piece);
  // Ends the stream (the gzip trailer); false as Write.
  bool Finish();

 private:
  // One block of input and, once a worker is done with it, its deflate data.
  struct Block {
    std::string input;
    std::string dictionary;  // the 32 KiB of input before it
    std::string output;
    uint32_t crc = 0;
    size_t input_size = 0;
    bool done = false;  // guarded by mu_
    bool failed = false;
  };

  // The sequential path (threads == 1).
  bool Deflate(absl::string_view piece, int flush);

  // The parallel path.
  void Submit(std::string input);
  // Sends the finished blocks at the front, waiting for the front one until
  // at most `keep` remain in flight.
  bool Drain(size_t keep);
  void Work();
  bool WorkOrStop() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return stopping_ || !queue_.empty();
  }
  static void Compress(Block& block);

  struct State;
  std::unique_ptr<State> state_;  // sequential only
  Sink sink_;
  bool ok_ = true;

  const size_t threads_;
  std::string pending_;  // input not yet a block
  std::string tail_;     // the last 32 KiB of input submitted
  std::deque<std::shared_ptr<Block>> in_flight_;  // submitted, in order; the writer's
  bool header_sent_ = false;
  uint32_t crc_ = 0;
  uint64_t total_in_ = 0;

  mutable absl::Mutex mu_;
  std::deque<std::shared_ptr<Block>> queue_ ABSL_GUARDED_BY(mu_);  // for the workers
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_GZIP_STREAM_H_

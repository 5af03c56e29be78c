// The input of ingest_fuzzer: a script (fuzz_support.h) of steps that one
// daemon state goes through. Shared with make_seed_corpus, which writes the
// committed seeds in this format.
#ifndef TORCHMON_TESTS_FUZZ_INGEST_SCRIPT_H_
#define TORCHMON_TESTS_FUZZ_INGEST_SCRIPT_H_

#include <cstdint>

namespace torchmon::fuzz {

// A step's operation is its first byte modulo kIngestOpCount.
enum IngestOp : uint8_t {
  // Argument: a serialized torchmon.v1.IngestBatch, applied on stream 0 or 1
  // (two clients sharing the daemon: same series from both, conflicts).
  kBatchOnStream0 = 0,
  kBatchOnStream1 = 1,
  // Argument: milliseconds (little-endian, up to 4 bytes) the clock moves
  // before the daemon's timer work: CloseDueWindows.
  kTick = 2,
  // As kTick, then the idle-series and event-totals expiry.
  kExpire = 3,
  // A scrape of the exposition, plus queries; the argument, if it parses as
  // a torchmon.v1.Selector, selects what the queries ask for.
  kScrape = 4,
  // Shutdown's CloseAllWindows (ingestion may go on afterwards, as it does
  // for streams cut at the drain deadline).
  kCloseAll = 5,
  // The stream named by the argument's first byte (bit 0) ends; the next
  // batch on it starts a new stream (new session, hello again).
  kReconnect = 6,
  // What a process with many stats sends first, made here rather than
  // spelled out in the input: a batch defining `count` stats with
  // consecutive ids from `first_id` (wrapping), one sample each, applied as
  // kBatchOnStream0/1 are. Argument: byte 0 has the stream (bit 0) and a
  // shift (bits 1-4); count is bytes 1-2 (little-endian) >> shift, at most
  // kMaxManyStats, so that random bytes give small counts more often than
  // large ones; first_id is bytes 3-6.
  kManyStats = 7,
  kIngestOpCount = 8,
};
// Past the 1024 ids the binding table holds densely from the start; more
// would only slow every later step down.
inline constexpr uint32_t kMaxManyStats = 1200;

// The fuzzer's daemon: its clock starts here (Unix ms); sample timestamps
// near kIngestStartMs * 1000 µs fall in open windows.
inline constexpr int64_t kIngestStartMs = 1'700'000'000'000;
inline constexpr int64_t kIngestGraceMs = 2000;
inline constexpr int64_t kIngestSeriesTtlMs = 10'000;
inline constexpr int64_t kIngestMaxSkewMs = 60'000;
inline constexpr size_t kIngestHistoryWindows = 4;
inline constexpr size_t kIngestMaxEvents = 8;

}  // namespace torchmon::fuzz

#endif  // TORCHMON_TESTS_FUZZ_INGEST_SCRIPT_H_

// Filling one IngestBatch from the stats' buffers, definitions, drop counts
// and events, within a byte budget, with what to account once it is
// acknowledged.
#ifndef TORCHMON_CLIENT_DETAIL_OUTGOING_BATCH_H_
#define TORCHMON_CLIENT_DETAIL_OUTGOING_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "detail/chunk_pool.h"
#include "detail/stat_state.h"
#include "google/protobuf/arena.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// Batches are cut at about this much payload: large enough that per-message
// costs vanish, far below gRPC's 4 MiB default receive limit.
inline constexpr size_t kBatchBudgetBytes = size_t{1} << 20;
// Wire bytes budgeted per sample: 8 for the value plus a zigzag varint delta
// that is 1-3 bytes for realistic spacing. A generous 16 caps a batch at
// 65536 samples while keeping even pathological deltas under ~1.2 MiB.
inline constexpr size_t kSampleBytes = 16;
inline constexpr size_t kBlockOverheadBytes = 32;
inline constexpr size_t kDropReportBytes = 16;
// Tag and length bytes around a hello, definition or event, on top of its
// own ByteSizeLong().
inline constexpr size_t kFieldOverheadBytes = 8;

// One IngestBatch being filled. Its parts say, per stat, what the batch
// carries, so that an ack (or the client stopping first) can be accounted
// to each stat. Thread-compatible; kept read-only once written.
struct OutgoingBatch {
  OutgoingBatch();

  struct StatPart {
    StatState* stat;
    uint64_t samples = 0;
    uint64_t drops = 0;
    bool defines = false;
  };

  bool empty() const { return bytes == 0; }
  // Whether `more` bytes fit within kBatchBudgetBytes. An empty batch takes
  // anything, so no single item can be refused forever.
  bool Fits(size_t more) const { return empty() || bytes + more <= kBatchBudgetBytes; }
  // How many samples a new block may still take (0: write the batch first).
  uint64_t SampleRoom() const;

  // Appends without a budget check (callers ask Fits first).
  void AddDefinition(StatState& stat);
  void AddDropReport(StatState& stat, uint64_t drops);
  void AddEvent(v1::Event&& event, size_t size);
  // Drains up to `max` samples of `stat` into a new SampleBlock: values,
  // and timestamps as deltas from the block's base (omitted when all equal
  // the base). Returns how many (0: nothing published yet; no block added).
  size_t AddSamples(StatState& stat, ChunkPool& pool, uint64_t max);

  // The batch lives on its own arena: a client with many stats sends
  // batches of thousands of small blocks, each a message and two arrays,
  // and allocating and freeing them one by one cost the sender and the ack
  // thread more than filling them. The arena frees them all at once with
  // the batch (after its ack).
  std::unique_ptr<google::protobuf::Arena> arena;
  v1::IngestBatch* batch;  // on *arena
  std::vector<StatPart> parts;
  size_t bytes = 0;  // estimated payload; > 0 whenever anything was added
  uint64_t samples = 0;
  uint64_t events = 0;
};

// The bytes a definition takes in a batch.
size_t DefinitionBytes(const StatState& stat);

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_OUTGOING_BATCH_H_

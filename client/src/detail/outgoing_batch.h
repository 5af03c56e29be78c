// Filling one IngestBatch from the samples taken from the logs,
// definitions, drop counts and events, within a byte budget, with what to
// account once it is acknowledged.
#ifndef TORCHMON_CLIENT_DETAIL_OUTGOING_BATCH_H_
#define TORCHMON_CLIENT_DETAIL_OUTGOING_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "detail/chunk_pool.h"
#include "detail/stat_state.h"
#include "detail/wire_batch.h"
#include "google/protobuf/arena.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// Batches are cut at about this much payload: large enough that per-message
// costs vanish, far below gRPC's 4 MiB default receive limit.
inline constexpr size_t kBatchBudgetBytes = size_t{1} << 20;
// Wire bytes budgeted per sample: 8 for the value plus a zigzag varint delta
// that is 1-3 bytes for realistic spacing (and, in columns, a stat id of 1-3
// bytes). A generous 16 caps a batch at 65536 samples while keeping even
// pathological deltas and ids well under gRPC's 4 MiB.
inline constexpr size_t kSampleBytes = 16;
inline constexpr size_t kBlockOverheadBytes = 32;
inline constexpr size_t kDropReportBytes = 16;
// Tag and length bytes around a hello, definition or event, on top of its
// own ByteSizeLong().
inline constexpr size_t kFieldOverheadBytes = 8;

// A sample as the sender takes it from a log.
struct LogSample {
  uint32_t stat_id;
  double value;
  int64_t timestamp_us;
};

// A stat with this many samples in what AddSamples is given gets a
// SampleBlock of its own (about 20 bytes of framing, then ~10 per sample);
// fewer go to the batch's SampleColumns (~12 bytes per sample, framing
// shared by all).
inline constexpr uint32_t kMinBlockSamples = 4;

// The sender's scratch for grouping samples by stat, kept from call to
// call: a slot per stat id seen so far (4 bytes each), a group per stat in
// the samples at hand (16 bytes) and a cursor per stat that gets a block
// (40 bytes; a stat with a sample or two, as with many stats, has none).
//
// Samples go into a batch in two passes over the same sequence, so that
// each is written once, straight to its place, with no copy in between:
//   groups.Begin(); Count(id, t) for each sample;
//   batch.PlaceSamples(groups);    // a block per busy stat, room in the columns
//   Put(id, value, t) for each sample, in the same order;
//   batch.FinishSamples(groups);
// (OutgoingBatch::AddSamples does all four over a vector.) Count and Put
// are inline: the sender calls them once per sample.
struct SampleGroups {
  struct Group {
    uint32_t stat_id;
    uint32_t count;
    int64_t first_us;  // the time of the stat's first sample
  };
  // Where a block's next value and delta go while putting.
  struct BlockCursor {
    double* values;
    int64_t* deltas;
    int64_t last_us;
    v1::SampleBlock* block;
    bool all_at_base;
  };
  // slot_of_id[id] while counting: 1 + the stat's index in groups (0:
  // none yet); while putting: 1 + its index in blocks, or kInColumns.
  static constexpr uint32_t kInColumns = ~uint32_t{0};
  std::vector<uint32_t> slot_of_id;
  std::vector<Group> groups;
  std::vector<BlockCursor> blocks;
  // Samples counted, and the time of the first.
  uint64_t total = 0;
  int64_t first_us = 0;
  // While putting: where the columns' next entry goes, and the time the
  // next delta is taken from.
  uint32_t* column_ids = nullptr;
  double* column_values = nullptr;
  int64_t* column_deltas = nullptr;
  int64_t column_last_us = 0;

  // Unsigned arithmetic for every delta: explicit timestamps may be
  // anything, and the daemon's modulo-2^64 running sum restores them.
  static int64_t Delta(int64_t t, int64_t previous) {
    return static_cast<int64_t>(static_cast<uint64_t>(t) - static_cast<uint64_t>(previous));
  }

  void Begin() {
    groups.clear();
    blocks.clear();
    total = 0;
  }
  // Room for the samples of stats with ids up to `max_id`, `max_samples`
  // of them at most.
  void Reserve(uint32_t max_id, uint64_t max_samples);
  void Count(uint32_t stat_id, int64_t timestamp_us) {
    if (stat_id >= slot_of_id.size()) GrowSlots(stat_id);
    uint32_t& slot = slot_of_id[stat_id];
    if (slot == 0) {
      groups.push_back({stat_id, 0, timestamp_us});
      slot = static_cast<uint32_t>(groups.size());
    }
    ++groups[slot - 1].count;
    if (total++ == 0) first_us = timestamp_us;
  }
  // Put asks for the line this many samples ahead in a block's two
  // streams: with dozens of stats interleaved in a log, the hardware
  // prefetchers track too few streams to have it in time. (A prefetch past
  // the block's end is harmless: it never faults.)
  static constexpr int kPutAhead = 16;
  void Put(uint32_t stat_id, double value, int64_t timestamp_us) {
    const uint32_t slot = slot_of_id[stat_id];
    if (slot != kInColumns) {
      BlockCursor& b = blocks[slot - 1];
      __builtin_prefetch(b.values + kPutAhead, 1);
      __builtin_prefetch(b.deltas + kPutAhead, 1);
      const int64_t d = Delta(timestamp_us, b.last_us);
      *b.values++ = value;
      *b.deltas++ = d;
      b.all_at_base = b.all_at_base && d == 0;
      b.last_us = timestamp_us;
      return;
    }
    *column_ids++ = stat_id;
    *column_values++ = value;
    *column_deltas++ = Delta(timestamp_us, column_last_us);
    column_last_us = timestamp_us;
  }

 private:
  void GrowSlots(uint32_t stat_id);
};

// Memory for the arenas of a client's batches, kept for the next batch
// once a batch is acknowledged (or dropped). A full batch of samples fits
// in one block; the block a batch wrote last is the one the next batch
// takes, so the sender fills memory that is still in cache and already
// mapped. Allocating it afresh for every batch left the sender taking
// page faults on the pages glibc had just returned to the kernel (a free
// from another thread trims the heap), and the writes to freshly zeroed
// pages missed every cache.
//
// Thread-safe: the sender takes blocks, whoever drops a batch's last
// reference (the ack reader, the sender) gives them back.
class BatchMemory {
 public:
  // A full batch of samples in blocks (16 bytes a sample, kBatchBudgetBytes
  // in all) with its messages' framing; a batch that needs more takes
  // further blocks from the heap, as an arena does.
  static constexpr size_t kBlockBytes = kBatchBudgetBytes + (kBatchBudgetBytes >> 2);
  // Blocks kept while the sender is busy: as many as batches are usually
  // in flight at once, unacknowledged.
  static constexpr size_t kKeep = 4;

  // A block of kBlockBytes: a kept one, else a new one (address space,
  // made resident as the arena writes it).
  std::unique_ptr<char[]> Take();
  // Keeps `block` for the next Take unless kKeep are kept already.
  void Give(std::unique_ptr<char[]> block);
  // Frees every kept block (the sender, when no samples have flowed for a
  // while: memory follows traffic).
  void Trim();
  size_t kept() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<char[]>> free_ ABSL_GUARDED_BY(mu_);
};

// A batch's arena: on a block of its BatchMemory (given back when the
// arena is gone), or on its own if there is none.
class BatchArena {
 public:
  explicit BatchArena(std::shared_ptr<BatchMemory> memory);
  ~BatchArena();
  BatchArena(const BatchArena&) = delete;
  BatchArena& operator=(const BatchArena&) = delete;
  google::protobuf::Arena* get() { return &*arena_; }

 private:
  const std::shared_ptr<BatchMemory> memory_;
  std::unique_ptr<char[]> block_;
  std::optional<google::protobuf::Arena> arena_;
};

// One IngestBatch being filled. Its parts say, per stat, what the batch
// carries (its columns' stat ids count one sample each), so that an ack (or
// the client stopping first) can be accounted to each stat.
// Thread-compatible; kept read-only once written.
struct OutgoingBatch {
  // With `memory`, the batch's arena starts on one of its blocks.
  explicit OutgoingBatch(std::shared_ptr<BatchMemory> memory = nullptr);

  // A stat's samples or drops in the batch.
  struct StatPart {
    uint32_t stat_id;
    uint64_t samples = 0;
    uint64_t drops = 0;
  };

  bool empty() const { return bytes == 0; }
  // What the stream writes.
  WireBatch wire() const { return {*batch, definitions}; }
  // Whether `more` bytes fit within kBatchBudgetBytes. An empty batch takes
  // anything, so no single item can be refused forever.
  bool Fits(size_t more) const { return empty() || bytes + more <= kBatchBudgetBytes; }
  // How many samples may still be added (0: write the batch first).
  uint64_t SampleRoom() const;

  // Makes room for the definitions of `stats`, as many as fit the budget:
  // grown by doubling instead, the batch's definitions and their list left
  // the sender's heap holding the earlier copies (about 1.5 times the
  // batch's 260 KB for 10,000 new stats).
  void ReserveDefinitions(const std::vector<StatState*>& stats);
  // Appends without a budget check (callers ask Fits first).
  void AddDefinition(StatState& stat);
  void AddDropReport(StatState& stat, uint64_t drops);
  void AddEvent(v1::Event&& event, size_t size);
  void AddEventDropReport(const std::string& name, uint64_t dropped, size_t size);
  // The stream no longer uses stat `id` (applied after everything else in
  // the batch).
  void AddRelease(uint32_t id);
  static constexpr size_t kReleaseBytes = 5;
  // Adds samples of any stats, keeping each stat's in their order: a stat
  // with at least kMinBlockSamples of them gets a SampleBlock (timestamps
  // as deltas from its base, omitted when all equal the base), the others
  // go to the batch's SampleColumns. Leaves groups.groups holding one
  // group per stat, with its count, for the caller's accounting.
  void AddSamples(const std::vector<LogSample>& taken, SampleGroups& groups);
  // The same in the two passes SampleGroups describes: after the counting
  // pass, makes room for every counted sample (a block per stat with at
  // least kMinBlockSamples, the columns for the rest) and points `groups`
  // at it; after the putting pass, which must put exactly the samples
  // counted, in the same order, settles the blocks and the accounting.
  void PlaceSamples(SampleGroups& groups);
  void FinishSamples(SampleGroups& groups);

  // Calls fn(stat_id, samples) for each run of one stat's samples in the
  // columns, in order: what an ack, or the client stopping, accounts.
  template <typename Fn>
  void ForEachColumnRun(Fn&& fn) const {
    const auto& ids = batch->columns().stat_ids();
    for (int i = 0; i < ids.size();) {
      int end = i + 1;
      while (end < ids.size() && ids[end] == ids[i]) ++end;
      fn(ids[i], static_cast<uint64_t>(end - i));
      i = end;
    }
  }

  // The batch lives on its own arena: a client with many stats sends
  // batches of thousands of small blocks, each a message and two arrays,
  // and allocating and freeing them one by one cost the sender and the ack
  // thread more than filling them. The arena frees them all at once with
  // the batch (after its ack).
  std::unique_ptr<BatchArena> arena;
  v1::IngestBatch* batch;  // on *arena; its definitions are in `definitions`
  // The definitions, as entries of IngestBatch.definitions on the wire
  // (AppendDefinitionEntry): 26 bytes each, where parsed into the arena
  // each took 320.
  std::string definitions;
  std::vector<StatPart> parts;
  // The stats the batch defines: alive (being defined), and marked defined
  // once the batch is written. 8 bytes each, where a StatPart apiece took
  // 32 (10,000 new stats are defined in one or two batches).
  std::vector<StatState*> defines;
  size_t bytes = 0;  // estimated payload; > 0 whenever anything was added
  uint64_t samples = 0;
  uint64_t events = 0;
  // Timestamp of the columns' last sample (their deltas run on from it).
  int64_t columns_last_us = 0;
};

// The bytes a definition takes in a batch.
size_t DefinitionBytes(const StatState& stat);

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_OUTGOING_BATCH_H_

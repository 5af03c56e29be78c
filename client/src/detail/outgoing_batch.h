// Filling one IngestBatch from the samples taken from the logs,
// definitions, drop counts and events, within a byte budget, with what to
// account once it is acknowledged.
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
// call: a slot per stat id seen so far (4 bytes each) and the groups.
struct SampleGroups {
  struct Group {
    uint32_t stat_id;
    uint32_t count;
    v1::SampleBlock* block;  // null: its samples go to the columns
    int64_t last_us;
    bool all_at_base;
  };
  std::vector<uint32_t> slot_of_id;  // 1 + index in groups; 0: none
  std::vector<Group> groups;
};

// One IngestBatch being filled. Its parts say, per stat, what the batch
// carries (its columns' stat ids count one sample each), so that an ack (or
// the client stopping first) can be accounted to each stat.
// Thread-compatible; kept read-only once written.
struct OutgoingBatch {
  OutgoingBatch();

  struct StatPart {
    uint32_t stat_id;
    uint64_t samples = 0;
    uint64_t drops = 0;
    // Set for a definition: the stat then is alive (being defined), and
    // marked defined once the batch is written.
    StatState* defines = nullptr;
  };

  bool empty() const { return bytes == 0; }
  // Whether `more` bytes fit within kBatchBudgetBytes. An empty batch takes
  // anything, so no single item can be refused forever.
  bool Fits(size_t more) const { return empty() || bytes + more <= kBatchBudgetBytes; }
  // How many samples may still be added (0: write the batch first).
  uint64_t SampleRoom() const;

  // Appends without a budget check (callers ask Fits first).
  void AddDefinition(StatState& stat);
  void AddDropReport(StatState& stat, uint64_t drops);
  void AddEvent(v1::Event&& event, size_t size);
  void AddEventDropReport(const std::string& name, uint64_t dropped, size_t size);
  // Adds samples of any stats, keeping each stat's in their order: a stat
  // with at least kMinBlockSamples of them gets a SampleBlock (timestamps
  // as deltas from its base, omitted when all equal the base), the others
  // go to the batch's SampleColumns. Leaves groups.groups holding one
  // group per stat, with its count, for the caller's accounting.
  void AddSamples(const std::vector<LogSample>& taken, SampleGroups& groups);

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
  std::unique_ptr<google::protobuf::Arena> arena;
  v1::IngestBatch* batch;  // on *arena
  std::vector<StatPart> parts;
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

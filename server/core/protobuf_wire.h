// Protocol buffers' wire format, written by hand: what the writers that
// encode without message objects share (the /metrics protobuf format,
// server/exposition/prometheus_protobuf.cc; remote-write, server/push/
// encode.cc), so that a scrape or a push of 100k series builds none.
// Pure; no I/O.
#ifndef TORCHMON_SERVER_CORE_PROTOBUF_WIRE_H_
#define TORCHMON_SERVER_CORE_PROTOBUF_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/string_view.h"

namespace torchmon::server::wire {

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2 };

constexpr uint32_t Tag(int field, WireType type) {
  return (static_cast<uint32_t>(field) << 3) | type;
}

inline size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline char* WriteVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}

inline void PutVarint(std::string& out, uint64_t v) {
  char buf[10];
  out.append(buf, static_cast<size_t>(WriteVarint(buf, v) - buf));
}

inline void PutDouble(std::string& out, int field, double value) {
  PutVarint(out, Tag(field, kFixed64));
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  char buf[8];
  absl::little_endian::Store64(buf, bits);
  out.append(buf, 8);
}

inline void PutFixed64(std::string& out, int field, uint64_t value) {
  PutVarint(out, Tag(field, kFixed64));
  char buf[8];
  absl::little_endian::Store64(buf, value);
  out.append(buf, 8);
}

inline void PutUint(std::string& out, int field, uint64_t value) {
  PutVarint(out, Tag(field, kVarint));
  PutVarint(out, value);
}

inline void PutBytes(std::string& out, int field, absl::string_view bytes) {
  PutVarint(out, Tag(field, kLengthDelimited));
  PutVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

// sint64 / sint32 fields: the zigzag encoding of `v`, as a varint.
inline uint64_t ZigZag(int64_t v) {
  return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}

// One sign of a native histogram's buckets as Prometheus writes them
// (io.prometheus.client and remote-write's prompb share the shape):
// BucketSpan messages (offset sint32 = 1, length uint32 = 2) and packed
// sint64 count deltas. A gap of up to two empty buckets is carried as zero
// buckets inside a span (a new span costs more), as Prometheus' client
// libraries do. Reusable: its buffers keep their capacity.
class BucketSpansWriter {
 public:
  // Add every bucket with a count, in index order, then Finish.
  void Add(int32_t index, uint64_t count) {
    if (spans_.empty()) {
      spans_.push_back({index, 0});
    } else {
      const int32_t gap = index - previous_index_ - 1;
      if (gap > 2) {
        spans_.push_back({gap, 0});
      } else {
        for (int32_t g = 0; g < gap; ++g) {
          PutVarint(deltas_, ZigZag(-previous_));
          previous_ = 0;
          ++spans_.back().second;
        }
      }
    }
    PutVarint(deltas_, ZigZag(static_cast<int64_t>(count) - previous_));
    previous_ = static_cast<int64_t>(count);
    previous_index_ = index;
    ++spans_.back().second;
  }

  // Appends the spans as field `span_field` and the deltas as field
  // `delta_field` of the histogram being written (nothing for a sign
  // without buckets), and starts over.
  void Finish(std::string& out, int span_field, int delta_field) {
    if (!spans_.empty()) {
      for (const auto& [offset, length] : spans_) {
        span_.clear();
        // sint32: the zigzag of the 32-bit value.
        PutUint(span_, 1, ZigZag(offset) & 0xFFFFFFFFu);
        PutUint(span_, 2, length);
        PutBytes(out, span_field, span_);
      }
      PutBytes(out, delta_field, deltas_);  // packed
    }
    spans_.clear();
    deltas_.clear();
    previous_ = 0;
    previous_index_ = 0;
  }

 private:
  std::vector<std::pair<int32_t, uint32_t>> spans_;  // (offset, length)
  std::string deltas_;
  std::string span_;
  int64_t previous_ = 0;
  int32_t previous_index_ = 0;
};

}  // namespace torchmon::server::wire

#endif  // TORCHMON_SERVER_CORE_PROTOBUF_WIRE_H_

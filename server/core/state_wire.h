// The byte encoding of the daemon's state on disk (--state-dir): the
// snapshot and the journal's records. Little-endian fixed-width integers
// and doubles, LEB128 varints, zigzag for signed deltas, length-prefixed
// strings. The reader checks every bound and says what it was reading when
// the bytes ran out or made no sense; it never trusts a length.
//
// Thread-compatible.
#ifndef TORCHMON_SERVER_CORE_STATE_WIRE_H_
#define TORCHMON_SERVER_CORE_STATE_WIRE_H_

#include <cstdint>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace torchmon::server::state {

// Encoders into a buffer the caller sized (at least 10 bytes a varint, 8
// a fixed value): the journal's hot path, where appending to a string piece
// by piece cost more than the encoding. Each returns the end of what it wrote.
inline char* PutVarint(char* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  *p++ = static_cast<char>(v);
  return p;
}
inline char* PutSigned(char* p, int64_t v) {
  return PutVarint(p, (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
}

// A check of a record's or snapshot's bytes: catches a torn write or flipped
// bits (not an attacker: the directory is the daemon's own). Four
// independent lanes of one multiply per 8 bytes, so that the multiplies
// overlap: about 8 bytes a cycle.
inline uint64_t Check(absl::string_view s) {
  constexpr uint64_t kMul = 0xff51afd7ed558ccdull;
  uint64_t lane[4] = {0x9e3779b97f4a7c15ull ^ s.size(), 0xc2b2ae3d27d4eb4full,
                      0x165667b19e3779f9ull, 0x27d4eb2f165667c5ull};
  const char* p = s.data();
  size_t n = s.size();
  for (; n >= 32; p += 32, n -= 32) {
    for (int i = 0; i < 4; ++i) {
      uint64_t w;
      std::memcpy(&w, p + 8 * i, 8);
      lane[i] = (lane[i] ^ w) * kMul;
      lane[i] ^= lane[i] >> 32;
    }
  }
  uint64_t h = lane[0] ^ (lane[1] * 3) ^ (lane[2] * 5) ^ (lane[3] * 7);
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 32;
  }
  uint64_t tail = 0;
  if (n > 0) std::memcpy(&tail, p, n);  // p may be null for an empty string
  h = (h ^ tail ^ (uint64_t{n} << 56)) * 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 29);
}

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}

  void U8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void Fixed64(uint64_t v) {
    char b[8];
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(v >> (8 * i));
    out_.append(b, 8);
  }
  void Double(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    Fixed64(bits);
  }
  void Varint(uint64_t v) {
    char b[10];
    int n = 0;
    while (v >= 0x80) {
      b[n++] = static_cast<char>(v | 0x80);
      v >>= 7;
    }
    b[n++] = static_cast<char>(v);
    out_.append(b, static_cast<size_t>(n));
  }
  void Signed(int64_t v) {
    Varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  void Bool(bool v) { U8(v ? 1 : 0); }
  void String(absl::string_view s) {
    Varint(s.size());
    out_.append(s.data(), s.size());
  }
  // `n` doubles as they lie in memory (the host is little-endian: every
  // target of torchmon is).
  void Doubles(const double* v, size_t n) {
    if (n == 0) return;  // v may be null then
    out_.append(reinterpret_cast<const char*>(v), n * sizeof(double));
  }

  std::string& out() { return out_; }

 private:
  std::string& out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  bool done() const { return pos_ == in_.size(); }
  size_t remaining() const { return in_.size() - pos_; }
  size_t position() const { return pos_; }

  // Marks the input bad with `why` (what was being read); the first reason
  // sticks. Every read after it returns zeroes.
  void Fail(absl::string_view why) {
    if (status_.ok()) {
      status_ = absl::DataLossError(absl::StrCat(why, " (at byte ", pos_, " of ", in_.size(), ")"));
    }
    pos_ = in_.size();
  }

  uint8_t U8(absl::string_view what) {
    if (!Need(1, what)) return 0;
    return static_cast<uint8_t>(in_[pos_++]);
  }
  uint64_t Fixed64(absl::string_view what) {
    if (!Need(8, what)) return 0;
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) {
      v |= uint64_t{static_cast<uint8_t>(in_[pos_ + static_cast<size_t>(i)])} << (8 * i);
    }
    pos_ += 8;
    return v;
  }
  double Double(absl::string_view what) {
    const uint64_t bits = Fixed64(what);
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  uint64_t Varint(absl::string_view what) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (!Need(1, what)) return 0;
      const uint8_t b = static_cast<uint8_t>(in_[pos_++]);
      v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return v;
    }
    Fail(absl::StrCat(what, ": varint longer than 10 bytes"));
    return 0;
  }
  int64_t Signed(absl::string_view what) {
    const uint64_t z = Varint(what);
    return static_cast<int64_t>((z >> 1) ^ (~(z & 1) + 1));
  }
  bool Bool(absl::string_view what) {
    const uint8_t b = U8(what);
    if (b > 1) Fail(absl::StrCat(what, ": ", b, " is not a boolean"));
    return b == 1;
  }
  // A count of items each at least `min_item_bytes` long: refused if the
  // input cannot hold that many, so a corrupt count never allocates.
  size_t Count(absl::string_view what, size_t min_item_bytes) {
    const uint64_t n = Varint(what);
    if (min_item_bytes > 0 && n > remaining() / min_item_bytes) {
      Fail(absl::StrCat(what, ": ", n, " items cannot fit in the ", remaining(), " bytes left"));
      return 0;
    }
    return static_cast<size_t>(n);
  }
  std::string String(absl::string_view what) {
    const size_t n = Count(what, 1);
    if (!Need(n, what)) return {};
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  // The next `n` bytes as they are (a part read, or skipped, as a whole).
  absl::string_view Bytes(size_t n, absl::string_view what) {
    if (!Need(n, what)) return {};
    const absl::string_view out = in_.substr(pos_, n);
    pos_ += n;
    return out;
  }
  // `n` doubles (Writer::Doubles).
  bool Doubles(double* out, size_t n, absl::string_view what) {
    if (n == 0) return ok();  // out may be null then
    if (n > remaining() / sizeof(double) || !Need(n * sizeof(double), what)) return false;
    std::memcpy(out, in_.data() + pos_, n * sizeof(double));
    pos_ += n * sizeof(double);
    return true;
  }

 private:
  bool Need(size_t n, absl::string_view what) {
    if (!status_.ok()) return false;
    if (n > in_.size() - pos_) {
      Fail(absl::StrCat(what, ": ", n, " bytes needed, ", in_.size() - pos_, " left"));
      return false;
    }
    return true;
  }

  absl::string_view in_;
  size_t pos_ = 0;
  absl::Status status_;
};

}  // namespace torchmon::server::state

#endif  // TORCHMON_SERVER_CORE_STATE_WIRE_H_

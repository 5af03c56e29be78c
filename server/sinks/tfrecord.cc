#include "server/sinks/tfrecord.h"

#include <cstring>

#include "server/sinks/crc32c.h"

namespace torchmon::server {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void PutVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void PutTag(std::string& out, uint32_t field, uint32_t wire_type) {
  PutVarint(out, (static_cast<uint64_t>(field) << 3) | wire_type);
}

void PutLittleEndian(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}

void PutBytes(std::string& out, uint32_t field, absl::string_view bytes) {
  PutTag(out, field, kLengthDelimited);
  PutVarint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

void PutDouble(std::string& out, uint32_t field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutTag(out, field, kFixed64);
  PutLittleEndian(out, bits, 8);
}

void PutFloat(std::string& out, uint32_t field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutTag(out, field, kFixed32);
  PutLittleEndian(out, bits, 4);
}

// Event fields.
constexpr uint32_t kWallTime = 1, kStep = 2, kFileVersion = 3, kSummary = 5;
// Summary.value, Summary.Value.tag, Summary.Value.simple_value.
constexpr uint32_t kValue = 1, kTag = 1, kSimpleValue = 2;

}  // namespace

std::string TfRecord(absl::string_view data) {
  std::string out;
  out.reserve(data.size() + 16);
  PutLittleEndian(out, data.size(), 8);
  PutLittleEndian(out, MaskCrc32c(Crc32c(out)), 4);
  out.append(data.data(), data.size());
  PutLittleEndian(out, MaskCrc32c(Crc32c(data)), 4);
  return out;
}

std::string FileVersionEvent(double wall_time) {
  std::string event;
  PutDouble(event, kWallTime, wall_time);
  PutBytes(event, kFileVersion, "brain.Event:2");
  return event;
}

std::string ScalarsEvent(double wall_time, int64_t step,
                         const std::vector<std::pair<std::string, float>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    PutBytes(v, kTag, tag);
    PutFloat(v, kSimpleValue, value);
    PutBytes(summary, kValue, v);
  }
  std::string event;
  PutDouble(event, kWallTime, wall_time);
  PutTag(event, kStep, kVarint);
  PutVarint(event, static_cast<uint64_t>(step));
  PutBytes(event, kSummary, summary);
  return event;
}

}  // namespace torchmon::server

// What the sender writes on an Ingest stream: an IngestBatch whose
// definitions travel as the bytes each stat keeps, never parsed back into
// StatDefinition messages.
//
// A definition is about 26 bytes on the wire; parsed into a batch's arena
// it took 320 (the message, its empty labels map, its spec), so a client
// defining ten thousand stats at once filled batch blocks with 3 MiB that
// BatchMemory then kept resident. Here a batch keeps its definitions as one
// string of wire-format entries (field 3, length-delimited), and gRPC
// writes them ahead of the rest of the message. The daemon sees an
// IngestBatch: protobuf parses fields in any order, and concatenated
// encodings of one message merge (its repeated fields append).
#ifndef TORCHMON_CLIENT_DETAIL_WIRE_BATCH_H_
#define TORCHMON_CLIENT_DETAIL_WIRE_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "grpcpp/impl/serialization_traits.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/slice.h"
#include "grpcpp/support/status.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// torchmon.v1.Ingest/Stream, as the generated stub names it. The client
// opens its stream with this name and WireBatch as the message it writes
// (grpc::internal::ClientReaderWriterFactory), not through the stub, whose
// stream writes v1::IngestBatch only.
inline constexpr char kIngestStreamMethod[] = "/torchmon.v1.Ingest/Stream";

// Appends `definition` (a serialized StatDefinition) to `wire` as an entry
// of IngestBatch.definitions: its tag, its length (varint) and its bytes.
void AppendDefinitionEntry(absl::string_view definition, std::string* wire);
// The bytes AppendDefinitionEntry appends for a definition of `size` bytes.
size_t DefinitionEntryBytes(size_t size);

// One IngestBatch to write: `message` without definitions, and
// `definitions`, entries that AppendDefinitionEntry wrote.
struct WireBatch {
  const v1::IngestBatch& message;
  absl::string_view definitions;

  // The encoding's size, and the encoding into `out` (Size() bytes):
  // definitions first, then the message. WriteTo after Size(), which
  // computes (and caches) the message's size that WriteTo writes by.
  size_t Size() const;
  void WriteTo(uint8_t* out) const;
  // The encoding as a string (tests read it back as a v1::IngestBatch).
  std::string Encode() const;
};

}  // namespace torchmon::detail

namespace grpc {

// gRPC's serialization of a WireBatch (the client only writes them).
template <>
class SerializationTraits<torchmon::detail::WireBatch, void> {
 public:
  static Status Serialize(const torchmon::detail::WireBatch& batch, ByteBuffer* buffer,
                          bool* own_buffer) {
    Slice slice(batch.Size());
    batch.WriteTo(const_cast<uint8_t*>(slice.begin()));
    ByteBuffer encoded(&slice, 1);
    buffer->Swap(&encoded);
    *own_buffer = true;
    return Status::OK;
  }
};

}  // namespace grpc

#endif  // TORCHMON_CLIENT_DETAIL_WIRE_BATCH_H_

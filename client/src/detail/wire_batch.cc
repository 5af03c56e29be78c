#include "detail/wire_batch.h"

#include <cstring>

#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace torchmon::detail {

size_t DefinitionEntryBytes(size_t size) {
  return 1 + google::protobuf::io::CodedOutputStream::VarintSize32(static_cast<uint32_t>(size)) +
         size;
}

void AppendDefinitionEntry(absl::string_view definition, std::string* wire) {
  using google::protobuf::internal::WireFormatLite;
  using google::protobuf::io::CodedOutputStream;
  constexpr uint32_t kTag = WireFormatLite::MakeTag(v1::IngestBatch::kDefinitionsFieldNumber,
                                                    WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  uint8_t head[1 + 5];  // the tag (one byte: field 3) and a varint32 length
  static_assert(kTag < 0x80);
  head[0] = static_cast<uint8_t>(kTag);
  const uint8_t* end =
      CodedOutputStream::WriteVarint32ToArray(static_cast<uint32_t>(definition.size()), head + 1);
  wire->append(reinterpret_cast<const char*>(head), static_cast<size_t>(end - head));
  wire->append(definition.data(), definition.size());
}

size_t WireBatch::Size() const { return definitions.size() + message.ByteSizeLong(); }

void WireBatch::WriteTo(uint8_t* out) const {
  // Most batches define nothing: then definitions.data() may be null,
  // which memcpy must not be given even for no bytes.
  if (!definitions.empty()) std::memcpy(out, definitions.data(), definitions.size());
  // Size() computed (and cached) the message's size.
  message.SerializeWithCachedSizesToArray(out + definitions.size());
}

std::string WireBatch::Encode() const {
  std::string encoded(Size(), '\0');
  WriteTo(reinterpret_cast<uint8_t*>(encoded.data()));
  return encoded;
}

}  // namespace torchmon::detail

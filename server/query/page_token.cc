#include "server/query/page_token.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::server {
namespace {

// Bumped if the layout changes; a token of another version is refused.
constexpr char kMagic[] = {'t', 'm', 'p', '1'};
// magic, kind, fingerprint, two 8-byte fields, then the series key.
constexpr size_t kHeaderBytes = sizeof(kMagic) + 1 + 8 + 8 + 8;

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint64_t GetU64(const std::string& in, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return v;
}

absl::Status NotOurs(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "page_token ", why, "; send the next_page_token of the previous answer to the same request, "
      "or no page_token for the first page"));
}

}  // namespace

uint64_t RequestFingerprint(const google::protobuf::Message& request) {
  std::unique_ptr<google::protobuf::Message> copy(request.New());
  copy->CopyFrom(request);
  const google::protobuf::Descriptor* descriptor = copy->GetDescriptor();
  const google::protobuf::Reflection* reflection = copy->GetReflection();
  for (const char* paging : {"page_size", "page_token"}) {
    if (const auto* field = descriptor->FindFieldByName(paging); field != nullptr) {
      reflection->ClearField(copy.get(), field);
    }
  }
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    copy->SerializeToCodedStream(&coded);
  }
  // FNV-1a, 64 bits: stable across processes and builds, unlike absl::Hash.
  uint64_t hash = 0xcbf29ce484222325ull;
  for (const char c : absl::StrCat(descriptor->full_name(), "\n", bytes)) {
    hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  }
  return hash;
}

std::string EncodePageToken(const PageToken& token) {
  std::string raw(kMagic, sizeof(kMagic));
  raw.push_back(static_cast<char>(token.kind));
  PutU64(raw, token.fingerprint);
  switch (token.kind) {
    case PageToken::Kind::kEvents:
      PutU64(raw, token.after_sequence);
      PutU64(raw, token.remaining);
      break;
    case PageToken::Kind::kWindows:
    case PageToken::Kind::kSeries:
    case PageToken::Kind::kEventTotals:
      PutU64(raw, static_cast<uint64_t>(token.after_start_ms));
      // Zero in tokens from before redefinitions: definition 0, as then.
      PutU64(raw, token.after_definition);
      v1::SeriesKey key;
      if (token.series != nullptr) {
        key.set_stat(token.series->stat);
        for (const auto& [k, v] : token.series->labels) (*key.mutable_labels())[k] = v;
      }
      raw += key.SerializeAsString();
      break;
  }
  return absl::WebSafeBase64Escape(raw);
}

absl::StatusOr<PageToken> DecodePageToken(const std::string& text, PageToken::Kind kind,
                                          uint64_t fingerprint) {
  std::string raw;
  if (!absl::WebSafeBase64Unescape(text, &raw) || raw.size() < kHeaderBytes ||
      std::memcmp(raw.data(), kMagic, sizeof(kMagic)) != 0) {
    return NotOurs("is not one this daemon issued");
  }
  PageToken token;
  token.kind = static_cast<PageToken::Kind>(raw[sizeof(kMagic)]);
  if (token.kind != kind) return NotOurs("belongs to another kind of query");
  token.fingerprint = GetU64(raw, sizeof(kMagic) + 1);
  if (token.fingerprint != fingerprint) {
    return NotOurs("belongs to another request (other selector or bounds)");
  }
  const uint64_t a = GetU64(raw, sizeof(kMagic) + 9);
  const uint64_t b = GetU64(raw, sizeof(kMagic) + 17);
  if (kind == PageToken::Kind::kEvents) {
    if (raw.size() != kHeaderBytes) return NotOurs("is not one this daemon issued");
    token.after_sequence = a;
    token.remaining = b;
    return token;
  }
  token.after_start_ms = static_cast<int64_t>(a);
  if (b > std::numeric_limits<uint32_t>::max()) return NotOurs("is not one this daemon issued");
  token.after_definition = static_cast<uint32_t>(b);
  v1::SeriesKey key;
  if (!key.ParseFromArray(raw.data() + kHeaderBytes, static_cast<int>(raw.size() - kHeaderBytes))) {
    return NotOurs("is not one this daemon issued");
  }
  Labels labels(key.labels().begin(), key.labels().end());
  std::sort(labels.begin(), labels.end());
  token.series = std::make_shared<const SeriesKey>(SeriesKey{key.stat(), LabelSet(std::move(labels))});
  return token;
}

}  // namespace torchmon::server

// The page tokens of Query.ListSeries, GetWindows and GetEvents: where the
// next page resumes (the last item listed, by value: a series key, a
// window's series and start, an event's sequence) and a fingerprint of the
// request it belongs to. Opaque to clients (URL-safe base64), stable across
// daemon restarts.
#ifndef TORCHMON_SERVER_QUERY_PAGE_TOKEN_H_
#define TORCHMON_SERVER_QUERY_PAGE_TOKEN_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "google/protobuf/message.h"
#include "server/core/types.h"

namespace torchmon::server {

// A stable hash of `request` without its paging fields (page_size,
// page_token): a token is good for the request it came from, whatever page
// size the next request asks for.
uint64_t RequestFingerprint(const google::protobuf::Message& request);

struct PageToken {
  enum class Kind : char { kSeries = 'S', kWindows = 'W', kEvents = 'E', kEventTotals = 'T' };
  Kind kind = Kind::kSeries;
  uint64_t fingerprint = 0;
  // kSeries, kWindows, kEventTotals: the last series listed (kWindows: the
  // series of the last window listed; kEventTotals: the event name and
  // labels).
  std::shared_ptr<const SeriesKey> series;
  // kWindows: the start of the last window listed (Unix ms), and the
  // definition it was aggregated under (WindowRecord::definition).
  int64_t after_start_ms = 0;
  uint32_t after_definition = 0;
  // kEvents: the last sequence looked at, and the events `limit` still
  // allows (0: no limit).
  uint64_t after_sequence = 0;
  uint64_t remaining = 0;
};

std::string EncodePageToken(const PageToken& token);

// The token `text` carries, if it is one of kind `kind` issued for a
// request with `fingerprint`; otherwise InvalidArgument saying which.
absl::StatusOr<PageToken> DecodePageToken(const std::string& text, PageToken::Kind kind,
                                          uint64_t fingerprint);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_QUERY_PAGE_TOKEN_H_

#include "server/core/rate_limited_log.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

// A detail comes from a client or a library: it is shortened before it
// reaches the log.
constexpr size_t kMaxDetailBytes = 300;

// Shortened, and on one line: a client's text must not forge log lines.
std::string Printable(absl::string_view detail) {
  std::string out;
  for (const char c : protocol::Quote(detail, kMaxDetailBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out;
}

std::string Seconds(int64_t ms) {
  return ms % 1000 == 0 ? absl::StrCat(ms / 1000, " s") : absl::StrCat(ms, " ms");
}

}  // namespace

RateLimitedLog::RateLimitedLog(const Clock& clock, int64_t interval_ms, Sink sink)
    : clock_(clock), interval_ms_(interval_ms), sink_(std::move(sink)) {}

void RateLimitedLog::Report(absl::string_view kind, absl::string_view detail) {
  const int64_t now = clock_.NowMs();
  std::string line;
  {
    absl::MutexLock lock(&mu_);
    auto [it, first] = kinds_.try_emplace(kind);
    Kind& k = it->second;
    if (!first) {
      ++k.suppressed;
      k.last_detail = Printable(detail);
      return;
    }
    k.since_ms = now;
    ++lines_written_;
    line = absl::StrCat(kind, ": ", Printable(detail),
                        " (more of these are counted and summed up every ",
                        Seconds(interval_ms_), ")");
  }
  sink_(line);
}

void RateLimitedLog::Flush(bool everything) {
  const int64_t now = clock_.NowMs();
  std::vector<std::string> lines;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = kinds_.begin(); it != kinds_.end();) {
      Kind& k = it->second;
      if (!everything && now < k.since_ms + interval_ms_) {
        ++it;
        continue;
      }
      if (k.suppressed == 0) {
        // Quiet for a whole interval: the next one is written at once.
        kinds_.erase(it++);
        continue;
      }
      lines.push_back(absl::StrCat(it->first, ": ", k.suppressed, " more in the last ",
                                   Seconds(now - k.since_ms), ", the last: ", k.last_detail));
      k.suppressed = 0;
      k.since_ms = now;
      ++it;
    }
    lines_written_ += lines.size();
  }
  for (const std::string& line : lines) sink_(line);
}

uint64_t RateLimitedLog::lines_written() const {
  absl::MutexLock lock(&mu_);
  return lines_written_;
}

}  // namespace torchmon::server

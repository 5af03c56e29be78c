// Log lines about what clients get wrong, which a hostile or broken client
// can repeat without end (a refused TLS handshake, a refused token, a
// malformed batch): the first of each kind is written at once, the ones
// after it are counted, and each kind gets at most one summary line per
// interval ("N more in the last 60 s, the last: ..."). So a loop of bad
// clients costs the log a line a minute, not a line an attempt, and an
// operator still sees at once that something is wrong, and what.
//
// Thread-safe.
#ifndef TORCHMON_SERVER_CORE_RATE_LIMITED_LOG_H_
#define TORCHMON_SERVER_CORE_RATE_LIMITED_LOG_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/core/clock.h"

namespace torchmon::server {

class RateLimitedLog {
 public:
  // Writes one line (without its newline); called outside the lock.
  using Sink = std::function<void(const std::string& line)>;

  RateLimitedLog(const Clock& clock, int64_t interval_ms, Sink sink);

  // One occurrence of `kind`, a fixed phrase ("refused a TLS handshake"),
  // with what is particular to it in `detail` (quoted shortened).
  void Report(absl::string_view kind, absl::string_view detail) ABSL_LOCKS_EXCLUDED(mu_);

  // Writes the summary of every kind whose interval has passed with
  // occurrences counted, and forgets the kinds that went quiet. The
  // daemon's timer calls it; `everything` (at shutdown) writes every
  // summary pending, whatever its interval.
  void Flush(bool everything = false) ABSL_LOCKS_EXCLUDED(mu_);

  // Lines written so far.
  uint64_t lines_written() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Kind {
    int64_t since_ms = 0;      // the start of the current interval
    uint64_t suppressed = 0;   // occurrences counted in it, not written
    std::string last_detail;   // the last of them
  };

  const Clock& clock_;
  const int64_t interval_ms_;
  const Sink sink_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Kind> kinds_ ABSL_GUARDED_BY(mu_);
  uint64_t lines_written_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_RATE_LIMITED_LOG_H_

// Slows down whoever keeps failing to authenticate (docs/security.md,
// "Throttling"): after a peer's k-th failure in a row (k > tolerated) its
// next attempt is checked only once min(first * 2^(k-tolerated-1),
// longest) has passed; until then it is turned away unchecked, so a
// password cannot be guessed faster than that. A success forgets the peer.
// Other peers are never slowed: each is a separate entry. At most
// `max_peers` are remembered (the one that failed longest ago is forgotten
// first), so a flood of addresses costs bounded memory.
//
// Thread-safe.
#ifndef TORCHMON_SERVER_AUTH_FAILURE_THROTTLE_H_
#define TORCHMON_SERVER_AUTH_FAILURE_THROTTLE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torchmon::server {

class FailureThrottle {
 public:
  struct Options {
    absl::Duration first = absl::Seconds(1);
    absl::Duration longest = absl::Seconds(60);
    size_t max_peers = 4096;
    // Failures in a row that are not slowed: a client fixing a typo.
    uint32_t tolerated = 0;
  };

  FailureThrottle() : FailureThrottle(Options{}) {}
  explicit FailureThrottle(Options options) : options_(options) {}

  // Zero if `peer` may be checked at `now`; else how long it must wait.
  absl::Duration Wait(absl::string_view peer, absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);

  // The outcome of a check of `peer` at `now`.
  void Failed(absl::string_view peer, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void Succeeded(absl::string_view peer) ABSL_LOCKS_EXCLUDED(mu_);

  size_t peers() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Peer {
    uint32_t failures = 0;
    absl::Time last_failure;
  };
  absl::Duration Backoff(uint32_t failures) const;

  const Options options_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Peer> peers_ ABSL_GUARDED_BY(mu_);
};

// The key a peer's address is counted under, by the throttles and the
// metrics port's bounds: an IPv4 address as it is (an IPv4-mapped IPv6
// address as its IPv4 one), an IPv6 address as its /64 ("2001:db8:1:2::/64"):
// a host is routed a /64, so one host has 2^64 addresses to try from.
// Anything else is returned as given.
std::string AddressBucket(absl::string_view address);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_AUTH_FAILURE_THROTTLE_H_

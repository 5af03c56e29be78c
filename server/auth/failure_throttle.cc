#include "server/auth/failure_throttle.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace torchmon::server {

std::string AddressBucket(absl::string_view address) {
  in6_addr v6;
  const std::string text(address);
  if (inet_pton(AF_INET6, text.c_str(), &v6) == 1) {
    // An IPv4-mapped address is that IPv4 address.
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      char v4[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &v6.s6_addr[12], v4, sizeof(v4));
      return v4;
    }
    std::memset(&v6.s6_addr[8], 0, 8);
    char prefix[INET6_ADDRSTRLEN];
    inet_ntop(AF_INET6, &v6, prefix, sizeof(prefix));
    return absl::StrCat(prefix, "/64");
  }
  return text;
}


absl::Duration FailureThrottle::Backoff(uint32_t failures) const {
  if (failures <= options_.tolerated) return absl::ZeroDuration();
  absl::Duration wait = options_.first;
  for (uint32_t i = options_.tolerated + 1; i < failures && wait < options_.longest; ++i) {
    wait *= 2;
  }
  return std::min(wait, options_.longest);
}

absl::Duration FailureThrottle::Wait(absl::string_view peer, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) return absl::ZeroDuration();
  const absl::Time allowed = it->second.last_failure + Backoff(it->second.failures);
  return allowed > now ? allowed - now : absl::ZeroDuration();
}

void FailureThrottle::Failed(absl::string_view peer, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(peer);
  if (it == peers_.end()) {
    if (peers_.size() >= options_.max_peers) {
      // Forget the peer whose last failure is oldest: O(n), on the rare
      // failure of a new peer past the bound only.
      auto oldest =
          std::min_element(peers_.begin(), peers_.end(), [](const auto& a, const auto& b) {
            return a.second.last_failure < b.second.last_failure;
          });
      peers_.erase(oldest);
    }
    it = peers_.emplace(std::string(peer), Peer{}).first;
  }
  ++it->second.failures;
  it->second.last_failure = now;
}

void FailureThrottle::Succeeded(absl::string_view peer) {
  absl::MutexLock lock(&mu_);
  if (auto it = peers_.find(peer); it != peers_.end()) peers_.erase(it);
}

size_t FailureThrottle::peers() const {
  absl::MutexLock lock(&mu_);
  return peers_.size();
}

}  // namespace torchmon::server

#include "server/ingest/job_claims.h"

#include "absl/strings/str_cat.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {

absl::Status JobClaims::Hold(absl::string_view job, absl::string_view owner) {
  absl::MutexLock lock(&mu_);
  auto [it, inserted] = claims_.try_emplace(job);
  if (inserted) it->second.owner = std::string(owner);
  if (it->second.owner != owner) {
    return absl::PermissionDeniedError(absl::StrCat(
        "job \"", protocol::Quote(job), "\" belongs to ", DescribeOwner(it->second.owner),
        ", whose streams label it on this daemon; a client may label only its own user's jobs"));
  }
  ++it->second.holds;
  return absl::OkStatus();
}

void JobClaims::Release(absl::string_view job, absl::string_view owner) {
  absl::MutexLock lock(&mu_);
  auto it = claims_.find(job);
  if (it == claims_.end() || it->second.owner != owner) return;
  if (--it->second.holds == 0) claims_.erase(it);
}

size_t JobClaims::size() const {
  absl::MutexLock lock(&mu_);
  return claims_.size();
}

std::string DescribeOwner(absl::string_view owner) {
  if (owner.empty()) return "TCP clients with no name (no named token, no client certificate)";
  return absl::StrCat("user \"", protocol::Quote(owner), "\"");
}

}  // namespace torchmon::server

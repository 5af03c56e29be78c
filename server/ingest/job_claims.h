// Which user a `job` label belongs to on a shared node (torchmond
// --peer-labels; docs/security.md, "Who sees what"). The job label comes
// from a client's environment, so any client could send another user's job
// id and have its series read as that job's. The first user whose stream
// labels a job holds it while any of its streams does; a stream of another
// user that sends the same job is refused, naming the job and its holder.
//
// Thread-safe.
#ifndef TORCHMON_SERVER_INGEST_JOB_CLAIMS_H_
#define TORCHMON_SERVER_INGEST_JOB_CLAIMS_H_

#include <cstddef>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

namespace torchmon::server {

class JobClaims {
 public:
  // One more hold of `job` by `owner` (a user name; "" for TCP clients the
  // daemon has no name for) if the job is free or already `owner`'s.
  // Otherwise PermissionDenied naming the job and the user holding it;
  // nothing changes.
  absl::Status Hold(absl::string_view job, absl::string_view owner) ABSL_LOCKS_EXCLUDED(mu_);

  // Gives back one hold of `job` by `owner` (a stream ended); the job is
  // free again once no hold is left.
  void Release(absl::string_view job, absl::string_view owner) ABSL_LOCKS_EXCLUDED(mu_);

  // Jobs held now.
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Claim {
    std::string owner;
    size_t holds = 0;
  };
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Claim> claims_ ABSL_GUARDED_BY(mu_);
};

// How an owner is named in messages: "user \"alice\"", or for "" the TCP
// clients the daemon has no name for.
std::string DescribeOwner(absl::string_view owner);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_INGEST_JOB_CLAIMS_H_

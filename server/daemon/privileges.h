// Running torchmond as an unprivileged user (--user): the user and group
// lookups, and the one-way switch once every listener is bound.
#ifndef TORCHMON_SERVER_DAEMON_PRIVILEGES_H_
#define TORCHMON_SERVER_DAEMON_PRIVILEGES_H_

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"

namespace torchmon::server {

struct UserIdentity {
  std::string name;
  uid_t uid;
  gid_t gid;  // primary group
};

// Looks up a user by name, or by number ("65534"). NotFound naming it.
absl::StatusOr<UserIdentity> LookUpUser(const std::string& user);

// Looks up a group by name, or by number. NotFound naming it.
absl::StatusOr<gid_t> LookUpGroup(const std::string& group);

// OK if DropPrivileges(user) can succeed: the process runs as root, or as
// `user` already. PermissionDenied naming the user otherwise. Checked before
// anything is created for `user`, so that the refusal is the first error.
absl::Status CheckCanSwitchTo(const UserIdentity& user);

// Switches the whole process, every thread included (glibc applies set*id
// to all of them), to `user`: its supplementary groups, then its group,
// then the user, real, effective and saved alike; then verifies that root
// cannot be regained. Needs root, unless the process already runs as
// `user` (a no-op then). On error the process may be half-switched: the
// caller must exit.
absl::Status DropPrivileges(const UserIdentity& user);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_PRIVILEGES_H_

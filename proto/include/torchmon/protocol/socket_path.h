// Whether a Unix socket path can be trusted: both ends of a connection over
// a Unix socket rely on nobody else having been able to create, replace or
// rename the socket. On a shared node another user could otherwise create
// /tmp/torchmon-<uid>/ first and have the daemon bind in a directory they
// control, or leave a socket of their own there for clients to send their
// samples and token to (docs/security.md).
//
// Reads the filesystem (lstat, realpath); no other side effects. Safe to
// call from any thread.
#ifndef TORCHMON_PROTOCOL_SOCKET_PATH_H_
#define TORCHMON_PROTOCOL_SOCKET_PATH_H_

#include <sys/types.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace torchmon::protocol {

// OK if only root and the users in `trusted_uids` can change what
// `socket_path` names. That is, for its directory and every directory above
// it, both as written and after symbolic links are resolved:
//   - each is owned by root or a trusted user;
//   - the socket's own directory is writable by neither group nor others;
//   - an ancestor writable by group or others has the sticky bit (like
//     /tmp), so that nobody can rename the trusted directory inside it;
//   - each symbolic link on the way is owned by root or a trusted user.
// NotFound if the socket's directory does not exist. FailedPrecondition
// naming the offending path, its owner and mode, and how to fix it.
// `socket_path` must be absolute.
absl::Status CheckSocketDirectory(absl::string_view socket_path,
                                  const std::vector<uid_t>& trusted_uids);

}  // namespace torchmon::protocol

#endif  // TORCHMON_PROTOCOL_SOCKET_PATH_H_

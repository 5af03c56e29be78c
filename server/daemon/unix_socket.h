// The Unix sockets torchmond listens on: a trusted directory, no stale
// socket in the way, and no moment at which the socket is open to more
// users than its final mode and group allow (docs/security.md).
#ifndef TORCHMON_SERVER_DAEMON_UNIX_SOCKET_H_
#define TORCHMON_SERVER_DAEMON_UNIX_SOCKET_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace torchmon::server {

// Who the sockets (and a directory created for them) belong to.
struct SocketOwner {
  uid_t uid;         // the user the daemon runs as once started
  gid_t gid;         // that user's group, or the --socket-group
  bool group_given;  // gid is a --socket-group whose members must connect
};

// Makes `path` ready for gRPC to bind. Creates its directory if missing,
// owned by `owner` with mode 0700 (0710 with a socket group, so that its
// members can reach the socket). Then refuses a directory root and
// owner.uid do not control alone (protocol::CheckSocketDirectory), a path
// that exists and is not a socket, or a socket another process accepts
// connections on; removes a stale socket left by a daemon that died.
// Appends to `warnings` what works but will surprise (a socket group that
// cannot search the directory). Errors name the path and the fix.
absl::Status PrepareUnixSocket(const std::string& path, const SocketOwner& owner,
                               std::vector<std::string>* warnings);

// A file mode's permission bits as chmod and --socket-mode take them: "0660".
std::string ModeText(uint32_t mode);

// Gives the socket gRPC bound at `path` its owner, group and `mode`.
absl::Status FinishUnixSocket(const std::string& path, uint32_t mode, const SocketOwner& owner);

// Sets the process's umask while it lives and restores it after. gRPC
// creates a Unix socket with the mode the umask leaves (0777 & ~umask)
// before torchmond can chmod it; under umask 0177 it starts owner-only.
// The umask is process-wide: use around BuildAndStart only.
class ScopedUmask {
 public:
  explicit ScopedUmask(mode_t mask) : previous_(umask(mask)) {}
  ~ScopedUmask() { umask(previous_); }
  ScopedUmask(const ScopedUmask&) = delete;
  ScopedUmask& operator=(const ScopedUmask&) = delete;

 private:
  const mode_t previous_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_UNIX_SOCKET_H_

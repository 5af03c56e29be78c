#include "server/daemon/unix_socket.h"

#include <grp.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "torchmon/protocol/socket_path.h"

namespace torchmon::server {
namespace {

// True if something accepts connections on the Unix socket at `path`.
bool SocketIsLive(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  const bool live = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return live;
}

std::string GroupName(gid_t gid) {
  group entry;
  group* found = nullptr;
  char buffer[4096];
  if (getgrgid_r(gid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    return found->gr_name;
  }
  return absl::StrCat(gid);
}

absl::Status CreateSocketDirectory(const std::string& dir, const SocketOwner& owner) {
  const mode_t mode = owner.group_given ? 0710 : 0700;
  if (mkdir(dir.c_str(), mode) != 0) {
    if (errno == EEXIST) return absl::OkStatus();  // created meanwhile: checked next
    return absl::PermissionDeniedError(
        absl::StrCat("cannot create socket directory ", dir, ": ", std::strerror(errno)));
  }
  // mkdir applies the umask; the mode is meant exactly.
  if (chmod(dir.c_str(), mode) != 0 || ((owner.uid != geteuid() || owner.gid != getegid()) &&
                                        chown(dir.c_str(), owner.uid, owner.gid) != 0)) {
    return absl::PermissionDeniedError(absl::StrCat("cannot give socket directory ", dir,
                                                    " its owner and mode: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ModeText(uint32_t mode) {
  char text[16];
  std::snprintf(text, sizeof(text), "%04o", mode & 07777u);
  return text;
}

absl::Status PrepareUnixSocket(const std::string& path, const SocketOwner& owner,
                               std::vector<std::string>* warnings) {
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is longer than ",
                                                   sizeof(sockaddr_un::sun_path) - 1, " bytes"));
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    if (absl::Status s = CreateSocketDirectory(dir, owner); !s.ok()) return s;
  }
  // Whoever controls the directory controls what clients reach at `path`.
  if (absl::Status s = protocol::CheckSocketDirectory(path, {owner.uid}); !s.ok()) return s;

  if (owner.group_given && stat(dir.c_str(), &st) == 0 &&
      !((st.st_gid == owner.gid && (st.st_mode & S_IXGRP) != 0) || (st.st_mode & S_IXOTH) != 0)) {
    warnings->push_back(
        absl::StrCat("members of --socket-group ", GroupName(owner.gid), " cannot reach ", path,
                     ": ", dir, " (mode ", ModeText(st.st_mode), ", group ", GroupName(st.st_gid),
                     ") does not let them search it; chgrp it to that group and chmod g+x it"));
  }
  if (lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " exists and is not a socket; refusing to replace it"));
    }
    if (SocketIsLive(path)) {
      return absl::AlreadyExistsError(
          absl::StrCat(path, " is in use by another process (is torchmond already running?)"));
    }
    unlink(path.c_str());  // stale socket of a daemon that died
  }
  return absl::OkStatus();
}

absl::Status FinishUnixSocket(const std::string& path, uint32_t mode, const SocketOwner& owner) {
  // Owner and group first: the mode may open the socket to the group, which
  // must be the right one by then.
  if ((owner.uid != geteuid() || owner.group_given) &&
      chown(path.c_str(), owner.uid, owner.gid) != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        "cannot give ", path, " owner uid ", owner.uid, " and group ", GroupName(owner.gid), ": ",
        std::strerror(errno),
        owner.group_given ? " (a non-root daemon can only use a group it is a member of)" : ""));
  }
  if (chmod(path.c_str(), mode) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot chmod ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace torchmon::server

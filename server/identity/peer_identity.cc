#include "server/identity/peer_identity.h"

#include <pwd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

// The kernel's numbers, for C libraries whose headers predate them (the
// release build's glibc 2.28): the same on every architecture.
#ifndef SO_PEERGROUPS
#define SO_PEERGROUPS 59
#endif
#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace torchmon::server {

absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd) {
  struct ucred cred = {};
  socklen_t size = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SO_PEERCRED of fd ", fd, ": ", std::strerror(errno)));
  }
  // Linux answers a socket with no peer (not connected) with pid 0 and uid
  // and gid -1; a peer in a pid namespace this process cannot see (another
  // container) with pid 0 and its real uid and gid.
  if (cred.pid < 0 || (cred.pid == 0 && cred.uid == static_cast<uid_t>(-1))) {
    return absl::InvalidArgumentError(absl::StrCat("fd ", fd, " has no peer process"));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

absl::StatusOr<std::vector<uint32_t>> PeerGroupsOf(int fd) {
  std::vector<gid_t> groups(64);
  while (true) {
    socklen_t size = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &size) == 0) {
      groups.resize(size / sizeof(gid_t));
      return std::vector<uint32_t>(groups.begin(), groups.end());
    }
    // ERANGE: `size` now says how much the answer needs.
    if (errno == ERANGE && size / sizeof(gid_t) > groups.size()) {
      groups.resize(size / sizeof(gid_t));
      continue;
    }
    if (errno == ENOPROTOOPT) {
      return absl::UnimplementedError("this kernel has no SO_PEERGROUPS (Linux 4.13)");
    }
    return absl::InvalidArgumentError(
        absl::StrCat("SO_PEERGROUPS of fd ", fd, ": ", std::strerror(errno)));
  }
}

absl::StatusOr<int> PeerPidfdOf(int fd) {
  int pidfd = -1;
  socklen_t size = sizeof(pidfd);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &size) == 0) return pidfd;
  if (errno == ENOPROTOOPT) {
    return absl::UnimplementedError("this kernel has no SO_PEERPIDFD (Linux 6.5)");
  }
  return absl::InvalidArgumentError(
      absl::StrCat("SO_PEERPIDFD of fd ", fd, ": ", std::strerror(errno)));
}

namespace {

// OK if `pidfd` is none (-1) or its process still exists (a zombie
// included: its pid is not free yet), so that what was just read of
// /proc/<pid> was that process's. Signal 0 checks existence and
// permission: EPERM (a daemon that dropped root, a peer of another user)
// is an answer about a process that exists; ESRCH, one that has exited.
absl::Status StillThere(int pidfd, absl::string_view path) {
  if (pidfd < 0 || ::syscall(SYS_pidfd_send_signal, pidfd, 0, nullptr, 0) == 0 ||
      errno == EPERM) {
    return absl::OkStatus();
  }
  return absl::NotFoundError(
      absl::StrCat("the peer's process exited before ", path,
                   " could be read as its own (the pid may name another process now)"));
}

std::string UserName(uint32_t uid) {
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::string buffer(size > 0 ? static_cast<size_t>(size) : 16384, '\0');
  struct passwd entry = {};
  struct passwd* found = nullptr;
  if (::getpwuid_r(uid, &entry, buffer.data(), buffer.size(), &found) == 0 && found != nullptr) {
    return found->pw_name;
  }
  return absl::StrCat(uid);
}

}  // namespace

absl::StatusOr<VouchedLabels> VouchedLabelsOf(const PeerCredentials& peer,
                                              absl::string_view proc_root, int pidfd) {
  if (peer.pid == 0) {
    // A process this one cannot see: its user only, nothing guessed.
    VouchedLabels labels;
    labels.user = UserName(peer.uid);
    return labels;
  }
  const std::string path = absl::StrCat(proc_root, "/", peer.pid, "/cgroup");
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, " (the peer's process is gone?)"));
  }
  if (absl::Status there = StillThere(pidfd, path); !there.ok()) return there;
  VouchedLabels labels;
  labels.user = UserName(peer.uid);
  labels.cgroup = LabelsOfProcCgroup(contents.str());
  return labels;
}

absl::StatusOr<std::vector<uint32_t>> SupplementaryGroupsOf(int64_t pid,
                                                            absl::string_view proc_root,
                                                            int pidfd) {
  const std::string path = absl::StrCat(proc_root, "/", pid, "/status");
  std::ifstream file(path);
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, " (the peer's process is gone?)"));
  }
  for (std::string line; std::getline(file, line);) {
    absl::string_view rest = line;
    if (!absl::ConsumePrefix(&rest, "Groups:")) continue;
    std::vector<uint32_t> groups;
    for (absl::string_view field :
         absl::StrSplit(rest, absl::ByAnyChar(" \t"), absl::SkipEmpty())) {
      uint32_t gid = 0;
      if (!absl::SimpleAtoi(field, &gid)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": the Groups line holds \"", field, "\", not a group id"));
      }
      groups.push_back(gid);
    }
    if (absl::Status there = StillThere(pidfd, path); !there.ok()) return there;
    return groups;
  }
  return absl::InvalidArgumentError(absl::StrCat(path, " has no Groups line"));
}

bool AdminRule::Admits(const PeerCredentials& peer, const std::vector<uint32_t>& groups) const {
  if (peer.uid == 0 || peer.uid == daemon_uid) return true;
  if (!gid.has_value()) return false;
  return peer.gid == *gid || std::find(groups.begin(), groups.end(), *gid) != groups.end();
}

std::vector<std::pair<std::string, std::string>> AsLabelPairs(const VouchedLabels& labels) {
  const std::string* values[] = {&labels.user,           &labels.cgroup.slurm_job_id,
                                 &labels.cgroup.slurm_step, &labels.cgroup.pod_uid,
                                 &labels.cgroup.container_id, &labels.cgroup.systemd_unit};
  static_assert(std::size(kVouchedLabelNames) == std::size(values));
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < std::size(values); ++i) {
    if (!values[i]->empty()) pairs.emplace_back(std::string(kVouchedLabelNames[i]), *values[i]);
  }
  return pairs;
}

}  // namespace torchmon::server

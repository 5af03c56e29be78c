#include "server/identity/peer_identity.h"

#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace torchmon::server {

absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd) {
  struct ucred cred = {};
  socklen_t size = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SO_PEERCRED of fd ", fd, ": ", std::strerror(errno)));
  }
  // Linux answers a socket with no peer process (not AF_UNIX, or not
  // connected) with pid 0.
  if (cred.pid <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("fd ", fd, " has no peer process"));
  }
  return PeerCredentials{cred.pid, cred.uid, cred.gid};
}

namespace {

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
                                              absl::string_view proc_root) {
  const std::string path = absl::StrCat(proc_root, "/", peer.pid, "/cgroup");
  std::ifstream file(path);
  std::stringstream contents;
  contents << file.rdbuf();
  if (!file) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, " (the peer's process is gone?)"));
  }
  VouchedLabels labels;
  labels.user = UserName(peer.uid);
  labels.cgroup = LabelsOfProcCgroup(contents.str());
  return labels;
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

// Who is at the other end of a Unix socket, as the kernel says, and the
// labels that follow from it (docs/security.md): the peer's user, and what
// its cgroup vouches for (cgroup_labels.h). Nothing here can be set by the
// client: SO_PEERCRED is recorded by the kernel at connect(), and a
// process cannot leave the cgroup its Slurm step or pod put it in.
//
// Thread-safe: no shared state.
#ifndef TORCHMON_SERVER_IDENTITY_PEER_IDENTITY_H_
#define TORCHMON_SERVER_IDENTITY_PEER_IDENTITY_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/identity/cgroup_labels.h"

namespace torchmon::server {

struct PeerCredentials {
  int64_t pid = 0;
  uint32_t uid = 0;
  uint32_t gid = 0;
};

// SO_PEERCRED of a connected AF_UNIX socket: pid 0 for a peer in a pid
// namespace this process cannot see (a daemon in a container without the
// host's pids), whose uid and gid are still the kernel's word.
// InvalidArgument for an fd that is no Unix socket, or has no peer, naming
// the error.
absl::StatusOr<PeerCredentials> PeerCredentialsOf(int fd);

// The peer's supplementary groups as the kernel recorded them at connect()
// (SO_PEERGROUPS, Linux 4.13): race-free, unlike reading /proc. Unimplemented
// where the kernel lacks it; InvalidArgument for an fd with no peer.
absl::StatusOr<std::vector<uint32_t>> PeerGroupsOf(int fd);

// A pidfd of the process that connected (SO_PEERPIDFD, Linux 6.5). It names
// that process alone, even once its pid is free again: reading
// /proc/<pid>/... and then finding the pidfd's process still there proves
// the file was that process's (a pid is reused only after its process was
// reaped). The caller closes it. Unimplemented where the kernel lacks it.
absl::StatusOr<int> PeerPidfdOf(int fd);

// The labels the daemon vouches for. `user` is the uid's name, or the uid
// in decimal when the system has no name for it.
struct VouchedLabels {
  std::string user;
  CgroupLabels cgroup;
};

// The peer's labels: its user, and what <proc_root>/<pid>/cgroup vouches
// for. proc_root is "/proc", or a tree laid out as /proc is (tests).
// NotFound when the process is gone (or its cgroup file is unreadable),
// naming the file. A peer of pid 0 (unseen) gets its user alone.
// `pidfd` (PeerPidfdOf; -1: none) makes it race-free: NotFound, too, when
// the pidfd's process has exited by the time the file was read, since the
// pid may then name another process.
absl::StatusOr<VouchedLabels> VouchedLabelsOf(const PeerCredentials& peer,
                                              absl::string_view proc_root = "/proc",
                                              int pidfd = -1);

// The supplementary groups of process `pid`, from the "Groups:" line of
// <proc_root>/<pid>/status (where the kernel has no SO_PEERGROUPS).
// NotFound when the process is gone, naming the file (with `pidfd`, as for
// VouchedLabelsOf); InvalidArgument when the line is missing or malformed.
absl::StatusOr<std::vector<uint32_t>> SupplementaryGroupsOf(int64_t pid,
                                                            absl::string_view proc_root = "/proc",
                                                            int pidfd = -1);

// Who sees every user's series and events in queries (docs/security.md,
// "Who sees what"): root, the daemon's own user, and, with --admin-group,
// the members of that group (as primary or supplementary group).
struct AdminRule {
  uint32_t daemon_uid = 0;
  std::optional<uint32_t> gid;

  // `groups`: the peer's supplementary groups; looked at only when `gid` is set.
  bool Admits(const PeerCredentials& peer, const std::vector<uint32_t>& groups) const;
};

// The label names the daemon derives, which no client may send.
inline constexpr absl::string_view kVouchedLabelNames[] = {
    "user", "slurm_job_id", "slurm_step", "k8s_pod_uid", "container_id", "systemd_unit"};

// `labels` as (name, value) pairs in kVouchedLabelNames' order, without
// the empty ones: a label that could not be derived is absent.
std::vector<std::pair<std::string, std::string>> AsLabelPairs(const VouchedLabels& labels);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_IDENTITY_PEER_IDENTITY_H_

// Labels the kernel vouches for, read from the cgroup a process is in:
// the Slurm job and step, the Kubernetes pod and container, the systemd
// unit (docs/security.md, "Labels the daemon vouches for"). A client cannot
// choose its cgroup, so these cannot be forged the way labels taken from a
// client's environment can.
//
// Pure: parses text. Reading /proc/<pid>/cgroup is the caller's. Where a
// value cannot be derived (no Slurm, no pod) it is left empty, never
// guessed.
//
// Only where Slurm and the kubelet put their cgroups: a layout must start
// at the hierarchy's root, since any user can be delegated a subtree
// (systemd's user@<uid>.service has Delegate=yes) and name cgroups in it
// as Slurm's or a pod's. Each value must have its documented shape.
//
// Layouts understood:
//   Slurm, cgroup v1:   /slurm[_<node>]/uid_<U>/job_<J>/step_<S>/task_<T>
//   Slurm, cgroup v2:   /system.slice/[<node>_]slurmstepd.scope/job_<J>/step_<S>/user/task_<T>
//   Kubernetes, cgroupfs driver:  /kubepods[/<qos>]/pod<UID>/<container id>
//   Kubernetes, systemd driver:   /kubepods.slice[/kubepods-<qos>.slice]/
//       kubepods[-<qos>]-pod<UID with _ for ->.slice/<runtime>-<container id>.scope
//   systemd: the outermost component named *.service or *.scope. Units
//       nest only through slices: below a service or scope is a tree
//       delegated to it, named by its owner (user@<uid>.service: the user).
// <S> is a number or batch, extern, interactive; <qos> burstable or
// besteffort; <UID> is 8-4-4-4-12 hex; a container id is 64 hex digits.
//
// A cgroup namespace: the reader of /proc/<pid>/cgroup sees a cgroup
// outside its namespace as "/../<rest>", one ".." per level up from the
// namespace's root. Below the ".." the path starts at one of the
// ancestors of the reader's own cgroup, which the path does not name, so
// <rest> may begin at any level of a layout (a daemon in a pod, in a
// cgroup namespace, sees another pod as "/../../../kubepods-besteffort-
// pod<UID>.slice/..."). Its ancestors are trusted as the daemon's own are:
// run it where they are not delegated to a user.
#ifndef TORCHMON_SERVER_IDENTITY_CGROUP_LABELS_H_
#define TORCHMON_SERVER_IDENTITY_CGROUP_LABELS_H_

#include <string>

#include "absl/strings/string_view.h"

namespace torchmon::server {

struct CgroupLabels {
  std::string slurm_job_id;  // "4242"; empty: not in a Slurm job
  std::string slurm_step;    // "0", "batch", "extern", "interactive"
  std::string pod_uid;       // "6b2c0b9e-8d7f-4c2a-9a51-5c1d2e3f4a5b"
  std::string container_id;  // 64 hex digits
  std::string systemd_unit;  // "slurmstepd.scope", "torchjob.service", ...

  bool operator==(const CgroupLabels& other) const {
    return slurm_job_id == other.slurm_job_id && slurm_step == other.slurm_step &&
           pod_uid == other.pod_uid && container_id == other.container_id &&
           systemd_unit == other.systemd_unit;
  }
};

// The labels of one cgroup path, as /proc/<pid>/cgroup shows it.
CgroupLabels LabelsOfCgroupPath(absl::string_view path);

// The labels of a process from the whole of its /proc/<pid>/cgroup:
// cgroup v2's line ("0::<path>") and v1's hierarchies
// ("<id>:<controllers>:<path>"), each label from the first line that has
// it, the unified line first, then v1's name=systemd (the unit systemd
// placed the process in), then the others in order. Lines that do not
// parse are skipped.
CgroupLabels LabelsOfProcCgroup(absl::string_view contents);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_IDENTITY_CGROUP_LABELS_H_

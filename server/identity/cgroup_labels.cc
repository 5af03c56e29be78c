#include "server/identity/cgroup_labels.h"

#include <cstddef>
#include <optional>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"

namespace torchmon::server {
namespace {

bool AllDigits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool AllLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

// 8-4-4-4-12 lowercase hex digits.
bool IsPodUid(absl::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
    if (dash != (s[i] == '-')) return false;
    if (!dash && !AllLowerHex(s.substr(i, 1))) return false;
  }
  return true;
}

bool IsContainerId(absl::string_view s) { return s.size() == 64 && AllLowerHex(s); }

bool IsSlurmStep(absl::string_view s) {
  return AllDigits(s) || s == "batch" || s == "extern" || s == "interactive";
}

bool HasDigitsAfter(absl::string_view s, absl::string_view prefix) {
  return absl::ConsumePrefix(&s, prefix) && AllDigits(s);
}

// The pod UID in a component: "pod<uid>" (cgroupfs) or
// "kubepods[-<qos>]-pod<uid with _>.slice" (systemd); empty if none.
std::string PodUidOf(absl::string_view component) {
  if (absl::ConsumeSuffix(&component, ".slice")) {
    const size_t at = component.rfind("-pod");
    if (!absl::StartsWith(component, "kubepods") || at == absl::string_view::npos) return "";
    const absl::string_view qos = component.substr(0, at);
    if (qos != "kubepods" && qos != "kubepods-burstable" && qos != "kubepods-besteffort") {
      return "";
    }
    std::string uid = absl::StrReplaceAll(component.substr(at + 4), {{"_", "-"}});
    return IsPodUid(uid) ? uid : "";
  }
  if (!absl::ConsumePrefix(&component, "pod") || !IsPodUid(component)) return "";
  return std::string(component);
}

// The container id in a component: "<64 hex>" (cgroupfs) or
// "<runtime>-<64 hex>.scope" (systemd); empty if none.
std::string ContainerIdOf(absl::string_view component) {
  if (absl::ConsumeSuffix(&component, ".scope")) {
    const size_t dash = component.rfind('-');
    if (dash == absl::string_view::npos) return "";
    component = component.substr(dash + 1);
  }
  return IsContainerId(component) ? std::string(component) : "";
}

// One level of a layout: a component's shape; an optional level may be
// absent from a path.
struct Level {
  bool (*matches)(absl::string_view);
  bool optional;
};

// Where the last of `levels` lies in `parts`, or nullopt. The path must
// follow the levels from its first component on; `entry_anywhere` lets it
// begin at any level instead of the first (a path below the daemon's
// cgroup namespace root, whose ancestors the path does not show).
std::optional<size_t> Locate(const std::vector<absl::string_view>& parts,
                             const std::vector<Level>& levels, bool entry_anywhere) {
  const size_t entries = entry_anywhere ? levels.size() : 1;
  for (size_t entry = 0; entry < entries; ++entry) {
    size_t at = 0;
    bool ok = true;
    for (size_t level = entry; level < levels.size() && ok; ++level) {
      if (at < parts.size() && levels[level].matches(parts[at])) {
        if (level + 1 == levels.size()) return at;
        ++at;
      } else if (!levels[level].optional || level + 1 == levels.size()) {
        ok = false;
      }
    }
  }
  return std::nullopt;
}

bool IsSlurmJob(absl::string_view s) { return HasDigitsAfter(s, "job_"); }

// Slurm, cgroup v2: /system.slice/[<node>_]slurmstepd.scope/job_<J>/step_<S>/...
const std::vector<Level>& SlurmV2() {
  static const auto* levels = new std::vector<Level>{
      {[](absl::string_view s) { return s == "system.slice"; }, false},
      {[](absl::string_view s) {
         return s == "slurmstepd.scope" || absl::EndsWith(s, "_slurmstepd.scope");
       },
       false},
      {IsSlurmJob, false},
  };
  return *levels;
}

// Slurm, cgroup v1: /slurm[_<node>]/uid_<U>/job_<J>/step_<S>/...
const std::vector<Level>& SlurmV1() {
  static const auto* levels = new std::vector<Level>{
      {[](absl::string_view s) { return s == "slurm" || absl::StartsWith(s, "slurm_"); }, false},
      {[](absl::string_view s) { return HasDigitsAfter(s, "uid_"); }, false},
      {IsSlurmJob, false},
  };
  return *levels;
}

// The kubelet's cgroupfs driver: /kubepods[/<qos>]/pod<UID>/<container>
const std::vector<Level>& KubepodsCgroupfs() {
  static const auto* levels = new std::vector<Level>{
      {[](absl::string_view s) { return s == "kubepods"; }, false},
      {[](absl::string_view s) { return s == "burstable" || s == "besteffort"; }, true},
      {[](absl::string_view s) { return absl::StartsWith(s, "pod") && !PodUidOf(s).empty(); },
       false},
  };
  return *levels;
}

// The kubelet's systemd driver: /kubepods.slice[/kubepods-<qos>.slice]/
// kubepods[-<qos>]-pod<UID>.slice/<runtime>-<container>.scope
const std::vector<Level>& KubepodsSystemd() {
  static const auto* levels = new std::vector<Level>{
      {[](absl::string_view s) { return s == "kubepods.slice"; }, false},
      {[](absl::string_view s) {
         return s == "kubepods-burstable.slice" || s == "kubepods-besteffort.slice";
       },
       true},
      {[](absl::string_view s) { return absl::EndsWith(s, ".slice") && !PodUidOf(s).empty(); },
       false},
  };
  return *levels;
}

void SlurmLabels(const std::vector<absl::string_view>& parts, bool entry_anywhere,
                 CgroupLabels& out) {
  for (const auto* layout : {&SlurmV2(), &SlurmV1()}) {
    const std::optional<size_t> job = Locate(parts, *layout, entry_anywhere);
    if (!job.has_value()) continue;
    out.slurm_job_id = std::string(parts[*job].substr(4));
    if (*job + 1 < parts.size() && absl::StartsWith(parts[*job + 1], "step_") &&
        IsSlurmStep(parts[*job + 1].substr(5))) {
      out.slurm_step = std::string(parts[*job + 1].substr(5));
    }
    return;
  }
}

void KubernetesLabels(const std::vector<absl::string_view>& parts, bool entry_anywhere,
                      CgroupLabels& out) {
  for (const auto* layout : {&KubepodsSystemd(), &KubepodsCgroupfs()}) {
    const std::optional<size_t> pod = Locate(parts, *layout, entry_anywhere);
    if (!pod.has_value()) continue;
    out.pod_uid = PodUidOf(parts[*pod]);
    if (*pod + 1 < parts.size()) out.container_id = ContainerIdOf(parts[*pod + 1]);
    return;
  }
}

// The outermost unit: systemd nests units only through slices, so what
// lies below a service or scope is a tree delegated to it (a container's,
// Slurm's, a user's own systemd under user@<uid>.service), named by
// whoever it was delegated to.
void SystemdUnit(const std::vector<absl::string_view>& parts, CgroupLabels& out) {
  for (absl::string_view part : parts) {
    if (absl::EndsWith(part, ".service") || absl::EndsWith(part, ".scope")) {
      out.systemd_unit = std::string(part);
      return;
    }
  }
}

void FillEmpty(CgroupLabels& into, const CgroupLabels& from) {
  // Slurm's job and step, and a pod and its container, come as pairs.
  if (into.slurm_job_id.empty()) {
    into.slurm_job_id = from.slurm_job_id;
    into.slurm_step = from.slurm_step;
  }
  if (into.pod_uid.empty()) {
    into.pod_uid = from.pod_uid;
    into.container_id = from.container_id;
  }
  if (into.systemd_unit.empty()) into.systemd_unit = from.systemd_unit;
}

}  // namespace

CgroupLabels LabelsOfCgroupPath(absl::string_view path) {
  std::vector<absl::string_view> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  // A cgroup outside the reader's cgroup namespace is shown below "..",
  // once per level up from the namespace's root.
  size_t up = 0;
  while (up < parts.size() && parts[up] == "..") ++up;
  parts.erase(parts.begin(), parts.begin() + static_cast<std::ptrdiff_t>(up));
  for (absl::string_view part : parts) {
    if (part == "." || part == "..") return CgroupLabels();  // no path the kernel writes
  }
  CgroupLabels labels;
  SlurmLabels(parts, up > 0, labels);
  KubernetesLabels(parts, up > 0, labels);
  SystemdUnit(parts, labels);
  return labels;
}

CgroupLabels LabelsOfProcCgroup(absl::string_view contents) {
  // Lines by priority: the unified hierarchy, v1's name=systemd, the rest.
  std::vector<absl::string_view> unified, systemd, others;
  for (absl::string_view line : absl::StrSplit(contents, '\n', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (fields.size() != 3 || !absl::StartsWith(fields[2], "/")) continue;
    if (fields[0] == "0" && fields[1].empty()) {
      unified.push_back(fields[2]);
    } else if (fields[1] == "name=systemd") {
      systemd.push_back(fields[2]);
    } else {
      others.push_back(fields[2]);
    }
  }
  CgroupLabels labels;
  for (const auto* group : {&unified, &systemd, &others}) {
    for (absl::string_view path : *group) FillEmpty(labels, LabelsOfCgroupPath(path));
  }
  return labels;
}

}  // namespace torchmon::server

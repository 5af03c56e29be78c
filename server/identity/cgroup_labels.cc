#include "server/identity/cgroup_labels.h"

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

bool IsSlurmMarker(absl::string_view component) {
  return component == "slurm" || absl::EndsWith(component, "slurmstepd.scope");
}

void SlurmLabels(const std::vector<absl::string_view>& parts, CgroupLabels& out) {
  bool under_slurm = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (IsSlurmMarker(parts[i])) {
      under_slurm = true;
      continue;
    }
    if (!under_slurm || !absl::StartsWith(parts[i], "job_")) continue;
    const absl::string_view job = parts[i].substr(4);
    if (!AllDigits(job)) return;
    out.slurm_job_id = std::string(job);
    if (i + 1 < parts.size() && absl::StartsWith(parts[i + 1], "step_") &&
        IsSlurmStep(parts[i + 1].substr(5))) {
      out.slurm_step = std::string(parts[i + 1].substr(5));
    }
    return;
  }
}

// The pod UID in a component: "pod<uid>" (cgroupfs) or
// "kubepods[-<qos>]-pod<uid with _>.slice" (systemd); empty if none.
std::string PodUidOf(absl::string_view component) {
  if (absl::ConsumeSuffix(&component, ".slice")) {
    const size_t at = component.rfind("-pod");
    if (!absl::StartsWith(component, "kubepods") || at == absl::string_view::npos) return "";
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

void KubernetesLabels(const std::vector<absl::string_view>& parts, CgroupLabels& out) {
  bool under_kubepods = false;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (absl::StartsWith(parts[i], "kubepods")) under_kubepods = true;
    if (!under_kubepods) continue;
    std::string uid = PodUidOf(parts[i]);
    if (uid.empty()) continue;
    out.pod_uid = std::move(uid);
    if (i + 1 < parts.size()) out.container_id = ContainerIdOf(parts[i + 1]);
    return;
  }
}

void SystemdUnit(const std::vector<absl::string_view>& parts, CgroupLabels& out) {
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
    if (absl::EndsWith(*it, ".service") || absl::EndsWith(*it, ".scope")) {
      out.systemd_unit = std::string(*it);
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
  const std::vector<absl::string_view> parts = absl::StrSplit(path, '/', absl::SkipEmpty());
  CgroupLabels labels;
  SlurmLabels(parts, labels);
  KubernetesLabels(parts, labels);
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

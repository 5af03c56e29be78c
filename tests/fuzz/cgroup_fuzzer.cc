// Fuzzes the reading of a process's cgroups into the labels the daemon
// vouches for (server/identity/cgroup_labels.h). The input is a
// /proc/<pid>/cgroup file. Checked, beside memory safety:
//
//   - every label has its documented shape (a job id of digits, a step of
//     digits or batch/extern/interactive, a pod UID 8-4-4-4-12 in
//     lowercase hex, a container id of 64, a unit ending .service/.scope);
//   - a layout is believed only from the top: the same path moved into a
//     subtree systemd delegates to a user (user@<uid>.service) or below any
//     other slice gives no Slurm or pod label, and no unit but the user's
//     manager;
//   - a file of one unified line reads as its path does.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "server/identity/cgroup_labels.h"
#include "tests/fuzz/fuzz_support.h"

namespace torchmon::fuzz {
namespace {

using server::CgroupLabels;

bool Digits(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

bool LowerHex(absl::string_view s) {
  for (char c : s) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  }
  return true;
}

std::string Show(const CgroupLabels& l) {
  return absl::StrCat("{job=", l.slurm_job_id, " step=", l.slurm_step, " pod=", l.pod_uid,
                      " container=", l.container_id, " unit=", l.systemd_unit, "}");
}

void CheckShapes(const CgroupLabels& l, absl::string_view from) {
  FUZZ_CHECK(l.slurm_job_id.empty() || Digits(l.slurm_job_id), Show(l), " from ", from);
  FUZZ_CHECK(l.slurm_step.empty() || Digits(l.slurm_step) || l.slurm_step == "batch" ||
                 l.slurm_step == "extern" || l.slurm_step == "interactive",
             Show(l), " from ", from);
  FUZZ_CHECK(!l.slurm_job_id.empty() || l.slurm_step.empty(), Show(l), " from ", from);
  if (!l.pod_uid.empty()) {
    const std::vector<absl::string_view> groups = absl::StrSplit(l.pod_uid, '-');
    FUZZ_CHECK(groups.size() == 5 && groups[0].size() == 8 && groups[1].size() == 4 &&
                   groups[2].size() == 4 && groups[3].size() == 4 && groups[4].size() == 12,
               Show(l), " from ", from);
    for (absl::string_view g : groups) FUZZ_CHECK(LowerHex(g), Show(l), " from ", from);
  }
  FUZZ_CHECK(!l.pod_uid.empty() || l.container_id.empty(), Show(l), " from ", from);
  FUZZ_CHECK(l.container_id.empty() || (l.container_id.size() == 64 && LowerHex(l.container_id)),
             Show(l), " from ", from);
  FUZZ_CHECK(l.systemd_unit.empty() || absl::EndsWith(l.systemd_unit, ".service") ||
                 absl::EndsWith(l.systemd_unit, ".scope"),
             Show(l), " from ", from);
  FUZZ_CHECK(l.systemd_unit.find('/') == std::string::npos, Show(l), " from ", from);
}

void CheckPath(absl::string_view path) {
  const CgroupLabels labels = server::LabelsOfCgroupPath(path);
  CheckShapes(labels, path);
  if (path.find('\n') == absl::string_view::npos && absl::StartsWith(path, "/")) {
    const std::string line = absl::StrCat("0::", path, "\n");
    FUZZ_CHECK(server::LabelsOfProcCgroup(line) == labels, Show(labels), " vs the file ", line);
  }
  // Moved into a user's delegated tree, or below a slice no layout starts
  // with: nothing of Slurm or Kubernetes is believed.
  for (absl::string_view below : {"/user.slice/user-1000.slice/user@1000.service/app.slice",
                                  "/user.slice/user-1000.slice", "/machine.slice"}) {
    const std::string moved = absl::StrCat(below, path);
    const CgroupLabels l = server::LabelsOfCgroupPath(moved);
    CheckShapes(l, moved);
    FUZZ_CHECK(l.slurm_job_id.empty() && l.pod_uid.empty(), Show(l), " from ", moved);
    if (absl::StrContains(below, "user@")) {
      FUZZ_CHECK(l.systemd_unit.empty() || l.systemd_unit == "user@1000.service", Show(l),
                 " from ", moved);
    }
  }
}

}  // namespace
}  // namespace torchmon::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  torchmon::fuzz::CheckShapes(torchmon::server::LabelsOfProcCgroup(input), input);
  for (absl::string_view line : absl::StrSplit(input, '\n')) {
    const std::vector<absl::string_view> fields = absl::StrSplit(line, absl::MaxSplits(':', 2));
    torchmon::fuzz::CheckPath(fields.size() == 3 ? fields[2] : line);
  }
  return 0;
}

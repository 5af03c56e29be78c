// The labels a process's cgroup vouches for, from the paths each layout
// really produces (Slurm's cgroup v1 and v2 plugins, the kubelet's cgroupfs
// and systemd drivers with containerd, CRI-O and Docker, plain systemd).
#include "server/identity/cgroup_labels.h"

#include <ostream>
#include <string>

#include "gtest/gtest.h"

namespace torchmon::server {

// What a failed expectation shows.
void PrintTo(const CgroupLabels& l, std::ostream* os) {
  *os << "{job=" << l.slurm_job_id << " step=" << l.slurm_step << " pod=" << l.pod_uid
      << " container=" << l.container_id << " unit=" << l.systemd_unit << "}";
}

namespace {

constexpr char kPod[] = "6b2c0b9e-8d7f-4c2a-9a51-5c1d2e3f4a5b";
constexpr char kPodSystemd[] = "6b2c0b9e_8d7f_4c2a_9a51_5c1d2e3f4a5b";
constexpr char kContainer[] = "3f5d9a0c8b7e6d5c4b3a2918171615141312111f0e0d0c0b0a09080706050403";

CgroupLabels Slurm(std::string job, std::string step, std::string unit = "") {
  CgroupLabels l;
  l.slurm_job_id = std::move(job);
  l.slurm_step = std::move(step);
  l.systemd_unit = std::move(unit);
  return l;
}

CgroupLabels Pod(std::string container, std::string unit = "") {
  CgroupLabels l;
  l.pod_uid = kPod;
  l.container_id = std::move(container);
  l.systemd_unit = std::move(unit);
  return l;
}

CgroupLabels Unit(std::string unit) {
  CgroupLabels l;
  l.systemd_unit = std::move(unit);
  return l;
}

TEST(CgroupLabelsTest, SlurmCgroupV1GivesTheJobAndStep) {
  EXPECT_EQ(LabelsOfCgroupPath("/slurm/uid_1000/job_4242/step_0/task_1"), Slurm("4242", "0"));
  EXPECT_EQ(LabelsOfCgroupPath("/slurm/uid_1000/job_4242/step_batch/task_0"),
            Slurm("4242", "batch"));
  EXPECT_EQ(LabelsOfCgroupPath("/slurm/uid_1000/job_7/step_extern"), Slurm("7", "extern"));
  // The job's own cgroup, outside any step.
  EXPECT_EQ(LabelsOfCgroupPath("/slurm/uid_1000/job_4242"), Slurm("4242", ""));
}

TEST(CgroupLabelsTest, SlurmCgroupV2GivesTheJobStepAndSlurmstepdsUnit) {
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/slurmstepd.scope/job_4242/step_3/user/task_0"),
            Slurm("4242", "3", "slurmstepd.scope"));
  // Several slurmd on one host (multiple-slurmd): the node's name prefixes the scope.
  EXPECT_EQ(
      LabelsOfCgroupPath("/system.slice/node07_slurmstepd.scope/job_99/step_interactive/user/task_special"),
      Slurm("99", "interactive", "node07_slurmstepd.scope"));
}

TEST(CgroupLabelsTest, KubernetesCgroupfsDriverGivesThePodAndContainer) {
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods/burstable/pod") + kPod + "/" + kContainer),
            Pod(kContainer));
  // Guaranteed pods sit directly under kubepods.
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods/pod") + kPod + "/" + kContainer),
            Pod(kContainer));
  // The pod's own cgroup (its pause container's parent).
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods/besteffort/pod") + kPod), Pod(""));
}

TEST(CgroupLabelsTest, KubernetesSystemdDriverGivesThePodContainerAndScope) {
  for (const std::string runtime : {"cri-containerd", "crio", "docker"}) {
    const std::string scope = runtime + "-" + kContainer + ".scope";
    EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods.slice/kubepods-burstable.slice/"
                                             "kubepods-burstable-pod") +
                                 kPodSystemd + ".slice/" + scope),
              Pod(kContainer, scope))
        << runtime;
  }
  const std::string scope = std::string("cri-containerd-") + kContainer + ".scope";
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods.slice/kubepods-pod") + kPodSystemd +
                               ".slice/" + scope),
            Pod(kContainer, scope));
}

TEST(CgroupLabelsTest, PlainSystemdGivesTheOutermostUnit) {
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/torchjob.service"), Unit("torchjob.service"));
  EXPECT_EQ(LabelsOfCgroupPath("/user.slice/user-1000.slice/session-4.scope"),
            Unit("session-4.scope"));
  // A user's own units are the user's choice of names: the unit is the
  // user's manager, which the system's systemd made.
  EXPECT_EQ(LabelsOfCgroupPath(
                "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r4f2.scope"),
            Unit("user@1000.service"));
  // Below a container's scope, the container's own cgroups.
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/docker-abc.scope/init.scope"),
            Unit("docker-abc.scope"));
  EXPECT_EQ(LabelsOfCgroupPath("/"), CgroupLabels());
}

TEST(CgroupLabelsTest, LookalikesOutsideSlurmOrKubepodsAreNotGuessed) {
  EXPECT_EQ(LabelsOfCgroupPath("/job_42/step_0"), CgroupLabels());
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/job_42.service"), Unit("job_42.service"));
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/docker/pod") + kPod + "/" + kContainer),
            CgroupLabels());
  // Shapes that are not Slurm's or Kubernetes': no label rather than a wrong one.
  EXPECT_EQ(LabelsOfCgroupPath("/slurm/uid_1000/job_x1/step_0"), CgroupLabels());
  EXPECT_EQ(LabelsOfCgroupPath("/slurm/uid_1000/job_5/step_weird"), Slurm("5", ""));
  EXPECT_EQ(LabelsOfCgroupPath("/kubepods/burstable/pod1234/abc"), CgroupLabels());
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods/pod") + kPod + "/short"), Pod(""));
}

// Paths any user can make: systemd delegates user@<uid>.service's subtree
// to its user (mkdir under app.slice, or systemd-run --user --scope
// --unit=...-slurmstepd), and a cgroup v1 hierarchy may be chowned to one.
TEST(CgroupLabelsTest, SlurmAndPodMarkersInADelegatedSubtreeAreNotBelieved) {
  const std::string user = "/user.slice/user-1000.slice/user@1000.service/app.slice";
  EXPECT_EQ(LabelsOfCgroupPath(user + "/slurm/job_42/step_0"), Unit("user@1000.service"));
  EXPECT_EQ(LabelsOfCgroupPath(user + "/slurm/uid_1000/job_42/step_0"),
            Unit("user@1000.service"));
  EXPECT_EQ(LabelsOfCgroupPath(user + "/x-slurmstepd.scope/job_42/step_0/user/task_0"),
            Unit("user@1000.service"));
  EXPECT_EQ(
      LabelsOfCgroupPath(user + "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"),
      Unit("user@1000.service"));
  EXPECT_EQ(LabelsOfCgroupPath(user + "/kubepods/burstable/pod" + kPod + "/" + kContainer),
            Unit("user@1000.service"));
  EXPECT_EQ(LabelsOfCgroupPath(user + "/kubepods.slice/kubepods-pod" + kPodSystemd +
                               ".slice/cri-containerd-" + kContainer + ".scope"),
            Unit("user@1000.service"));
  // A login session's scope is the user's too.
  EXPECT_EQ(LabelsOfCgroupPath("/user.slice/user-1000.slice/session-3.scope/slurm/uid_1/job_4"),
            Unit("session-3.scope"));
  // cgroup v1: Slurm's hierarchy is the first component, nowhere else.
  EXPECT_EQ(LabelsOfCgroupPath("/home/alice/slurm/uid_1000/job_42/step_0"), CgroupLabels());
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/slurmd.service/slurm/uid_1/job_4"),
            Unit("slurmd.service"));
  // A Slurm step's scope holds the job, not another layout.
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/slurmstepd.scope/job_1/step_0/kubepods/pod" +
                               std::string(kPod)),
            Slurm("1", "0", "slurmstepd.scope"));
  // A pod slice of another QoS class than the kubelet's.
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/kubepods.slice/kubepods-evil-pod") + kPodSystemd +
                               ".slice"),
            CgroupLabels());
}

TEST(CgroupLabelsTest, BelowACgroupNamespaceALayoutMayStartAtAnyLevel) {
  // A daemon in a pod, with a cgroup namespace of its own, sees another
  // pod from the common ancestor its path does not show.
  const std::string scope = std::string("cri-containerd-") + kContainer + ".scope";
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/../../../kubepods-besteffort.slice/"
                                           "kubepods-besteffort-pod") +
                               kPodSystemd + ".slice/" + scope),
            Pod(kContainer, scope));
  EXPECT_EQ(LabelsOfCgroupPath(std::string("/../../kubepods-besteffort-pod") + kPodSystemd +
                               ".slice/" + scope),
            Pod(kContainer, scope));
  // A daemon in a container on a Slurm node sees a step from system.slice.
  EXPECT_EQ(LabelsOfCgroupPath("/../slurmstepd.scope/job_7/step_batch/user/task_0"),
            Slurm("7", "batch", "slurmstepd.scope"));
  // Up to the root and down into a user's tree: still the user's.
  EXPECT_EQ(LabelsOfCgroupPath("/../../../user.slice/user-1000.slice/user@1000.service/"
                               "app.slice/slurmstepd.scope/job_42/step_0"),
            Unit("user@1000.service"));
  // Inside the namespace a layout starts at its root, as on the host.
  EXPECT_EQ(LabelsOfCgroupPath("/job_42/step_0"), CgroupLabels());
  EXPECT_EQ(LabelsOfCgroupPath("/../job_42/step_0"), Slurm("42", "0"));
  // ".." anywhere but in front is no path the kernel writes.
  EXPECT_EQ(LabelsOfCgroupPath("/system.slice/../slurmstepd.scope/job_7"), CgroupLabels());
}

TEST(CgroupLabelsTest, AProcCgroupFileOfCgroupV2HasOneLine) {
  EXPECT_EQ(LabelsOfProcCgroup("0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_2\n"),
            Slurm("4242", "0", "slurmstepd.scope"));
}

TEST(CgroupLabelsTest, AProcCgroupFileOfCgroupV1TakesSlurmFromAControllerAndTheUnitFromSystemd) {
  // A task of a Slurm step on a cgroup v1 node: slurmd's unit in systemd's
  // hierarchy, the step in the controllers Slurm manages.
  const char* contents =
      "12:pids:/system.slice/slurmd.service\n"
      "11:memory:/slurm/uid_1000/job_4242/step_0/task_1\n"
      "10:devices:/slurm/uid_1000/job_4242/step_0\n"
      "4:cpu,cpuacct:/\n"
      "3:freezer:/slurm/uid_1000/job_4242/step_0\n"
      "1:name=systemd:/system.slice/slurmd.service\n";
  EXPECT_EQ(LabelsOfProcCgroup(contents), Slurm("4242", "0", "slurmd.service"));
}

TEST(CgroupLabelsTest, AHybridProcCgroupFilePrefersTheUnifiedLine) {
  const std::string contents = std::string(
                                   "13:memory:/kubepods/burstable/pod") +
                               kPod + "/" + kContainer +
                               "\n"
                               "1:name=systemd:/system.slice/containerd.service\n"
                               "0::/system.slice/kubelet-test.service\n"
                               "not a line\n"
                               "2:cpuset\n";
  // (The two hierarchies name one unit on a real host; here they differ to
  // show which one counts.)
  EXPECT_EQ(LabelsOfProcCgroup(contents), Pod(kContainer, "kubelet-test.service"));
}

}  // namespace
}  // namespace torchmon::server

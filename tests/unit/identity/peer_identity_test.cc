// The peer of a Unix socket as the kernel reports it, and the labels read
// from its /proc entry: the real /proc for this process, and a /proc tree
// made here for the layouts this machine does not have (Slurm, a pod).
#include "server/identity/peer_identity.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAreArray;
using ::testing::Pair;

class SocketPair {
 public:
  SocketPair() { EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds_), 0); }
  ~SocketPair() {
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  int server() const { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
};

TEST(PeerIdentityTest, APeerIsThePidUidAndGidTheKernelRecorded) {
  SocketPair pair;
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(pair.server());
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, ::getpid());
  EXPECT_EQ(peer->uid, ::getuid());
  EXPECT_EQ(peer->gid, ::getgid());
}

TEST(PeerIdentityTest, AnFdThatIsNoUnixSocketHasNoPeer) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(pipe_fds[0]);
  EXPECT_EQ(peer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(peer.status().message(), HasSubstr("SO_PEERCRED"));
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
}

TEST(PeerIdentityTest, ThisProcessesLabelsAreItsUserAndWhatItsCgroupFileSays) {
  SocketPair pair;
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(pair.server());
  ASSERT_TRUE(peer.ok()) << peer.status();
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf(*peer);
  ASSERT_TRUE(labels.ok()) << labels.status();
  std::ifstream file("/proc/self/cgroup");
  std::stringstream contents;
  contents << file.rdbuf();
  EXPECT_EQ(labels->cgroup, LabelsOfProcCgroup(contents.str()));
  if (::getuid() == 0) {
    EXPECT_EQ(labels->user, "root");
  }
}

TEST(PeerIdentityTest, AProcessThisOneCannotSeeIsNamedByItsUserAlone) {
  // SO_PEERCRED's answer for a peer in another pid namespace: pid 0.
  const PeerCredentials unseen{0, ::getuid(), ::getgid()};
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf(unseen, "/nonexistent-proc");
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_EQ(labels->cgroup, CgroupLabels{});
  EXPECT_FALSE(labels->user.empty());
  if (::getuid() == 0) {
    EXPECT_EQ(labels->user, "root");
  }
}

class ProcTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = std::filesystem::temp_directory_path() /
            ("torchmon-proc-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  void AddProcess(int64_t pid, const std::string& cgroup) {
    std::filesystem::create_directories(root_ / std::to_string(pid));
    std::ofstream(root_ / std::to_string(pid) / "cgroup") << cgroup;
  }

  std::filesystem::path root_;
};

TEST_F(ProcTree, ASlurmStepsTaskIsLabelledWithItsJobStepUnitAndUser) {
  AddProcess(4321, "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_1\n");
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf({4321, 0, 0}, root_.string());
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(AsLabelPairs(*labels),
              ElementsAre(Pair("user", "root"), Pair("slurm_job_id", "4242"),
                          Pair("slurm_step", "0"), Pair("systemd_unit", "slurmstepd.scope")));
}

TEST_F(ProcTree, AUidWithoutANameIsItsNumberAndUnderivedLabelsAreAbsent) {
  AddProcess(99, "0::/\n");
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf({99, 4000000000u, 0}, root_.string());
  ASSERT_TRUE(labels.ok()) << labels.status();
  EXPECT_THAT(AsLabelPairs(*labels), ElementsAre(Pair("user", "4000000000")));
}

TEST_F(ProcTree, AProcessThatIsGoneIsNotFoundNamingTheFile) {
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf({12345, 0, 0}, root_.string());
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(labels.status().message(), HasSubstr("/12345/cgroup"));
}

TEST_F(ProcTree, SupplementaryGroupsAreTheStatusFilesGroupsLine) {
  std::filesystem::create_directories(root_ / "7");
  std::ofstream(root_ / "7" / "status")
      << "Name:\tpython3\nUid:\t1001\t1001\t1001\t1001\nGroups:\t27 100 1005 \nVmPeak:\t1 kB\n";
  std::filesystem::create_directories(root_ / "8");
  std::ofstream(root_ / "8" / "status") << "Name:\tx\nGroups:\t\n";
  std::filesystem::create_directories(root_ / "9");
  std::ofstream(root_ / "9" / "status") << "Name:\tx\nGroups:\t27 wheel\n";
  auto seven = SupplementaryGroupsOf(7, root_.string());
  ASSERT_TRUE(seven.ok()) << seven.status();
  EXPECT_THAT(*seven, ElementsAre(27, 100, 1005));
  auto eight = SupplementaryGroupsOf(8, root_.string());
  ASSERT_TRUE(eight.ok()) << eight.status();
  EXPECT_THAT(*eight, IsEmpty());
  EXPECT_EQ(SupplementaryGroupsOf(9, root_.string()).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SupplementaryGroupsOf(10, root_.string()).status().code(), absl::StatusCode::kNotFound);
}

TEST(PeerIdentityTest, ThisProcessesGroupsAreTheKernels) {
  std::vector<gid_t> expected(static_cast<size_t>(::getgroups(0, nullptr)));
  expected.resize(static_cast<size_t>(::getgroups(static_cast<int>(expected.size()), expected.data())));
  auto groups = SupplementaryGroupsOf(::getpid());
  ASSERT_TRUE(groups.ok()) << groups.status();
  EXPECT_THAT(*groups, UnorderedElementsAreArray(expected));
}

TEST(PeerIdentityTest, ThePeersGroupsAreWhatTheKernelRecordedAtConnect) {
  SocketPair pair;
  absl::StatusOr<std::vector<uint32_t>> groups = PeerGroupsOf(pair.server());
  if (groups.status().code() == absl::StatusCode::kUnimplemented) {
    GTEST_SKIP() << groups.status();
  }
  ASSERT_TRUE(groups.ok()) << groups.status();
  std::vector<gid_t> expected(static_cast<size_t>(::getgroups(0, nullptr)));
  expected.resize(static_cast<size_t>(::getgroups(static_cast<int>(expected.size()), expected.data())));
  EXPECT_THAT(*groups, UnorderedElementsAreArray(expected));
}

// A peer that connected and exited: its pid is free for another process
// (here: a /proc tree that has a file under that pid, as a new process of
// that pid would), and what /proc says of it is refused, not believed.
TEST_F(ProcTree, WithAPidfdAPeerThatExitedIsNotReadUnderItsReusedPid) {
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0);
  sockaddr_un address = {};
  address.sun_family = AF_UNIX;
  // Abstract: nothing on disk to clean up.
  const std::string name = "torchmon-test-pidfd-" + std::to_string(::getpid());
  std::copy(name.begin(), name.end(), address.sun_path + 1);
  const socklen_t length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  ASSERT_EQ(::bind(listener, reinterpret_cast<sockaddr*>(&address), length), 0);
  ASSERT_EQ(::listen(listener, 1), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    _exit(::connect(fd, reinterpret_cast<sockaddr*>(&address), length) == 0 ? 0 : 1);
  }
  const int connection = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(connection, 0);
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(connection);
  ASSERT_TRUE(peer.ok()) << peer.status();
  EXPECT_EQ(peer->pid, child);
  absl::StatusOr<int> pidfd = PeerPidfdOf(connection);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: the pid is free
  ASSERT_EQ(status, 0);
  if (pidfd.status().code() == absl::StatusCode::kUnimplemented) {
    ::close(connection);
    ::close(listener);
    GTEST_SKIP() << pidfd.status();
  }
  ASSERT_TRUE(pidfd.ok()) << pidfd.status();
  AddProcess(peer->pid, "0::/system.slice/slurmstepd.scope/job_1/step_0\n");
  std::filesystem::create_directories(root_ / std::to_string(peer->pid));
  std::ofstream(root_ / std::to_string(peer->pid) / "status") << "Groups:\t27\n";
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf(*peer, root_.string(), *pidfd);
  EXPECT_EQ(labels.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(labels.status().message(), HasSubstr("exited before"));
  EXPECT_EQ(SupplementaryGroupsOf(peer->pid, root_.string(), *pidfd).status().code(),
            absl::StatusCode::kNotFound);
  // Without the pidfd the same file would have been believed: the race the
  // pidfd closes.
  EXPECT_TRUE(VouchedLabelsOf(*peer, root_.string()).ok());
  ::close(*pidfd);
  ::close(connection);
  ::close(listener);
}

TEST(PeerIdentityTest, WithAPidfdALivePeerIsReadAsBefore) {
  SocketPair pair;
  absl::StatusOr<PeerCredentials> peer = PeerCredentialsOf(pair.server());
  ASSERT_TRUE(peer.ok()) << peer.status();
  absl::StatusOr<int> pidfd = PeerPidfdOf(pair.server());
  if (pidfd.status().code() == absl::StatusCode::kUnimplemented) GTEST_SKIP() << pidfd.status();
  ASSERT_TRUE(pidfd.ok()) << pidfd.status();
  absl::StatusOr<VouchedLabels> labels = VouchedLabelsOf(*peer, "/proc", *pidfd);
  EXPECT_TRUE(labels.ok()) << labels.status();
  EXPECT_TRUE(SupplementaryGroupsOf(peer->pid, "/proc", *pidfd).ok());
  ::close(*pidfd);
}

TEST(PeerIdentityTest, AdminsAreRootTheDaemonsUserAndTheAdminGroupsMembers) {
  const AdminRule no_group{1000, std::nullopt};
  EXPECT_TRUE(no_group.Admits({1, 0, 0}, {}));
  EXPECT_TRUE(no_group.Admits({1, 1000, 1000}, {}));
  EXPECT_FALSE(no_group.Admits({1, 1001, 1001}, {50}));
  const AdminRule group{1000, 50};
  EXPECT_TRUE(group.Admits({1, 1001, 1001}, {27, 50}));  // supplementary
  EXPECT_TRUE(group.Admits({1, 1002, 50}, {}));          // primary
  EXPECT_FALSE(group.Admits({1, 1003, 1003}, {27}));
}

}  // namespace
}  // namespace torchmon::server

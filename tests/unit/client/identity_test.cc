// IdentityLabelsFromEnvironment: which variable wins for each label.
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torchmon/client.h"

namespace torchmon {
namespace {

using ::testing::Pair;
using ::testing::UnorderedElementsAre;

// Every variable IdentityLabelsFromEnvironment reads is unset for the test
// and restored afterwards.
class IdentityLabelsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.emplace_back(name, value ? std::optional<std::string>(value) : std::nullopt);
      unsetenv(name);
    }
    char host[256] = {};
    ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
    host_ = host;
  }

  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value.has_value()) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
  }

  static void Set(const char* name, const char* value) { setenv(name, value, 1); }

  static constexpr const char* kVariables[] = {
      "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID",   "TORCHELASTIC_RUN_ID",
      "RANK",         "LOCAL_RANK",   "TORCHMON_LABELS",
  };
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
  std::string host_;
};

TEST_F(IdentityLabelsTest, HostIsTheOnlyLabelOfABareEnvironment) {
  EXPECT_THAT(IdentityLabelsFromEnvironment(), UnorderedElementsAre(Pair("host", host_)));
}

TEST_F(IdentityLabelsTest, SlurmVariablesGiveJobRankAndLocalRank) {
  Set("SLURM_JOB_ID", "4242");
  Set("SLURM_PROCID", "7");
  Set("SLURM_LOCALID", "3");
  EXPECT_THAT(IdentityLabelsFromEnvironment(),
              UnorderedElementsAre(Pair("host", host_), Pair("job", "4242"), Pair("rank", "7"),
                                   Pair("local_rank", "3")));
}

TEST_F(IdentityLabelsTest, TorchElasticVariablesOverrideSlurm) {
  Set("SLURM_JOB_ID", "4242");
  Set("SLURM_PROCID", "7");
  Set("SLURM_LOCALID", "3");
  Set("TORCHELASTIC_RUN_ID", "run-9");
  Set("RANK", "12");
  Set("LOCAL_RANK", "4");
  EXPECT_THAT(IdentityLabelsFromEnvironment(),
              UnorderedElementsAre(Pair("host", host_), Pair("job", "run-9"), Pair("rank", "12"),
                                   Pair("local_rank", "4")));
}

TEST_F(IdentityLabelsTest, TorchElasticRunIdNoneDoesNotHideTheSlurmJob) {
  Set("SLURM_JOB_ID", "4242");
  Set("TORCHELASTIC_RUN_ID", "none");
  EXPECT_THAT(IdentityLabelsFromEnvironment(),
              UnorderedElementsAre(Pair("host", host_), Pair("job", "4242")));
}

TEST_F(IdentityLabelsTest, EmptyVariableIsIgnored) {
  Set("SLURM_PROCID", "7");
  Set("RANK", "");
  EXPECT_THAT(IdentityLabelsFromEnvironment(),
              UnorderedElementsAre(Pair("host", host_), Pair("rank", "7")));
}

TEST_F(IdentityLabelsTest, TorchmonLabelsOverrideEveryOtherSourceIncludingHost) {
  Set("SLURM_JOB_ID", "4242");
  Set("TORCHELASTIC_RUN_ID", "run-9");
  Set("RANK", "12");
  Set("TORCHMON_LABELS", "host=node-a, rank=0,team = infra");
  EXPECT_THAT(IdentityLabelsFromEnvironment(),
              UnorderedElementsAre(Pair("host", "node-a"), Pair("job", "run-9"), Pair("rank", "0"),
                                   Pair("team", "infra")));
}

TEST_F(IdentityLabelsTest, InvalidTorchmonLabelsEntriesAreIgnoredAndTheRestKept) {
  Set("RANK", "12");
  Set("TORCHMON_LABELS", "team=infra,noequals,stat=x,9lives=1,__hidden=1,rank=5");
  EXPECT_THAT(IdentityLabelsFromEnvironment(),
              UnorderedElementsAre(Pair("host", host_), Pair("team", "infra"), Pair("rank", "5")));
}

TEST_F(IdentityLabelsTest, EachKeyAppearsOnce) {
  Set("SLURM_PROCID", "7");
  Set("RANK", "12");
  Set("TORCHMON_LABELS", "rank=1,rank=2");
  const Labels labels = IdentityLabelsFromEnvironment();
  EXPECT_THAT(labels, UnorderedElementsAre(Pair("host", host_), Pair("rank", "2")));
}

}  // namespace
}  // namespace torchmon

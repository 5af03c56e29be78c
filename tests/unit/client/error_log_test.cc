// ErrorLog: what the client keeps for TakeErrors and prints once. Pure.
#include "detail/error_log.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::detail {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ErrorLogTest, KeepsErrorsInOrderUntilTaken) {
  ErrorLog log(true);
  log.Record("a");
  log.Record("b");
  EXPECT_THAT(log.Take(), ElementsAre("a", "b"));
  EXPECT_TRUE(log.Take().empty());
}

TEST(ErrorLogTest, KeepsOnlyTheNewestErrors) {
  ErrorLog log(true);
  for (size_t i = 0; i < ErrorLog::kMaxKeptErrors + 5; ++i) log.Record(absl::StrCat(i));
  const auto errors = log.Take();
  ASSERT_EQ(errors.size(), ErrorLog::kMaxKeptErrors);
  EXPECT_EQ(errors.front(), "5");
  EXPECT_EQ(errors.back(), absl::StrCat(ErrorLog::kMaxKeptErrors + 4));
}

TEST(ErrorLogTest, PrintsALineOnlyTheFirstTime) {
  ErrorLog log(true);
  EXPECT_EQ(log.ShouldPrint("torchmon: x"), "torchmon: x");
  EXPECT_EQ(log.ShouldPrint("torchmon: x"), "");
  EXPECT_EQ(log.ShouldPrint("torchmon: y"), "torchmon: y");
}

TEST(ErrorLogTest, StopsPrintingAfterTheBudgetWithANotice) {
  ErrorLog log(true);
  for (size_t i = 0; i + 1 < ErrorLog::kMaxPrintedMessages; ++i) {
    ASSERT_EQ(log.ShouldPrint(absl::StrCat("m", i)), absl::StrCat("m", i));
  }
  EXPECT_THAT(log.ShouldPrint("last"), HasSubstr("further distinct messages are not printed"));
  EXPECT_EQ(log.ShouldPrint("one more"), "");
}

TEST(ErrorLogTest, PrintsNothingWhenPrintingIsOffButStillKeeps) {
  ErrorLog log(false);
  EXPECT_EQ(log.ShouldPrint("x"), "");
  log.Record("x");
  EXPECT_THAT(log.Take(), ElementsAre("x"));
}

}  // namespace
}  // namespace torchmon::detail

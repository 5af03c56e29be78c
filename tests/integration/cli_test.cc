// torchmonctl as a user runs it: the real binary as a child process, against
// the real torchmond on a temp Unix socket, checking exit statuses, stderr
// and the JSON documented in docs/cli.md. Windows are 500 ms with a 500 ms
// grace; every wait is a bounded poll on a condition.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/support/child_process.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/test_pki.h"

namespace torchmon::testing {
namespace {

using ::google::protobuf::Value;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr std::chrono::seconds kCommandTimeout{20};
// The host label every torchmonctl child gets (TORCHMON_LABELS overrides it).
constexpr char kHost[] = "cli-test";

// Parses one JSON document (an object); a null value (and a test failure) if
// it is not one.
Value ParseJson(const std::string& text) {
  Value doc;
  const auto status = google::protobuf::util::JsonStringToMessage(text, doc.mutable_struct_value());
  EXPECT_TRUE(status.ok()) << status << "\n" << text;
  if (!status.ok()) doc.Clear();
  return doc;
}

// The field `key` of the object `v`; a null value (and a failure) if absent.
Value At(const Value& v, const std::string& key) {
  if (v.kind_case() != Value::kStructValue) {
    ADD_FAILURE() << "not an object where \"" << key << "\" was expected: " << v.DebugString();
    return Value();
  }
  const auto& fields = v.struct_value().fields();
  const auto it = fields.find(key);
  if (it == fields.end()) {
    ADD_FAILURE() << "no key \"" << key << "\" in " << v.DebugString();
    return Value();
  }
  return it->second;
}

// The elements of the array `v`; empty (and a failure) if not an array.
std::vector<Value> Elements(const Value& v) {
  if (v.kind_case() != Value::kListValue) {
    ADD_FAILURE() << "not an array: " << v.DebugString();
    return {};
  }
  return {v.list_value().values().begin(), v.list_value().values().end()};
}

double Number(const Value& v) {
  EXPECT_EQ(v.kind_case(), Value::kNumberValue) << v.DebugString();
  return v.number_value();
}

std::string String(const Value& v) {
  EXPECT_EQ(v.kind_case(), Value::kStringValue) << v.DebugString();
  return v.string_value();
}

bool Bool(const Value& v) {
  EXPECT_EQ(v.kind_case(), Value::kBoolValue) << v.DebugString();
  return v.bool_value();
}

// A JSON integer: a number with no fractional part.
void ExpectInteger(const Value& v) {
  ASSERT_EQ(v.kind_case(), Value::kNumberValue) << v.DebugString();
  EXPECT_EQ(v.number_value(), static_cast<double>(static_cast<int64_t>(v.number_value())));
}

class CliTest : public DaemonFixture {
 protected:
  void SetUp() override { StartDaemon(); }

  // The environment of every torchmonctl child: identity labels pinned to
  // host=cli-test, whatever the machine running the tests sets.
  static std::vector<std::string> ChildEnvironment() {
    return EditEnvironment(
        CurrentEnvironment(),
        {"SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID", "TORCHELASTIC_RUN_ID", "RANK",
         "LOCAL_RANK", "TORCHMON_TARGET", "TORCHMON_TOKEN_FILE", "TORCHMON_TLS_CA",
         "TORCHMON_TLS_CERT", "TORCHMON_TLS_KEY", "TORCHMON_TLS_SERVER_NAME"},
        {absl::StrCat("TORCHMON_LABELS=host=", kHost)});
  }

  static std::vector<std::string> Argv(std::vector<std::string> args) {
    args.insert(args.begin(), TORCHMONCTL_PATH);
    return args;
  }

  // torchmonctl with `args`, no target given.
  static CommandResult RunCtl(const std::vector<std::string>& args) {
    auto result = RunCommand(Argv(args), kCommandTimeout, ChildEnvironment());
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : CommandResult{};
  }

  // torchmonctl --target <the daemon> `args`.
  CommandResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--target", daemon_->unix_target()});
    return RunCtl(args);
  }

  // `push` that must succeed.
  void Push(std::vector<std::string> args) {
    args.insert(args.begin(), "push");
    const CommandResult r = Ctl(args);
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  // Waits until the current window (500 ms unless said) has all but 50 ms
  // left, so the samples of one push all land in the same window.
  static void AwaitStartOfWindow(int64_t window_ms = kWindowMs) {
    ASSERT_TRUE(WaitFor([&] { return NowMs() % window_ms < 50; },
                        std::chrono::milliseconds(window_ms + 1500)));
  }

  Value CtlJson(std::vector<std::string> args) {
    args.push_back("--json");
    const CommandResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return ParseJson(r.out);
  }

  // The one window `windows STAT --json` lists for `stat`, once it closed.
  Value OnlyWindow(const std::string& stat) {
    EXPECT_EQ(WaitForWindows(stat, 1).size(), 1u);
    const std::vector<Value> windows = Elements(At(CtlJson({"windows", stat}), "windows"));
    EXPECT_EQ(windows.size(), 1u);
    return windows.empty() ? Value() : windows[0];
  }

  // Nothing reached the daemon: no ingest stream was ever opened and no
  // series exists.
  void ExpectNothingArrived() {
    EXPECT_EQ(Scraped(Scrape(), "torchmon_daemon_streams_total", {}), 0.0);
    EXPECT_TRUE(Elements(At(CtlJson({"series"}), "series")).empty());
  }

  double Watchers() { return Scraped(Scrape(), "torchmon_daemon_watchers", {}); }
};

TEST_F(CliTest, PushExitsZeroPrintsNothingAndTheDaemonAcceptsEverySample) {
  const CommandResult r = Ctl({"push", "cli.push", "1", "2", "3", "--window", "500ms"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(OnlySeries("cli.push").counters().accepted(), 3u);
}

TEST_F(CliTest, WindowsJsonShowsTheExactAggregatesOnceTheWindowCloses) {
  AwaitStartOfWindow();
  Push({"cli.loss", "0.5", "1.5", "4", "--window", "500ms"});
  const Value w = OnlyWindow("cli.loss");
  EXPECT_EQ(String(At(w, "stat")), "cli.loss");
  EXPECT_EQ(String(At(At(w, "labels"), "host")), kHost);
  EXPECT_EQ(Number(At(w, "end_ms")) - Number(At(w, "start_ms")), kWindowMs);
  const Value& aggregates = At(w, "aggregates");
  EXPECT_EQ(aggregates.struct_value().fields_size(), 6);
  EXPECT_EQ(Number(At(aggregates, "value")), 4.0);
  EXPECT_EQ(Number(At(aggregates, "mean")), 2.0);
  EXPECT_EQ(Number(At(aggregates, "count")), 3.0);
  EXPECT_EQ(Number(At(aggregates, "sum")), 6.0);
  EXPECT_EQ(Number(At(aggregates, "max")), 4.0);
  EXPECT_EQ(Number(At(aggregates, "min")), 0.5);
  EXPECT_EQ(Number(At(w, "accepted")), 3.0);
  EXPECT_EQ(Number(At(w, "capped")), 0.0);
  EXPECT_FALSE(Bool(At(w, "partial")));
}

TEST_F(CliTest, WindowsJsonWritesInfinitiesAndTheirNaNSumAsStrings) {
  AwaitStartOfWindow();
  Push({"cli.inf", "1", "inf", "-inf", "--window", "500ms"});
  const Value& aggregates = At(OnlyWindow("cli.inf"), "aggregates");
  EXPECT_EQ(String(At(aggregates, "value")), "-Inf");
  EXPECT_EQ(String(At(aggregates, "mean")), "NaN");
  EXPECT_EQ(Number(At(aggregates, "count")), 3.0);
  EXPECT_EQ(String(At(aggregates, "sum")), "NaN");
  EXPECT_EQ(String(At(aggregates, "max")), "+Inf");
  EXPECT_EQ(String(At(aggregates, "min")), "-Inf");
}

TEST_F(CliTest, WindowsJsonShowsANaNSampleInEveryAggregateButCountAndValue) {
  AwaitStartOfWindow();
  Push({"cli.nan", "2", "NaN", "1", "--window", "500ms"});
  const Value& aggregates = At(OnlyWindow("cli.nan"), "aggregates");
  EXPECT_EQ(Number(At(aggregates, "value")), 1.0);
  EXPECT_EQ(String(At(aggregates, "mean")), "NaN");
  EXPECT_EQ(Number(At(aggregates, "count")), 3.0);
  EXPECT_EQ(String(At(aggregates, "sum")), "NaN");
  EXPECT_EQ(String(At(aggregates, "max")), "NaN");
  EXPECT_EQ(String(At(aggregates, "min")), "NaN");
}

// A Stat alive in this process, defined as `torchmonctl push STAT ...`
// defines it (the identity labels ChildEnvironment gives torchmonctl, the
// six aggregations): while it lives, another definition conflicts; once
// every Stat of a definition is gone (a push's ends with its process),
// another redefines the series (docs/semantics.md).
class HeldLikeAPush {
 public:
  HeldLikeAPush(ClientOptions options, const std::string& stat, std::chrono::milliseconds window,
                StatOptions stat_options = {})
      : client_([&] {
          options.labels = {{"host", kHost}};
          return options;
        }()),
        stat_(client_, stat,
              {Aggregation::VALUE, Aggregation::MEAN, Aggregation::COUNT, Aggregation::SUM,
               Aggregation::MAX, Aggregation::MIN},
              window, std::move(stat_options)) {
    stat_.add(1);
    EXPECT_TRUE(client_.Flush(std::chrono::seconds(5)).ok());
  }

 private:
  Client client_;
  Stat stat_;
};

TEST_F(CliTest, ConflictingPushExitsOneAndStderrNamesBothDefinitions) {
  HeldLikeAPush held(Options(), "cli.conflict", std::chrono::milliseconds(500));
  const CommandResult r = Ctl({"push", "cli.conflict", "2", "--window", "1s"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, StartsWith("torchmonctl: torchmond refused: "));
  EXPECT_THAT(r.err, HasSubstr("cli.conflict"));
  EXPECT_THAT(r.err, HasSubstr("window=500ms"));
  EXPECT_THAT(r.err, HasSubstr("window=1s"));
  EXPECT_EQ(OnlySeries("cli.conflict").counters().accepted(), 1u);
}

TEST_F(CliTest, APushWhoseDefinitionNothingHoldsRedefinesTheSeries) {
  Push({"cli.redefined", "1", "--window", "500ms"});
  Push({"cli.redefined", "2", "3", "--window", "1s", "--max-samples", "5"});
  const v1::SeriesInfo series = OnlySeries("cli.redefined");
  EXPECT_EQ(series.spec().window_size_ms(), 1000);
  EXPECT_EQ(series.spec().max_samples(), 5);
  EXPECT_EQ(series.definition(), 1u);
  EXPECT_EQ(series.counters().accepted(), 3u);  // both pushes', nothing refused
  const std::vector<Value> json =
      Elements(At(CtlJson({"series", "--stat", "cli.redefined"}), "series"));
  ASSERT_EQ(json.size(), 1u);
  EXPECT_EQ(Number(At(json[0], "definition")), 1.0);
}

TEST_F(CliTest, PushToAnUnreachableDaemonExitsThreeNamingTheTarget) {
  const std::string absent = absl::StrCat("unix://", dir_.path(), "/absent.sock");
  const CommandResult r = RunCtl({"--target", absent, "--timeout", "300ms", "push", "cli.x", "1"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("could not deliver 1 sample"));
  EXPECT_THAT(r.err, HasSubstr(absent));
}

TEST_F(CliTest, QueryOfAnUnreachableDaemonExitsThreeNamingTheTarget) {
  const std::string absent = absl::StrCat("unix://", dir_.path(), "/absent.sock");
  const CommandResult r = RunCtl({"--target", absent, "series"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("cannot reach torchmond at " + absent));
}

TEST_F(CliTest, RanksComparesTheNewestWindowSlowestFirstAndNamesTheMissingRank) {
  constexpr int64_t kRankWindowMs = 2000;
  auto await_window_start = [] {
    ASSERT_TRUE(
        WaitFor([] { return NowMs() % kRankWindowMs < 100; }, std::chrono::seconds(3)));
  };
  auto push_rank = [&](int rank, const std::string& a, const std::string& b) {
    Push({"cli.step_ms", a, b, "--agg", "mean,max", "--window", "2s", "--label",
          absl::StrCat("rank=", rank), "--label", "job=j"});
  };
  // Rank 3 reports only in an earlier window: behind in the newest one.
  await_window_start();
  const int64_t earlier = NowMs() / kRankWindowMs * kRankWindowMs;
  push_rank(3, "500", "500");
  ASSERT_TRUE(WaitFor([&] { return NowMs() >= earlier + kRankWindowMs; },
                      std::chrono::seconds(3)));
  await_window_start();
  const int64_t newest = NowMs() / kRankWindowMs * kRankWindowMs;
  push_rank(0, "100", "102");  // mean 101
  push_rank(1, "150", "150");
  push_rank(2, "99", "99");
  ASSERT_EQ(WaitForWindows("cli.step_ms", 4).size(), 4u);

  const std::vector<Value> comparisons =
      Elements(At(CtlJson({"ranks", "cli.step_ms"}), "comparisons"));
  ASSERT_EQ(comparisons.size(), 1u);
  const Value& c = comparisons[0];
  EXPECT_EQ(String(At(c, "stat")), "cli.step_ms");
  EXPECT_EQ(String(At(At(c, "labels"), "job")), "j");
  EXPECT_EQ(String(At(c, "aggregation")), "mean");
  EXPECT_EQ(Number(At(c, "start_ms")), newest);
  std::vector<std::string> order;
  for (const Value& r : Elements(At(c, "ranks"))) order.push_back(String(At(r, "rank")));
  EXPECT_THAT(order, ::testing::ElementsAre("1", "0", "2"));
  EXPECT_EQ(Number(At(Elements(At(c, "ranks"))[1], "value")), 101.0);
  EXPECT_EQ(Number(At(Elements(At(c, "ranks"))[1], "accepted")), 2.0);
  EXPECT_EQ(String(Elements(At(c, "missing_ranks")).at(0)), "3");
  EXPECT_EQ(Number(At(c, "max")), 150.0);
  EXPECT_EQ(Number(At(c, "min")), 99.0);
  EXPECT_EQ(Number(At(c, "median")), 101.0);
  EXPECT_EQ(String(At(c, "slowest_rank")), "1");
  EXPECT_DOUBLE_EQ(Number(At(c, "max_over_median")), 150.0 / 101.0);
  // The straggler score: deviations 49, 0, 2 -> MAD 2; the spread's floor,
  // 5 % of the median, is larger than 1.4826 x 2.
  EXPECT_DOUBLE_EQ(Number(At(c, "mad")), 2.0);
  const Value slowest = Elements(At(c, "ranks")).at(0);
  EXPECT_DOUBLE_EQ(Number(At(slowest, "score")), 49.0 / (0.05 * 101.0));
  EXPECT_DOUBLE_EQ(Number(At(slowest, "ratio")), 150.0 / 101.0);
  EXPECT_TRUE(Bool(At(slowest, "straggler")));
  EXPECT_FALSE(Bool(At(Elements(At(c, "ranks"))[1], "straggler")));
  ASSERT_EQ(Elements(At(c, "stragglers")).size(), 1u);
  EXPECT_EQ(String(Elements(At(c, "stragglers"))[0]), "1");

  // An earlier window by its start, another aggregation; the table form.
  const Value old = Elements(At(CtlJson({"ranks", "cli.*", "--agg", "max", "--window-start",
                                         absl::StrCat(earlier)}),
                                "comparisons"))
                        .at(0);
  EXPECT_EQ(String(At(old, "slowest_rank")), "3");
  EXPECT_EQ(Elements(At(old, "missing_ranks")).size(), 3u);
  const CommandResult table = Ctl({"ranks", "cli.step_ms"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("slowest rank 1: 150  median 101"));
  EXPECT_THAT(table.out, HasSubstr("missing this window: ranks 3"));
  EXPECT_THAT(table.out, HasSubstr("stragglers: rank 1\n"));
}

TEST_F(CliTest, TopShowsTheWidestSpreadFirstAndDropsSinceThePreviousRefresh) {
  // Five torchmonctl runs, one after the other, must land in one window:
  // 2 s holds them on a loaded machine and under TSan too, where 500 ms did
  // not always (the ranks of cli.skewed then fell in two windows).
  AwaitStartOfWindow(2000);
  for (int rank = 0; rank < 2; ++rank) {
    Push({"cli.even", "10", "--window", "2s", "--label", absl::StrCat("rank=", rank)});
    Push({"cli.skewed", rank == 0 ? "10" : "30", "--window", "2s", "--label",
          absl::StrCat("rank=", rank)});
  }
  Push({"cli.capped", "1", "2", "3", "4", "5", "--max-samples", "2", "--window", "2s",
        "--label", "rank=0"});
  ASSERT_EQ(WaitForWindows("cli.*", 5).size(), 5u);

  const CommandResult r = Ctl({"top", "--count", "2", "--interval", "200ms", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<std::string> lines = absl::StrSplit(r.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 2u) << r.out;
  const Value first = ParseJson(lines[0]);
  const std::vector<Value> comparisons = Elements(At(first, "comparisons"));
  ASSERT_EQ(comparisons.size(), 3u);
  EXPECT_EQ(String(At(comparisons[0], "stat")), "cli.skewed");  // 30 / median 20 = 1.5
  EXPECT_EQ(Number(At(comparisons[0], "max_over_median")), 1.5);
  EXPECT_EQ(String(At(comparisons[0], "slowest_rank")), "1");
  const std::vector<Value> drops = Elements(At(first, "drops"));
  ASSERT_EQ(drops.size(), 1u);
  EXPECT_EQ(String(At(drops[0], "stat")), "cli.capped");
  EXPECT_EQ(Number(At(drops[0], "capped")), 3.0);
  // Nothing dropped between the two refreshes.
  EXPECT_TRUE(Elements(At(ParseJson(lines[1]), "drops")).empty());

  const CommandResult table = Ctl({"top", "--count", "1"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("cli.skewed"));
  EXPECT_THAT(table.out, HasSubstr("Dropped samples since the last refresh"));
}

TEST_F(CliTest, PushWithQuantilesShowsThemInWindowsSeriesAndRanks) {
  // 2 s windows: the ranks' sketches, which all_ranks merges, are kept
  // until a series has been idle for the grace and three windows, which
  // leaves seconds for the ranks queries on a slow build.
  AwaitStartOfWindow(2000);
  // 1..100 on two ranks, except that rank 1's 99 and 100 are 1000 ms
  // stalls. p50 is the sample of rank floor(0.5·99) = 49, p99 of rank 98.
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<std::string> args = {"cli.q"};
    for (int v = 1; v <= 100; ++v) args.push_back(absl::StrCat(rank == 1 && v >= 99 ? 1000 : v));
    for (const char* a : {"--agg", "mean,P99,p50", "--window", "2s", "--label"}) {
      args.push_back(a);
    }
    args.push_back(absl::StrCat("rank=", rank));
    Push(args);
  }
  ASSERT_EQ(WaitForWindows("cli.q", 2).size(), 2u);

  // ranks compares a quantile: only p99 sees rank 1's stalls. Pooled, the
  // 200 samples' p99 is the sample of rank floor(0.99·199) = 197, 100: not
  // the max (1000) nor the median (549.5) of the ranks' p99s.
  const Value c = Elements(At(CtlJson({"ranks", "cli.q", "--agg", "p99"}), "comparisons")).at(0);
  EXPECT_EQ(String(At(c, "aggregation")), "p99");
  EXPECT_EQ(String(At(c, "slowest_rank")), "1");
  EXPECT_NEAR(Number(At(c, "max")), 1000, 10);
  EXPECT_NEAR(Number(At(c, "all_ranks")), 100, 1);
  const CommandResult ranks_table = Ctl({"ranks", "cli.q", "--agg", "p99"});
  EXPECT_EQ(ranks_table.exit_code, 0) << ranks_table.err;
  std::string all_ranks_line;
  for (absl::string_view line : absl::StrSplit(ranks_table.out, '\n')) {
    if (absl::StartsWith(line, "all ranks p99: ")) all_ranks_line = std::string(line);
  }
  double all_ranks = 0;
  ASSERT_TRUE(absl::SimpleAtod(absl::StripPrefix(all_ranks_line, "all ranks p99: "), &all_ranks))
      << ranks_table.out;
  EXPECT_NEAR(all_ranks, 100, 1);
  // No quantile, no all-ranks value: null in JSON, no line in the table.
  const Value mean = Elements(At(CtlJson({"ranks", "cli.q"}), "comparisons")).at(0);
  EXPECT_EQ(At(mean, "all_ranks").kind_case(), Value::kNullValue);
  EXPECT_THAT(Ctl({"ranks", "cli.q"}).out, ::testing::Not(HasSubstr("all ranks")));
  // A quantile the series do not estimate compares nothing.
  EXPECT_TRUE(Elements(At(CtlJson({"ranks", "cli.q", "--agg", "p90"}), "comparisons")).empty());

  const std::vector<Value> windows = Elements(At(CtlJson({"windows", "cli.q"}), "windows"));
  ASSERT_EQ(windows.size(), 2u);
  const Value& aggregates = At(windows[0], "aggregates");
  EXPECT_EQ(aggregates.struct_value().fields_size(), 3);
  EXPECT_NEAR(Number(At(aggregates, "p50")), 50, 0.5);
  EXPECT_NEAR(Number(At(aggregates, "p99")), 99, 0.99);
  EXPECT_EQ(Number(At(aggregates, "mean")), 50.5);

  // The series lists its aggregations, quantiles last, smallest first.
  const Value series = Elements(At(CtlJson({"series", "--stat", "cli.q", "--label", "rank=0"}), "series")).at(0);
  std::vector<std::string> names;
  for (const Value& n : Elements(At(series, "aggregations"))) names.push_back(String(n));
  EXPECT_THAT(names, ::testing::ElementsAre("mean", "p50", "p99"));

  // The windows table has a column per quantile.
  const CommandResult table = Ctl({"windows", "cli.q"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("P50"));
  EXPECT_THAT(table.out, HasSubstr("P99"));
}

TEST_F(CliTest, PushWithHistogramDefinesASeriesWithAHistogram) {
  Push({"cli.hist", "1", "2", "--agg", "mean", "--histogram"});
  Push({"cli.plain", "1", "--agg", "mean"});
  Push({"cli.quantile", "1", "--agg", "p99"});  // a quantile implies one
  EXPECT_TRUE(OnlySeries("cli.hist").spec().histogram());
  EXPECT_FALSE(OnlySeries("cli.plain").spec().histogram());
  EXPECT_TRUE(OnlySeries("cli.quantile").spec().histogram());
  // series --json shows it.
  const std::vector<Value> series = Elements(At(CtlJson({"series"}), "series"));
  ASSERT_EQ(series.size(), 3u);
  EXPECT_TRUE(Bool(At(series[0], "histogram")));   // cli.hist
  EXPECT_FALSE(Bool(At(series[1], "histogram")));  // cli.plain
  EXPECT_TRUE(Bool(At(series[2], "histogram")));   // cli.quantile

  // It is part of the definition: pushing without it while a Stat with it
  // lives is refused.
  StatOptions with_histogram;
  with_histogram.histogram = true;
  HeldLikeAPush held(Options(), "cli.held", std::chrono::seconds(10), with_histogram);
  const CommandResult refused = Ctl({"push", "cli.held", "3"});
  EXPECT_EQ(refused.exit_code, 1) << refused.err;
  EXPECT_THAT(refused.err, HasSubstr("histogram"));
  const CommandResult usage = Ctl({"push", "cli.hist", "3", "--histogram=yes"});
  EXPECT_EQ(usage.exit_code, 2);
  EXPECT_THAT(usage.err, HasSubstr("flag --histogram takes no value"));
}

TEST_F(CliTest, PushAtStampsTheSamplesSoOldOnesAreLateAndFutureOnesSkewed) {
  const int64_t now = NowMs();
  Push({"cli.at", "1", "--window", "500ms", "--at", absl::StrCat(now - 60'000)});  // long closed
  Push({"cli.at", "2", "3", "--window", "500ms", "--at", absl::StrCat(now + 3'600'000)});
  Push({"cli.at", "4", "--window", "500ms", "--at", absl::StrCat(NowMs())});
  const auto counters = OnlySeries("cli.at").counters();
  EXPECT_EQ(counters.late(), 1u);
  EXPECT_EQ(counters.skewed(), 2u);
  EXPECT_EQ(counters.accepted(), 1u);
  for (const char* bad : {"soon", "0", "-5", "12.5"}) {
    const CommandResult usage = Ctl({"push", "cli.at", "1", "--at", bad});
    EXPECT_EQ(usage.exit_code, 2) << bad;
    EXPECT_THAT(usage.err, HasSubstr("--at")) << bad;
  }
}

TEST_F(CliTest, AQuantileOutsideTheOpenIntervalIsAUsageErrorThatSendsNothing) {
  for (const char* agg : {"p100", "p0", "mean,p99.99999", "p1e1"}) {
    const CommandResult r = Ctl({"push", "cli.badq", "1", "--agg", agg});
    EXPECT_EQ(r.exit_code, 2) << agg;
    EXPECT_THAT(r.err, HasSubstr("--agg")) << agg;
  }
  ExpectNothingArrived();
}

TEST_F(CliTest, RanksOfOneAggregationOnly) {
  const CommandResult r = Ctl({"ranks", "cli.step_ms", "--agg", "mean,max"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--agg: give one aggregation to compare"));
}

TEST_F(CliTest, UnknownFlagIsAUsageErrorThatSendsNothing) {
  const CommandResult r = Ctl({"push", "cli.usage", "1", "--bogus"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown flag --bogus for command push"));
  EXPECT_THAT(r.err, HasSubstr("Run 'torchmonctl push --help' for usage."));
  ExpectNothingArrived();
}

TEST_F(CliTest, WindowWithoutAUnitIsAUsageErrorThatSendsNothing) {
  const CommandResult r = Ctl({"push", "cli.usage", "1", "--window", "10"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("--window: duration \"10\""));
  ExpectNothingArrived();
}

TEST_F(CliTest, NonNumericValueIsAUsageErrorThatSendsNothing) {
  const CommandResult r = Ctl({"push", "cli.usage", "1", "abc"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, HasSubstr("VALUE: \"abc\""));
  ExpectNothingArrived();
}

TEST_F(CliTest, SeriesJsonHasTheDocumentedKeysAndTypes) {
  AwaitStartOfWindow();
  Push({"cli.schema", "1", "2", "--agg", "max,mean", "--window", "500ms", "--max-samples", "10",
        "--label", "phase=eval"});
  ASSERT_EQ(WaitForWindows("cli.schema", 1).size(), 1u);
  const std::vector<Value> series = Elements(At(CtlJson({"series"}), "series"));
  ASSERT_EQ(series.size(), 1u);
  const Value& s = series[0];
  EXPECT_EQ(String(At(s, "stat")), "cli.schema");
  EXPECT_EQ(String(At(At(s, "labels"), "host")), kHost);
  EXPECT_EQ(String(At(At(s, "labels"), "phase")), "eval");
  // The label the daemon vouches for, from the socket's peer.
  EXPECT_EQ(String(At(At(s, "labels"), "user")), OwnUserLabel());
  EXPECT_EQ(At(s, "labels").struct_value().fields_size(), 3);
  // Defined as max,mean; the daemon keeps the set and lists it in
  // Aggregation order.
  const std::vector<Value> aggregations = Elements(At(s, "aggregations"));
  ASSERT_EQ(aggregations.size(), 2u);
  EXPECT_EQ(String(aggregations[0]), "mean");
  EXPECT_EQ(String(aggregations[1]), "max");
  ExpectInteger(At(s, "window_ms"));
  EXPECT_EQ(Number(At(s, "window_ms")), kWindowMs);
  EXPECT_EQ(Number(At(s, "max_samples")), 10.0);
  EXPECT_FALSE(Bool(At(s, "histogram")));
  const Value& counters = At(s, "counters");
  EXPECT_EQ(Number(At(counters, "accepted")), 2.0);
  EXPECT_EQ(Number(At(counters, "capped")), 0.0);
  EXPECT_EQ(Number(At(counters, "late")), 0.0);
  EXPECT_EQ(Number(At(counters, "skewed")), 0.0);
  EXPECT_EQ(Number(At(counters, "client_dropped")), 0.0);
  ExpectInteger(At(s, "last_update_ms"));
  EXPECT_NEAR(Number(At(s, "last_update_ms")), static_cast<double>(NowMs()), 60000.0);

  const Value& last = At(s, "last_window");
  EXPECT_EQ(String(At(last, "stat")), "cli.schema");
  EXPECT_EQ(String(At(At(last, "labels"), "phase")), "eval");
  ExpectInteger(At(last, "start_ms"));
  EXPECT_EQ(Number(At(last, "end_ms")) - Number(At(last, "start_ms")), kWindowMs);
  EXPECT_EQ(Number(At(At(last, "aggregates"), "max")), 2.0);
  EXPECT_EQ(Number(At(At(last, "aggregates"), "mean")), 1.5);
  EXPECT_EQ(Number(At(last, "accepted")), 2.0);
  EXPECT_EQ(Number(At(last, "capped")), 0.0);
  EXPECT_FALSE(Bool(At(last, "partial")));
}

// More series than one page holds (10,000): series and windows follow the
// pages, printing one JSON document, or one table with one header, in order.
TEST_F(CliTest, SeriesAndWindowsFollowEveryPageIntoOneDocumentAndOneTable) {
  Client client(Options());
  constexpr int kStats = 12'500;
  std::vector<std::unique_ptr<Stat>> stats;
  for (int i = 0; i < kStats; ++i) {
    stats.push_back(std::make_unique<Stat>(client, absl::StrFormat("cli.many%05d", i),
                                           std::vector<StatAggregation>{Aggregation::COUNT},
                                           std::chrono::milliseconds(kWindowMs)));
    stats.back()->add(1);
  }
  ASSERT_TRUE(client.Flush(std::chrono::seconds(30)).ok());
  ASSERT_TRUE(WaitFor(
      [&] {
        const std::vector<v1::SeriesInfo> all = ListSeries("cli.many*");
        return all.size() == kStats &&
               std::all_of(all.begin(), all.end(),
                           [](const v1::SeriesInfo& s) { return s.has_last_window(); });
      },
      std::chrono::seconds(20)));

  for (const std::string command : {"series", "windows"}) {
    // series takes the glob as --stat, windows as its argument.
    std::vector<std::string> args = {command};
    if (command == "series") args.push_back("--stat");
    args.push_back("cli.many*");
    const std::vector<Value> listed = Elements(At(CtlJson(args), command));
    ASSERT_EQ(listed.size(), size_t{kStats}) << command;
    for (int i = 0; i < kStats; ++i) {
      ASSERT_EQ(String(At(listed[i], "stat")), absl::StrFormat("cli.many%05d", i)) << command;
    }
    const CommandResult table = Ctl(args);
    ASSERT_EQ(table.exit_code, 0) << table.err;
    const std::vector<std::string> lines = absl::StrSplit(table.out, '\n', absl::SkipEmpty());
    ASSERT_EQ(lines.size(), size_t{kStats} + 1) << command;
    EXPECT_TRUE(absl::StartsWith(lines[0], "STAT")) << command;
    EXPECT_TRUE(absl::StartsWith(lines[kStats], absl::StrFormat("cli.many%05d", kStats - 1)));
    // The pages line up: every row as wide as the header's columns say.
    EXPECT_EQ(lines[1].find("host="), lines[kStats].find("host=")) << command;
  }
}

TEST_F(CliTest, SeriesJsonLastWindowIsNullBeforeAnyWindowCloses) {
  Push({"cli.open", "1", "--window", "1m"});
  const std::vector<Value> series = Elements(At(CtlJson({"series"}), "series"));
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(At(series[0], "last_window").kind_case(), Value::kNullValue);
}

TEST_F(CliTest, LabelFlagSelectsOnlySeriesWithThatLabel) {
  Push({"cli.phase", "1", "--window", "500ms", "--label", "phase=train"});
  Push({"cli.phase", "2", "--window", "500ms", "--label", "phase=eval"});
  ASSERT_EQ(Elements(At(CtlJson({"series"}), "series")).size(), 2u);
  const std::vector<Value> series =
      Elements(At(CtlJson({"series", "--label", "phase=eval"}), "series"));
  ASSERT_EQ(series.size(), 1u);
  EXPECT_EQ(String(At(At(series[0], "labels"), "phase")), "eval");
  EXPECT_EQ(Number(At(At(series[0], "counters"), "accepted")), 1.0);
}

TEST_F(CliTest, EventDataTypesAreInferredFromTheirText) {
  const CommandResult r =
      Ctl({"event", "cli.ckpt", "step=12000", "neg=-7", "loss=0.25", "big=99999999999999999999",
           "ratio=nan", "final=false", "path=/ckpt/12000.pt", "shout=True", "note=", "expr=a=b"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  const std::vector<Value> events = Elements(At(CtlJson({"events", "cli.ckpt"}), "events"));
  ASSERT_EQ(events.size(), 1u);
  const Value& data = At(events[0], "data");
  const Value& types = At(events[0], "data_types");
  EXPECT_EQ(String(At(events[0], "name")), "cli.ckpt");
  EXPECT_EQ(data.struct_value().fields_size(), 10);

  EXPECT_EQ(String(At(types, "step")), "int");
  EXPECT_EQ(Number(At(data, "step")), 12000.0);
  EXPECT_EQ(String(At(types, "neg")), "int");
  EXPECT_EQ(Number(At(data, "neg")), -7.0);
  EXPECT_EQ(String(At(types, "loss")), "double");
  EXPECT_EQ(Number(At(data, "loss")), 0.25);
  EXPECT_EQ(String(At(types, "big")), "double");
  EXPECT_EQ(Number(At(data, "big")), 1e20);
  EXPECT_EQ(String(At(types, "ratio")), "double");
  EXPECT_EQ(String(At(data, "ratio")), "NaN");
  EXPECT_EQ(String(At(types, "final")), "bool");
  EXPECT_FALSE(Bool(At(data, "final")));
  EXPECT_EQ(String(At(types, "path")), "string");
  EXPECT_EQ(String(At(data, "path")), "/ckpt/12000.pt");
  EXPECT_EQ(String(At(types, "shout")), "string");
  EXPECT_EQ(String(At(data, "shout")), "True");
  EXPECT_EQ(String(At(types, "note")), "string");
  EXPECT_EQ(String(At(data, "note")), "");
  EXPECT_EQ(String(At(types, "expr")), "string");
  EXPECT_EQ(String(At(data, "expr")), "a=b");
}

TEST_F(CliTest, EventLabelsAreMergedOverTheIdentityLabels) {
  const CommandResult r =
      Ctl({"event", "cli.labelled", "--label", "stage=save", "--label", "host=override"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::vector<Value> events = Elements(At(CtlJson({"events", "cli.labelled"}), "events"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(String(At(At(events[0], "labels"), "stage")), "save");
  EXPECT_EQ(String(At(At(events[0], "labels"), "host")), "override");
}

TEST_F(CliTest, EventsLabelFilterSelectsOnlyMatchingEvents) {
  ASSERT_EQ(Ctl({"event", "cli.step", "n=1", "--label", "phase=train"}).exit_code, 0);
  ASSERT_EQ(Ctl({"event", "cli.step", "n=2", "--label", "phase=eval"}).exit_code, 0);
  const std::vector<Value> events =
      Elements(At(CtlJson({"events", "cli.step", "--label", "phase=eval"}), "events"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(Number(At(At(events[0], "data"), "n")), 2.0);
}

TEST_F(CliTest, WatchJsonPrintsEachWindowAsItCloses) {
  auto watch = ChildProcess::Start(
      Argv({"--target", daemon_->unix_target(), "watch", "cli.watch", "--json"}),
      ChildEnvironment());
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(WaitFor([&] { return Watchers() == 1.0; }, std::chrono::seconds(10)));

  AwaitStartOfWindow();
  Push({"cli.watch", "5", "7", "--agg", "sum", "--window", "500ms"});
  Push({"cli.other", "1", "--agg", "sum", "--window", "500ms"});
  auto line = (*watch)->ReadLine(std::chrono::seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  const Value w = ParseJson(*line);
  EXPECT_EQ(String(At(w, "stat")), "cli.watch");
  EXPECT_EQ(Number(At(At(w, "aggregates"), "sum")), 12.0);
  EXPECT_EQ(Number(At(w, "accepted")), 2.0);
  EXPECT_FALSE(Bool(At(w, "partial")));

  (*watch)->Signal(SIGINT);
  auto ended = (*watch)->Wait(std::chrono::seconds(10));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->exit_code, 0) << ended->err;
  // Only the one window of cli.watch: cli.other does not match.
  EXPECT_EQ(ended->out, "");
}

TEST_F(CliTest, WatchEndedBySigintExitsZero) {
  auto watch = ChildProcess::Start(Argv({"--target", daemon_->unix_target(), "watch", "--json"}),
                                   ChildEnvironment());
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(WaitFor([&] { return Watchers() == 1.0; }, std::chrono::seconds(10)));
  (*watch)->Signal(SIGINT);
  auto ended = (*watch)->Wait(std::chrono::seconds(10));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->term_signal, 0);
  EXPECT_EQ(ended->exit_code, 0) << ended->err;
  EXPECT_EQ(ended->err, "");
}

TEST_F(CliTest, WatchEndsWithStatusZeroWhenTheDaemonShutsDown) {
  auto watch = ChildProcess::Start(Argv({"--target", daemon_->unix_target(), "watch", "--json"}),
                                   ChildEnvironment());
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(WaitFor([&] { return Watchers() == 1.0; }, std::chrono::seconds(10)));
  auto stopped = daemon_->Stop(SIGTERM, std::chrono::seconds(10));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  auto ended = (*watch)->Wait(std::chrono::seconds(10));
  ASSERT_TRUE(ended.ok()) << ended.status();
  EXPECT_EQ(ended->exit_code, 0) << ended->err;
}

TEST_F(CliTest, HelpPrintsUsageOnStdoutAndExitsZero) {
  const CommandResult r = RunCtl({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith("Usage: torchmonctl "));
  EXPECT_EQ(r.err, "");
}

TEST_F(CliTest, CommandHelpPrintsThatCommandsUsageAndExitsZero) {
  const CommandResult r = RunCtl({"push", "--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, StartsWith("Usage: torchmonctl push STAT VALUE..."));
  EXPECT_THAT(r.out, HasSubstr("--window DURATION"));
  EXPECT_EQ(r.err, "");
}

// torchmonctl against a daemon that requires a bearer token
// (docs/security.md): the flag, the environment variable, and refusals.
class CliTokenTest : public CliTest {
 protected:
  void SetUp() override {
    token_file_ = dir_.path() + "/token";
    WriteSecret(token_file_, "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f\n");
    std::vector<std::string> flags = FastWindows();
    flags.insert(flags.end(), {"--auth-token-file", token_file_});
    StartDaemon(flags);
  }

  static void WriteSecret(const std::string& path, const std::string& content) {
    std::ofstream(path) << content;
    ASSERT_EQ(chmod(path.c_str(), 0600), 0) << path;
  }

  std::string token_file_;
};

TEST_F(CliTokenTest, TokenFileFlagAuthenticatesQueriesAndPushes) {
  const CommandResult push =
      Ctl({"--token-file", token_file_, "push", "cli.secure", "1", "--window", "500ms"});
  EXPECT_EQ(push.exit_code, 0) << push.err;
  const CommandResult series = Ctl({"--token-file", token_file_, "series"});
  EXPECT_EQ(series.exit_code, 0) << series.err;
  EXPECT_THAT(series.out, HasSubstr("cli.secure"));
}

TEST_F(CliTokenTest, TokenFileFromTheEnvironmentAuthenticates) {
  auto r =
      RunCommand(Argv({"--target", daemon_->unix_target(), "series"}), kCommandTimeout,
                 EditEnvironment(ChildEnvironment(), {}, {"TORCHMON_TOKEN_FILE=" + token_file_}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
}

TEST_F(CliTokenTest, QueryWithoutTokenExitsOneWithTheDaemonsReason) {
  const CommandResult r = Ctl({"series"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("requires a bearer token"));
}

TEST_F(CliTokenTest, PushWithAWrongTokenExitsOneAndSendsNothing) {
  const std::string wrong = dir_.path() + "/wrong-token";
  WriteSecret(wrong, "0000000000000000ffffffffffffffff\n");
  const CommandResult r = Ctl({"--token-file", wrong, "push", "cli.intruder", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("UNAUTHENTICATED"));
  const CommandResult series = Ctl({"--token-file", token_file_, "series"});
  EXPECT_THAT(series.out, ::testing::Not(HasSubstr("cli.intruder")));
}

TEST_F(CliTokenTest, TokenForAnotherHostInClearTextIsRefusedBeforeSending) {
  const CommandResult r =
      RunCtl({"--target", "192.0.2.1:7070", "--token-file", token_file_, "series"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_THAT(r.err, HasSubstr("refusing to send the bearer token"));
}

// torchmonctl against a daemon that requires TLS client certificates.
class CliTlsTest : public CliTest {
 protected:
  void SetUp() override {
    auto pki = MakeTestPki(dir_.path());
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
    StartDaemon({"--tls-cert", pki_.server_cert, "--tls-key", pki_.server_key, "--tls-client-ca",
                 pki_.ca_cert});
  }
  TestPki pki_;
};

TEST_F(CliTlsTest, TlsFlagsWithTheRightCertificateReachTheDaemon) {
  const CommandResult r =
      RunCtl({"--target", daemon_->tcp_target(), "--tls-ca", pki_.ca_cert, "--tls-cert",
              pki_.client_cert, "--tls-key", pki_.client_key, "series"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

TEST_F(CliTlsTest, ClientWithoutACertificateIsRefusedWithAHint) {
  const CommandResult r = RunCtl(
      {"--target", daemon_->tcp_target(), "--timeout", "2s", "--tls-ca", pki_.ca_cert, "series"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("if the daemon uses TLS"));
}

}  // namespace
}  // namespace torchmon::testing

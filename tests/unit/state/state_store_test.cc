// The state directory (server/state/state_store.h) with a real directory
// and real files: what a restore rebuilds after a stop, after a kill (the
// store dropped without its stop's snapshot: what is on disk is what a
// SIGKILL leaves), and what it refuses to build from.
#include "server/state/state_store.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/core/clock.h"
#include "server/core/state_wire.h"
#include "server/ingest/client_registry.h"
#include "support/read_only_mount.h"

namespace torchmon::server::state {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;

constexpr int64_t kStart = 1'700'000'000'000;

std::string TempPath() {
  char tmpl[] = "/tmp/torchmon-state-XXXXXX";
  const char* dir = ::mkdtemp(tmpl);
  return dir != nullptr ? std::string(dir) + "/state" : "";
}

std::string Saved(const Aggregator& a, const ClientRegistry& c) {
  std::string out;
  Writer w(out);
  a.SaveState(w);
  c.SaveState(w);
  return out;
}

std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  for (const char* kind : {"snapshot-", "journal-"}) {
    std::unique_ptr<FILE, int (*)(FILE*)> ls(
        ::popen(absl::StrCat("ls ", dir, " | grep ^", kind).c_str(), "r"), ::pclose);
    char line[256];
    while (ls != nullptr && std::fgets(line, sizeof line, ls.get()) != nullptr) {
      out.emplace_back(line, std::strlen(line) - 1);
    }
  }
  return out;
}

// One daemon's worth of state over a store: an aggregator and a client
// registry restored from `dir` and journaled there.
struct Daemon {
  explicit Daemon(const std::string& dir, ManualClock& clock,
                  StateOptions::Fsync fsync = StateOptions::Fsync::kNever,
                  uint64_t republish_after = UINT64_MAX, size_t history_windows = 8)
      : aggregator(Options(history_windows), clock), clients(clock, 60'000, 100) {
    StateOptions options;
    options.dir = dir;
    options.fsync = fsync;
    auto opened = StateStore::Open(
        options, [this](const std::string& line) { log.push_back(line); }, &stats);
    EXPECT_TRUE(opened.ok()) << opened.status();
    if (!opened.ok()) return;
    store = *std::move(opened);
    report = store->Restore(aggregator, clients, republish_after);
  }
  static AggregatorOptions Options(size_t history_windows) {
    AggregatorOptions o;
    o.grace_ms = 500;
    o.history_windows = history_windows;
    return o;
  }
  // Client `instance`'s batch `sequence` applied, as a stream records it.
  void Applied(uint64_t instance, uint64_t sequence) {
    std::shared_ptr<ClientRegistry::Client> c = clients.Acquire(instance);
    {
      absl::MutexLock lock(&c->mu);
      c->applied_through = sequence;
    }
    clients.RecordApplied(instance, sequence);
    clients.Release(instance);
  }
  // A change as the ingest path makes one: under the gate, sealed and
  // written before it returns (an acknowledged batch).
  template <typename Fn>
  void Batch(Fn fn) {
    JournalGate gate(store.get());
    fn();
  }

  DaemonStats stats;
  Aggregator aggregator;
  ClientRegistry clients;
  std::unique_ptr<StateStore> store;
  RestoreReport report;
  std::vector<std::string> log;
};

SeriesKey Key(const std::string& stat, const std::string& rank) {
  return SeriesKey{stat, LabelSet(Labels{{"rank", rank}})};
}

StatSpec Spec(int64_t window_ms, std::vector<double> quantiles = {}, int64_t max_samples = 0) {
  StatSpec s;
  s.aggregations = AggregationBit(Aggregation::kMean) | AggregationBit(Aggregation::kCount) |
                   AggregationBit(Aggregation::kMax);
  s.window_ms = window_ms;
  s.max_samples = max_samples;
  s.quantiles = QuantileList(std::move(quantiles));
  return s;
}

// Everything the aggregator does, journaled: definitions (one redefined),
// samples in and across windows, caps, late and skewed samples, client
// drops, closes, an expiry, quantiles and histograms, a client's batches.
void Exercise(Daemon& d, ManualClock& clock, int rounds, const std::string& job = "train") {
  SeriesId loss = 0, step = 0, capped = 0;
  d.Batch([&] {
    loss = *d.aggregator.Define(Key(job + ".loss", "0"), Spec(1000, {0.5, 0.99}));
    step = *d.aggregator.Define(Key(job + ".step_ms", "0"), Spec(1000));
    capped = *d.aggregator.Define(Key(job + ".capped", "1"), Spec(250, {}, 3));
    d.Applied(77, 1);
  });
  for (int r = 0; r < rounds; ++r) {
    d.Batch([&] {
      const int64_t now_us = clock.NowMs() * 1000;
      std::vector<double> values;
      std::vector<int64_t> times;
      for (int i = 0; i < 40; ++i) {
        values.push_back(r * 0.5 + i);
        times.push_back(now_us - 900'000 + i * 20'000);  // some in the window before
      }
      values.push_back(1e9);
      times.push_back(now_us + 3'600'000'000LL);  // skewed
      values.push_back(-1);
      times.push_back(now_us - 10'000'000);  // late
      EXPECT_TRUE(d.aggregator.AddSamples(loss, values, times).ok());
      EXPECT_TRUE(d.aggregator.AddSamples(step, values, times).ok());
      EXPECT_TRUE(d.aggregator.AddSamples(capped, values, times).ok());
      EXPECT_TRUE(d.aggregator.AddClientDrops(step, 2).ok());
      // Short runs, journaled as samples, each against the run before it.
      for (SeriesId id : {capped, loss, step}) {
        const std::vector<double> few = {r * 1.0, -2.5, 7};
        EXPECT_TRUE(d.aggregator.AddSamples(id, few, {now_us - 5, now_us + 3, now_us - 100}).ok());
      }
      d.Applied(77, 2 + r);
    });
    clock.Advance(300);
    d.aggregator.CloseDueWindows();
    if (r == rounds / 2) {
      // A redefinition: released by its stream, defined again otherwise.
      d.Batch([&] {
        d.aggregator.Release(step);
        step = *d.aggregator.Define(Key(job + ".step_ms", "0"), Spec(500, {0.9}));
      });
    }
  }
  d.Batch([&] { d.aggregator.Release(capped); });
  clock.Advance(11 * 60 * 1000);  // past the series TTL of the capped series' last update
  d.aggregator.CloseDueWindows();
  d.Batch([&] {
    // A new series after the expiry, which may reuse its slot.
    const SeriesId late = *d.aggregator.Define(Key(job + ".lr", "2"), Spec(1000));
    const std::vector<double> v = {1, 2, 3};
    const int64_t t = clock.NowMs() * 1000;
    EXPECT_TRUE(d.aggregator.AddSamples(late, v, {t, t + 1, t + 2}).ok());
  });
}

class StateStoreTest : public ::testing::Test {
 protected:
  StateStoreTest() : clock_(kStart), dir_(TempPath()) {}
  ~StateStoreTest() override {
    std::system(absl::StrCat("rm -rf ", dir_.substr(0, dir_.rfind('/'))).c_str());
  }

  ManualClock clock_;
  const std::string dir_;
};

TEST_F(StateStoreTest, AKilledDaemonsJournalRebuildsExactlyItsState) {
  std::string before;
  {
    Daemon d(dir_, clock_);
    EXPECT_FALSE(d.report.snapshot_loaded);
    Exercise(d, clock_, 12);
    EXPECT_GT(d.aggregator.series_count(), 0u);
    d.aggregator.ExpireIdleSeries();
    d.aggregator.FinishRestore();  // as a restore leaves it: no stream holds a series
    before = Saved(d.aggregator, d.clients);
    // Destroyed without Close: on disk is what a SIGKILL leaves.
  }
  Daemon again(dir_, clock_);
  // A new directory's journal, from its empty start.
  EXPECT_FALSE(again.report.snapshot_loaded);
  EXPECT_GT(again.report.records_replayed, 20u);
  EXPECT_THAT(again.report.skipped, IsEmpty());
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
  EXPECT_GT(again.aggregator.open_windows(), 0u);
}

TEST_F(StateStoreTest, AStoppedDaemonsSnapshotKeepsItsOpenWindowsOpen) {
  std::string before;
  size_t open = 0;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 5);
    open = d.aggregator.open_windows();
    d.aggregator.FinishRestore();
    before = Saved(d.aggregator, d.clients);
    ASSERT_TRUE(d.store->Close().ok());
  }
  Daemon again(dir_, clock_);
  EXPECT_EQ(again.report.records_replayed, 0u);
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
  EXPECT_EQ(again.aggregator.open_windows(), open);
  // Whole: they close on time, once, not partial.
  clock_.Advance(2000);
  const std::vector<ClosedWindow> closed = again.aggregator.CloseDueWindows();
  EXPECT_THAT(closed, SizeIs(open));
  for (const ClosedWindow& w : closed) EXPECT_FALSE(w.partial);
}

// The push spool marks the journal position through which its queues hold
// every pass; a restore closes again, for it, the windows that closes past
// the mark closed, and only those.
TEST_F(StateStoreTest, TheWindowsClosedPastThePushMarkAreClosedAgainForThePusher) {
  std::vector<ClosedWindow> closed;
  uint64_t mark = 0, after = 0;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 4);
    d.aggregator.CloseDueWindows();
    mark = d.store->sealed_position();
    SeriesId id = 0;
    d.Batch([&] {
      id = *d.aggregator.Define(Key("push.me", "3"), Spec(1000));
      const int64_t t = clock_.NowMs() * 1000;
      EXPECT_TRUE(
          d.aggregator.AddSamples(id, std::vector<double>{1, 2, 4}, {t, t + 1, t + 2}).ok());
    });
    clock_.Advance(2000);
    closed = d.aggregator.CloseDueWindows();
    after = d.store->sealed_position();
    ASSERT_FALSE(closed.empty());
    // Killed: no Close.
  }
  const std::string copy = dir_ + "-copy";
  ASSERT_EQ(std::system(absl::StrCat("cp -a ", dir_, " ", copy).c_str()), 0);
  {
    Daemon again(dir_, clock_, StateOptions::Fsync::kNever, mark);
    EXPECT_THAT(again.report.skipped, IsEmpty());
    ASSERT_THAT(again.report.republish, SizeIs(closed.size()));
    for (size_t i = 0; i < closed.size(); ++i) {
      const ClosedWindow& a = again.report.republish[i];
      EXPECT_EQ(a.series->ToString(), closed[i].series->ToString());
      EXPECT_EQ(a.end_ms, closed[i].end_ms);
      EXPECT_EQ(a.stats.accepted, closed[i].stats.accepted);
      EXPECT_EQ(a.stats.sum, closed[i].stats.sum);
      EXPECT_EQ(a.counters.accepted, closed[i].counters.accepted);
      EXPECT_EQ(a.counters_ms, closed[i].counters_ms);
    }
  }
  // The same files with the mark past those closes: nothing to publish
  // again, though the same records are replayed.
  Daemon third(copy, clock_, StateOptions::Fsync::kNever, after);
  EXPECT_GT(third.report.records_replayed, 0u);
  EXPECT_THAT(third.report.republish, IsEmpty());
}

// A redefinition closes its series' open windows at once; the next pass of
// the timer hands them out. Across a stop (the snapshot keeps them) and a
// kill (the replay closes them again) they are handed out once: by the
// next daemon's first pass if no pass took them, never again if one did.
TEST_F(StateStoreTest, WindowsARedefinitionClosedAreHandedOutOnceAcrossAStopOrAKill) {
  auto redefine = [&](Daemon& d, const std::string& stat) {
    d.Batch([&] {
      const SeriesId id = *d.aggregator.Define(Key(stat, "0"), Spec(10'000));
      const int64_t t = clock_.NowMs() * 1000;
      EXPECT_TRUE(d.aggregator.AddSamples(id, std::vector<double>{5, 6}, {t, t + 1}).ok());
      d.aggregator.Release(id);
    });
    d.Batch([&] { EXPECT_TRUE(d.aggregator.Define(Key(stat, "0"), Spec(20'000)).ok()); });
  };
  auto early_of = [](const std::vector<ClosedWindow>& closed, const std::string& stat) {
    size_t n = 0;
    for (const ClosedWindow& w : closed) {
      if (w.series->stat == stat) {
        EXPECT_TRUE(w.partial);
        EXPECT_EQ(w.stats.accepted, 2u);
        EXPECT_EQ(w.stats.sum, 11);
        ++n;
      }
    }
    return n;
  };
  {
    Daemon d(dir_, clock_);
    redefine(d, "stopped");
    ASSERT_TRUE(d.store->Close().ok());  // no pass took it
  }
  {
    Daemon d(dir_, clock_);
    EXPECT_EQ(early_of(d.aggregator.CloseDueWindows(), "stopped"), 1u);
    redefine(d, "killed");  // no pass, then a kill
  }
  uint64_t before_pass = 0;
  {
    Daemon d(dir_, clock_);
    EXPECT_EQ(early_of(d.aggregator.CloseDueWindows(), "killed"), 1u);
    redefine(d, "taken");
    before_pass = d.store->sealed_position();
    EXPECT_EQ(early_of(d.aggregator.CloseDueWindows(), "taken"), 1u);
    // Killed after the pass took it.
  }
  Daemon d(dir_, clock_, StateOptions::Fsync::kNever, before_pass);
  EXPECT_THAT(d.report.skipped, IsEmpty());
  const std::vector<ClosedWindow> closed = d.aggregator.CloseDueWindows();
  EXPECT_EQ(early_of(closed, "stopped") + early_of(closed, "killed") + early_of(closed, "taken"),
            0u);
  // For the push queues, whose mark was before that pass: closed again.
  EXPECT_EQ(early_of(d.report.republish, "taken"), 1u);
}

TEST_F(StateStoreTest, ATornLastRecordIsSkippedAndTheRestKept) {
  std::string before;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 3);
    d.aggregator.FinishRestore();
    before = Saved(d.aggregator, d.clients);
  }
  const std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, ElementsAre("journal-0000000000000000"));
  {
    // A record being written when the process died: its header promises
    // more than is there.
    std::ofstream journal(dir_ + "/" + files[0], std::ios::app | std::ios::binary);
    journal.write(
        "\x40\x00\x00\x00"
        "12345678"
        "partial",
        19);
  }
  Daemon again(dir_, clock_);
  ASSERT_THAT(again.report.skipped, SizeIs(1));
  EXPECT_THAT(again.report.skipped[0], HasSubstr("not written whole"));
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
}

TEST_F(StateStoreTest, AFlippedBitInTheJournalStopsTheReplayBeforeIt) {
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 6);
  }
  const std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, SizeIs(1));
  const std::string journal = dir_ + "/" + files[0];
  struct stat st {};
  ASSERT_EQ(::stat(journal.c_str(), &st), 0);
  {
    std::fstream f(journal, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(st.st_size / 2);
    char c;
    f.read(&c, 1);
    f.seekp(st.st_size / 2);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }
  Daemon again(dir_, clock_);
  ASSERT_THAT(again.report.skipped, SizeIs(1));
  EXPECT_THAT(again.report.skipped[0], HasSubstr("not written whole"));
  // What it rebuilt is a prefix: every record before the damage, none after.
  EXPECT_GT(again.report.records_replayed, 0u);
  EXPECT_LT(again.report.journal_bytes_replayed, static_cast<uint64_t>(st.st_size));
}

void FlipAByte(const std::string& path, long offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  char c = 0;
  f.read(&c, 1);
  f.seekp(offset);
  c = static_cast<char>(c ^ 0x40);
  f.write(&c, 1);
}

// Two daemons that each stopped: the first's snapshot, the second's, and
// the journal after each. Returns the state the second left.
std::string TwoStops(const std::string& dir, ManualClock& clock) {
  {
    Daemon d(dir, clock);
    Exercise(d, clock, 3);
    EXPECT_TRUE(d.store->Close().ok());
  }
  Daemon d(dir, clock);
  Exercise(d, clock, 3, "eval");
  d.aggregator.FinishRestore();
  std::string state = Saved(d.aggregator, d.clients);
  EXPECT_TRUE(d.store->Close().ok());
  return state;
}

TEST_F(StateStoreTest, ADamagedSnapshotIsSetAsideAndThePreviousOneAndItsJournalServe) {
  const std::string before = TwoStops(dir_, clock_);
  const std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, SizeIs(4));
  FlipAByte(dir_ + "/" + files[1], 100);  // the second stop's snapshot
  Daemon again(dir_, clock_);
  EXPECT_TRUE(again.report.snapshot_loaded);
  EXPECT_EQ(again.report.snapshot_position, std::stoull(files[0].substr(9), nullptr, 16));
  ASSERT_THAT(again.report.skipped, SizeIs(1));
  EXPECT_THAT(again.report.skipped[0], HasSubstr("check does not match"));
  EXPECT_THAT(again.report.skipped[0], HasSubstr("moved to"));
  EXPECT_EQ(::access((dir_ + "/skipped").c_str(), F_OK), 0);
  // Nothing lost: the first stop's snapshot and the whole journal since.
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
}

TEST_F(StateStoreTest, WithItsOnlySnapshotDamagedTheJournalFromTheStartRebuildsEverything) {
  std::string before;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 4);
    d.aggregator.FinishRestore();
    before = Saved(d.aggregator, d.clients);
    ASSERT_TRUE(d.store->Close().ok());
  }
  const std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, SizeIs(3));  // the stop's snapshot, journal-0, the stop's journal
  FlipAByte(dir_ + "/" + files[0], 100);
  Daemon again(dir_, clock_);
  EXPECT_FALSE(again.report.snapshot_loaded);
  EXPECT_THAT(again.report.skipped, SizeIs(1));
  // journal-0 starts from the empty state of a new directory.
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
}

TEST_F(StateStoreTest, WithNoUsableSnapshotNothingIsBuiltFromTheState) {
  TwoStops(dir_, clock_);
  const std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, SizeIs(4));
  FlipAByte(dir_ + "/" + files[0], 100);
  FlipAByte(dir_ + "/" + files[1], 100);
  Daemon again(dir_, clock_);
  EXPECT_FALSE(again.report.snapshot_loaded);
  ASSERT_THAT(again.report.skipped, SizeIs(4));
  EXPECT_THAT(again.report.skipped[0], HasSubstr("check does not match"));
  EXPECT_THAT(again.report.skipped[1], HasSubstr("check does not match"));
  EXPECT_THAT(again.report.skipped[2], HasSubstr("no usable snapshot"));
  EXPECT_THAT(again.report.skipped[3], HasSubstr("no usable snapshot"));
  EXPECT_EQ(again.aggregator.series_count(), 0u);
}

// Killed while writing a snapshot: the new journal is started, the snapshot
// only half written under its temporary name.
TEST_F(StateStoreTest, AKillDuringASnapshotsWriteLosesNothing) {
  const std::string before = TwoStops(dir_, clock_);
  const std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, SizeIs(4));
  const std::string snapshot = dir_ + "/" + files[1];
  struct stat st {};
  ASSERT_EQ(::stat(snapshot.c_str(), &st), 0);
  ASSERT_EQ(::truncate(snapshot.c_str(), st.st_size / 2), 0);
  ASSERT_EQ(::rename(snapshot.c_str(), (snapshot + ".tmp").c_str()), 0);
  Daemon again(dir_, clock_);
  EXPECT_TRUE(again.report.snapshot_loaded);
  EXPECT_THAT(again.report.skipped, IsEmpty());
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
  EXPECT_NE(::access((snapshot + ".tmp").c_str(), F_OK), 0);
}

TEST_F(StateStoreTest, AFileOfAnotherVersionIsRefusedByName) {
  ::mkdir(dir_.c_str(), 0750);
  {
    std::ofstream f(dir_ + "/snapshot-0000000000000000", std::ios::binary);
    f << "TMSNAP\x01\x09 a snapshot from a future version";
  }
  Daemon d(dir_, clock_);
  EXPECT_FALSE(d.report.snapshot_loaded);
  ASSERT_THAT(d.report.skipped, SizeIs(1));
  EXPECT_THAT(d.report.skipped[0], HasSubstr("not a torchmond snapshot of this version"));
}

// The disk full under the journal (a file size limit, which fails a write
// with EFBIG as a full disk fails it with ENOSPC): said, counted, the
// daemon goes on; the next snapshot keeps everything again.
TEST_F(StateStoreTest, AFullDiskIsSaidAndCountedAndTheNextSnapshotKeepsEverything) {
  std::string before;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 2);
    const std::vector<std::string> files = Files(dir_);
    ASSERT_THAT(files, ElementsAre("journal-0000000000000000"));
    struct stat st {};
    ASSERT_EQ(::stat((dir_ + "/" + files[0]).c_str(), &st), 0);
    rlimit old_limit{};
    ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit full = old_limit;
    full.rlim_cur = static_cast<rlim_t>(st.st_size) + 64;
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &full), 0);
    Exercise(d, clock_, 3, "eval");
    ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old_limit), 0);
    EXPECT_GE(d.stats.state_write_errors.load(), 1u);
    ASSERT_FALSE(d.log.empty());
    EXPECT_THAT(d.log[0], HasSubstr("writing the journal in " + dir_ + " failed (File too large)"));
    // Still aggregating: what came after the failure is in memory.
    EXPECT_GE(d.aggregator.series_count(), 4u);
    d.aggregator.FinishRestore();
    before = Saved(d.aggregator, d.clients);
    ASSERT_TRUE(d.store->Close().ok());
  }
  Daemon again(dir_, clock_);
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
}

// The directory read-only at start (a filesystem the kernel remounted
// read-only after errors; here a read-only bind mount of it, which needs
// root, as CI is): restored, said, counted, run as on a full disk; once it
// can be written, a snapshot keeps what was applied meanwhile.
TEST_F(StateStoreTest, ADirectoryReadOnlyAtStartIsRestoredAndWrittenOnceItCanBe) {
  const std::string before = TwoStops(dir_, clock_);
  const std::vector<std::string> files = Files(dir_);
  std::string why;
  const auto read_only = testing::ReadOnlyMount::Bind(dir_, &why);
  if (read_only == nullptr) GTEST_SKIP() << why;
  ASSERT_TRUE(read_only->SetWritable(false)) << std::strerror(errno);
  ASSERT_NE(::access(dir_.c_str(), W_OK), 0);
  std::string during;
  {
    Daemon d(dir_, clock_);
    ASSERT_NE(d.store, nullptr);
    EXPECT_FALSE(d.store->writable_at_start());
    EXPECT_TRUE(d.report.snapshot_loaded);
    EXPECT_THAT(d.report.skipped, IsEmpty());
    EXPECT_EQ(Saved(d.aggregator, d.clients), before);
    ASSERT_FALSE(d.log.empty());
    EXPECT_THAT(d.log[0], HasSubstr("cannot be written (Read-only file system): restoring what "
                                    "it holds"));
    EXPECT_GE(d.stats.state_write_errors.load(), 1u);
    // Applied while nothing can be written: in memory, and no file changed.
    Exercise(d, clock_, 3, "eval");
    EXPECT_EQ(Files(dir_), files);
    // A snapshot fails before it copies the state, and says why.
    const absl::Status failed = d.store->Close();
    EXPECT_EQ(failed.code(), absl::StatusCode::kPermissionDenied) << failed;
    EXPECT_THAT(failed.message(), HasSubstr("Read-only file system"));
  }
  {
    // Read-only again at the next start: the same state, nothing of the
    // last run kept (it could not be).
    Daemon d(dir_, clock_);
    EXPECT_EQ(Saved(d.aggregator, d.clients), before);
    ASSERT_TRUE(read_only->SetWritable(true)) << std::strerror(errno);
    Exercise(d, clock_, 3, "eval");
    d.aggregator.FinishRestore();
    during = Saved(d.aggregator, d.clients);
    // Writable again: the snapshot keeps everything, and says so.
    ASSERT_TRUE(d.store->Close().ok());
    EXPECT_THAT(d.log.back(), HasSubstr(dir_ + " is written again"));
  }
  Daemon again(dir_, clock_);
  EXPECT_TRUE(again.store->writable_at_start());
  EXPECT_THAT(again.report.skipped, IsEmpty());
  EXPECT_EQ(Saved(again.aggregator, again.clients), during);
}

std::vector<std::string> HistoryFiles(const std::string& dir) {
  std::vector<std::string> out;
  std::unique_ptr<FILE, int (*)(FILE*)> ls(
      ::popen(absl::StrCat("ls ", dir, " | grep ^history-").c_str(), "r"), ::pclose);
  char line[256];
  while (ls != nullptr && std::fgets(line, sizeof line, ls.get()) != nullptr) {
    out.emplace_back(line, std::strlen(line) - 1);
  }
  return out;
}

// Snapshot after snapshot, the closed windows go to history files: each
// holds those closed since the snapshot before, and every window of a
// 32nd of the series, in turn. Across 80 stops and kills each restore
// rebuilds exactly the state before it, every series' windows included: an
// idle series' too, whose windows all closed before the first stop (the
// file that held them went long ago). No more files stay than two
// snapshots name.
TEST_F(StateStoreTest, ClosedWindowsInHistoryFilesAreRestoredExactlyAcrossManySnapshots) {
  std::string expected;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 4, "idle");
    d.aggregator.FinishRestore();
    expected = Saved(d.aggregator, d.clients);
    ASSERT_TRUE(d.store->Close().ok());
  }
  for (int i = 0; i < 80; ++i) {
    Daemon d(dir_, clock_);
    ASSERT_TRUE(d.report.snapshot_loaded) << i;
    EXPECT_THAT(d.report.skipped, IsEmpty()) << i;
    ASSERT_EQ(Saved(d.aggregator, d.clients), expected) << "restore " << i;
    Exercise(d, clock_, 2, i % 2 == 0 ? "train" : "eval");
    d.aggregator.FinishRestore();
    expected = Saved(d.aggregator, d.clients);
    // Every third one killed: its journal since the last stop replays.
    if (i % 3 != 2) {
      ASSERT_TRUE(d.store->Close().ok());
    }
  }
  EXPECT_LE(HistoryFiles(dir_).size(), 33u);
}

// Series that keep more windows than the last 32 snapshots' files give
// them (2 a snapshot, 100 kept): each one's copy of all it keeps is in one
// file, and the files before it hold some of the same windows. Each
// restore of 100 (stops and kills) is exactly the state before it.
TEST_F(StateStoreTest, LongHistoriesAreRestoredWholeWhicheverFileHoldsTheirCopy) {
  constexpr size_t kHistory = 100;
  std::string expected;
  std::vector<SeriesKey> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(Key("step_ms", std::to_string(i)));
  for (int cycle = 0; cycle < 100; ++cycle) {
    Daemon d(dir_, clock_, StateOptions::Fsync::kNever, UINT64_MAX, kHistory);
    if (cycle > 0) {
      ASSERT_EQ(Saved(d.aggregator, d.clients), expected) << "restore " << cycle;
    }
    EXPECT_THAT(d.report.skipped, IsEmpty()) << cycle;
    // Two windows of 100 ms closed by every series (one by every fourth,
    // so that the series do not keep in step).
    for (int w = 0; w < 2; ++w) {
      d.Batch([&] {
        for (size_t i = 0; i < keys.size(); ++i) {
          if (w == 1 && i % 4 == 0) continue;
          const SeriesId id = *d.aggregator.Define(keys[i], Spec(100, {0.5}));
          const int64_t t = clock_.NowMs() * 1000;
          const std::vector<double> v = {double(cycle), double(w), double(i)};
          EXPECT_TRUE(d.aggregator.AddSamples(id, v, {t, t + 1, t + 2}).ok());
          d.aggregator.Release(id);
        }
      });
      clock_.Advance(700);
      d.aggregator.CloseDueWindows();
    }
    d.aggregator.FinishRestore();
    expected = Saved(d.aggregator, d.clients);
    if (cycle % 3 != 2) {
      ASSERT_TRUE(d.store->Close().ok());
    }
  }
}

// A history file damaged: the series whose windows only it held lose
// their closed windows (said, counted), the others keep theirs, and the
// next snapshot holds every window again.
TEST_F(StateStoreTest, ADamagedHistoryFileCostsOnlyTheSeriesWhoseWindowsItHeld) {
  for (int i = 0; i < 5; ++i) {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 2, i == 0 ? "idle" : "train");
    ASSERT_TRUE(d.store->Close().ok());
  }
  const std::vector<std::string> histories = HistoryFiles(dir_);
  ASSERT_GE(histories.size(), 2u);
  // The newest: the windows closed since the last stop, those of "train".
  FlipAByte(dir_ + "/" + histories.back(), 40);
  std::string expected;
  {
    Daemon d(dir_, clock_);
    EXPECT_TRUE(d.report.snapshot_loaded);
    ASSERT_THAT(d.report.skipped, SizeIs(2));
    EXPECT_THAT(d.report.skipped[0], HasSubstr(histories.back() + ": its check does not match"));
    EXPECT_THAT(d.report.skipped[1], HasSubstr("their history starts again"));
    EXPECT_GE(d.stats.state_skipped.load(), 2u);
    const size_t series = d.aggregator.series_count();
    const std::string& said = d.report.skipped[1];
    const size_t at = said.find(" of ") + 4;
    size_t lost = 0;
    ASSERT_TRUE(absl::SimpleAtoi(said.substr(at, said.find(' ', at) - at), &lost)) << said;
    EXPECT_GT(lost, 0u);
    EXPECT_LT(lost, series);  // the idle series kept theirs
    d.aggregator.FinishRestore();
    expected = Saved(d.aggregator, d.clients);
    ASSERT_TRUE(d.store->Close().ok());
  }
  Daemon again(dir_, clock_);
  EXPECT_THAT(again.report.skipped, IsEmpty());
  EXPECT_EQ(Saved(again.aggregator, again.clients), expected);
}

// A snapshot of the layout before history files (its closed windows in
// it) is restored, and the next snapshot moves them to a history file.
TEST_F(StateStoreTest, ASnapshotWithItsClosedWindowsInsideIsRestored) {
  std::string before;
  {
    Daemon d(dir_, clock_);
    Exercise(d, clock_, 4);
    d.aggregator.FinishRestore();
    before = Saved(d.aggregator, d.clients);  // that layout's payload
  }
  ASSERT_EQ(std::system(absl::StrCat("rm -f ", dir_, "/journal-* ", dir_, "/snapshot-* ", dir_,
                                     "/history-*")
                            .c_str()),
            0);
  {
    std::string file("TMSNAP\0\1", 8);
    Writer w(file);
    w.Fixed64(0);
    w.Fixed64(before.size());
    w.Fixed64(Check(before));
    file += before;
    std::ofstream f(dir_ + "/snapshot-0000000000000000", std::ios::binary);
    f << file;
  }
  {
    Daemon d(dir_, clock_);
    EXPECT_TRUE(d.report.snapshot_loaded);
    EXPECT_THAT(d.report.skipped, IsEmpty());
    EXPECT_EQ(Saved(d.aggregator, d.clients), before);
    ASSERT_TRUE(d.store->Close().ok());
  }
  EXPECT_THAT(HistoryFiles(dir_), SizeIs(1));
  Daemon again(dir_, clock_);
  EXPECT_THAT(again.report.skipped, IsEmpty());
  EXPECT_EQ(Saved(again.aggregator, again.clients), before);
}

TEST_F(StateStoreTest, TwoDaemonsCannotShareADirectory) {
  Daemon first(dir_, clock_);
  StateOptions options;
  options.dir = dir_;
  auto second = StateStore::Open(options, nullptr);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(), HasSubstr("in use by another torchmond"));
}

TEST_F(StateStoreTest, ASnapshotRemovesWhatCameBeforeThePreviousOne) {
  TwoStops(dir_, clock_);
  std::vector<std::string> files = Files(dir_);
  ASSERT_THAT(files, SizeIs(4));  // both stops' snapshots and journals
  const std::string second = files[1].substr(9);
  {
    // A third stop, nothing new: its snapshot is the second's again, and
    // what came before the second goes.
    Daemon d(dir_, clock_);
    ASSERT_TRUE(d.store->Close().ok());
  }
  files = Files(dir_);
  EXPECT_THAT(files, ElementsAre("snapshot-" + second, "journal-" + second));
}

TEST(ParseFsyncTest, AcceptsAlwaysNeverAndADuration) {
  EXPECT_EQ(ParseFsync("always")->first, StateOptions::Fsync::kAlways);
  EXPECT_EQ(ParseFsync("never")->first, StateOptions::Fsync::kNever);
  EXPECT_EQ(ParseFsync("200ms")->second, absl::Milliseconds(200));
  EXPECT_THAT(ParseFsync("sometimes").status().message(), HasSubstr("--state-fsync sometimes"));
  EXPECT_FALSE(ParseFsync("0s").ok());
}

}  // namespace
}  // namespace torchmon::server::state

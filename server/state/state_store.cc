#include "server/state/state_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/core/state_files.h"
#include "server/core/state_wire.h"

namespace torchmon::server::state {
namespace {

// Version 1 holds the series' closed windows; version 2 names the history
// files that hold them instead (and is the one written).
constexpr char kSnapshotMagic[8] = {'T', 'M', 'S', 'N', 'A', 'P', '\0', '\1'};
constexpr char kSnapshotApartMagic[8] = {'T', 'M', 'S', 'N', 'A', 'P', '\0', '\2'};
constexpr char kHistoryMagic[8] = {'T', 'M', 'H', 'I', 'S', 'T', '\0', '\1'};
// A snapshot's history file holds the windows closed since the last one,
// and every window kept by one in 32 of the series (by slot, in turn): the
// newest 32 files hold every series' windows, and older ones go. With 100k
// series of 120 windows and a snapshot every 3 s, the copies are about
// 5 MB/s of writes, as much as the windows closed.
constexpr uint32_t kHistoryParts = 32;
constexpr char kJournalMagic[8] = {'T', 'M', 'J', 'R', 'N', 'L', '\0', '\1'};
constexpr size_t kFileHeader = 16;    // magic, position
constexpr size_t kRecordHeader = 12;  // length u32, check u64
// The largest record written: an ingest batch of 16 MiB decodes to less.
constexpr uint32_t kMaxRecord = 256u << 20;

std::string Name(absl::string_view kind, uint64_t position) {
  return absl::StrFormat("%s-%016x", kind, position);
}

std::string Header(const char (&magic)[8], uint64_t position) {
  std::string h(magic, 8);
  Writer(h).Fixed64(position);
  return h;
}

// Why `bytes` is not a whole file that WriteWhole wrote with `magic` at
// `at` (its header's position or sequence), or "" with `payload` set.
std::string NotWhole(absl::string_view bytes, const char (&magic)[8], uint64_t at,
                     absl::string_view kind, absl::string_view* payload) {
  if (bytes.size() < kFileHeader + 16 || bytes.substr(0, 8) != absl::string_view(magic, 8)) {
    return absl::StrCat("not a torchmond ", kind, " of this version");
  }
  Reader h(bytes.substr(8, 24));
  const uint64_t position = h.Fixed64("position");
  const uint64_t length = h.Fixed64("length");
  const uint64_t check = h.Fixed64("check");
  *payload = bytes.substr(32);
  if (position != at || length != payload->size() || Check(*payload) != check) {
    return "its check does not match its content (a torn or damaged file)";
  }
  return "";
}

// The files of the directory by kind, keyed by position.
struct Listing {
  std::map<uint64_t, std::string> snapshots, journals, histories;
  std::vector<std::string> temporary;
};

Listing List(const std::string& dir) {
  Listing l;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return l;
  while (const dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    uint64_t position;
    if ((absl::StartsWith(name, "snapshot-") || absl::StartsWith(name, "history-") ||
         absl::StartsWith(name, "journal-")) &&
        absl::EndsWith(name, ".tmp")) {
      l.temporary.emplace_back(name);
    } else if (absl::StartsWith(name, "history-") && name.size() == 8 + 16 &&
               absl::SimpleHexAtoi(name.substr(8), &position)) {
      l.histories.emplace(position, std::string(name));
    } else if (absl::StartsWith(name, "snapshot-") && name.size() == 9 + 16 &&
               absl::SimpleHexAtoi(name.substr(9), &position)) {
      l.snapshots.emplace(position, std::string(name));
    } else if (absl::StartsWith(name, "journal-") && name.size() == 8 + 16 &&
               absl::SimpleHexAtoi(name.substr(8), &position)) {
      l.journals.emplace(position, std::string(name));
    }
  }
  ::closedir(d);
  return l;
}

// Applies one record's operations; false (with the reader's reason) at the
// first that fails.
bool ReplayRecord(absl::string_view payload, Aggregator& aggregator, ClientRegistry& clients,
                  absl::Status* why) {
  Reader r(payload);
  aggregator.ReplayRecord(r, [&clients](JournalOp, Reader& in) { clients.Replay(in); });
  *why = r.status();
  return r.ok();
}

}  // namespace

absl::StatusOr<std::pair<StateOptions::Fsync, absl::Duration>> ParseFsync(absl::string_view text) {
  if (text == "always") return std::make_pair(StateOptions::Fsync::kAlways, absl::ZeroDuration());
  if (text == "never") return std::make_pair(StateOptions::Fsync::kNever, absl::ZeroDuration());
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d <= absl::ZeroDuration() || d > absl::Hours(1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--state-fsync ", text, ": expected always, never or a duration up to 1h (1s, 200ms)"));
  }
  return std::make_pair(StateOptions::Fsync::kInterval, d);
}

StateStore::StateStore(StateOptions options, int lock_fd, bool writable,
                       std::function<void(const std::string&)> log, DaemonStats* stats)
    : options_(std::move(options)),
      lock_fd_(lock_fd),
      writable_at_start_(writable),
      log_(std::move(log)),
      stats_(stats != nullptr ? *stats : own_stats_) {}

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(
    StateOptions options, std::function<void(const std::string&)> log, DaemonStats* stats) {
  if (options.dir.empty()) return absl::InvalidArgumentError("--state-dir is empty");
  if (::mkdir(options.dir.c_str(), 0750) != 0 && errno != EEXIST) {
    return ErrnoStatus(absl::StrCat("--state-dir ", options.dir, ": cannot create it"), errno);
  }
  const std::string lock_path = options.dir + "/lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  bool writable = true;
  if (fd < 0 && (errno == EROFS || errno == EACCES || errno == EPERM)) {
    // A directory it cannot write (a filesystem remounted read-only after
    // errors, a directory of another owner): what it holds is restored and
    // the daemon runs as on a full disk, retrying. Its lock is taken when
    // the file is there (a second daemon cannot write either).
    const int err = errno;
    writable = false;
    fd = ::open(lock_path.c_str(), O_RDONLY | O_CLOEXEC);
    const int read_err = fd < 0 ? errno : 0;  // before the log line, which may set errno
    if (log) {
      log(absl::StrCat("state: --state-dir ", options.dir, " cannot be written (",
                       std::strerror(err),
                       "): restoring what it holds; batches are applied and acknowledged but not "
                       "kept until a snapshot succeeds (retried every 5 s)"));
    }
    if (fd < 0 && read_err != ENOENT) {
      return ErrnoStatus(absl::StrCat("--state-dir ", options.dir, ": cannot read it"), read_err);
    }
  } else if (fd < 0) {
    return ErrnoStatus(absl::StrCat("--state-dir ", options.dir, ": cannot write in it"), errno);
  }
  if (fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) {
      // Unavailable, not a configuration error: the other daemon may be
      // on its way out (a restart), and a retry then succeeds.
      return absl::UnavailableError(absl::StrCat(
          "--state-dir ", options.dir, " is in use by another torchmond (its lock file is held)"));
    }
    return ErrnoStatus(absl::StrCat("--state-dir ", options.dir, ": cannot lock it"), err);
  }
  return std::unique_ptr<StateStore>(
      new StateStore(std::move(options), fd, writable, std::move(log), stats));
}

StateStore::~StateStore() {
  {
    absl::MutexLock lock(&wake_mu_);
    stop_ = true;
  }
  if (background_.joinable()) background_.join();
  absl::MutexLock io(&io_mu_);
  if (journal_fd_ >= 0) ::close(journal_fd_);
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

void StateStore::SetAside(const std::string& name, const std::string& why,
                          RestoreReport& report) {
  const std::string to = MoveToSkipped(options_.dir, options_.dir + "/" + name, name);
  report.skipped.push_back(
      absl::StrCat(name, ": ", why, to.empty() ? "" : absl::StrCat(" (moved to ", to, ")")));
}

RestoreReport StateStore::Restore(Aggregator& aggregator, ClientRegistry& clients,
                                  uint64_t republish_after) {
  const absl::Time start = absl::Now();
  RestoreReport report;
  aggregator_ = &aggregator;
  clients_ = &clients;
  Listing files = List(options_.dir);
  for (const std::string& t : files.temporary) ::unlink((options_.dir + "/" + t).c_str());

  // The newest snapshot that reads whole (kept for a replay that must
  // start again, without a copy of its hundreds of MB).
  FileBytes snapshot_bytes;
  absl::string_view snapshot_payload;
  bool apart = false;  // a snapshot whose closed windows are in history files
  std::vector<uint64_t> chain;
  uint64_t next_history = 0;
  // Reads a snapshot's payload into the aggregator and the registry.
  auto load_snapshot = [&](absl::string_view payload) {
    Reader r(payload);
    chain.clear();
    if (apart) {
      next_history = r.Varint("next history file");
      const size_t n = r.Count("history files", 1);
      for (size_t i = 0; i < n && r.ok(); ++i) chain.push_back(r.Varint("history file"));
    }
    if (aggregator.LoadState(r) && clients.LoadState(r) && r.done()) return std::string();
    return r.ok() ? std::string("bytes left after the state") : r.status().ToString();
  };
  for (auto it = files.snapshots.rbegin(); it != files.snapshots.rend(); ++it) {
    absl::StatusOr<FileBytes> bytes = FileBytes::Read(options_.dir + "/" + it->second);
    std::string why;
    absl::string_view payload;
    if (!bytes.ok()) {
      why = bytes.status().ToString();
    } else {
      apart = absl::StartsWith(bytes->view(), absl::string_view(kSnapshotApartMagic, 8));
      why = NotWhole(bytes->view(), apart ? kSnapshotApartMagic : kSnapshotMagic, it->first,
                     "snapshot", &payload);
      if (why.empty() && (why = load_snapshot(payload)).empty()) {
        report.snapshot_loaded = true;
        report.snapshot_position = it->first;
        snapshot_bytes = *std::move(bytes);
        snapshot_payload = snapshot_bytes.view().substr(32);
        break;
      }
    }
    SetAside(it->second, why, report);
  }
  if (!report.snapshot_loaded) apart = false;

  // The closed windows of an apart snapshot, from the history files it
  // names, oldest first. A file that cannot be used costs the series whose
  // windows it held those windows (FinishHistory), nothing else. The files
  // read are kept mapped for a replay that must start again.
  std::vector<FileBytes> history_bytes;
  std::vector<absl::string_view> history_payloads;
  bool history_whole = true;
  auto load_history = [&](bool first_time) {
    if (first_time) {
      // Mapped and checked in parallel, as they are then read (a long
      // history is hundreds of MB of them).
      struct Checked {
        absl::StatusOr<FileBytes> bytes = FileBytes();
        std::string why;
      };
      std::vector<Checked> checked(chain.size());
      auto check = [&](size_t i) {
        const std::string name = Name("history", chain[i]);
        Checked& c = checked[i];
        c.bytes = FileBytes::Read(options_.dir + "/" + name);
        absl::string_view payload;
        c.why = c.bytes.ok()
                    ? NotWhole(c.bytes->view(), kHistoryMagic, chain[i], "history file", &payload)
                    : c.bytes.status().ToString();
      };
      const size_t workers = std::clamp<size_t>(std::thread::hardware_concurrency(), 1,
                                                std::max<size_t>(chain.size(), 1));
      std::vector<std::thread> threads;
      for (size_t t = 0; t < workers; ++t) {
        threads.emplace_back([&, t] {
          for (size_t i = t; i < chain.size(); i += workers) check(i);
        });
      }
      for (std::thread& t : threads) t.join();
      for (size_t i = 0; i < chain.size(); ++i) {
        Checked& c = checked[i];
        if (c.why.empty()) {
          history_bytes.push_back(*std::move(c.bytes));
          history_payloads.push_back(history_bytes.back().view().substr(32));
          continue;
        }
        history_whole = false;
        const std::string name = Name("history", chain[i]);
        if (c.bytes.ok()) {
          c.bytes = FileBytes();  // unmapped before it moves
          SetAside(name, c.why, report);
        } else {
          report.skipped.push_back(absl::StrCat(name, ": ", c.why));
        }
      }
    }
    if (std::string why; !aggregator.LoadHistory(history_payloads, &why)) {
      // Checked whole, yet not windows of these series: what was read so
      // far stays, and FinishHistory drops what it left incomplete.
      if (first_time) report.skipped.push_back(absl::StrCat("the history files: ", why));
      history_whole = false;
    }
    const size_t incomplete = aggregator.FinishHistory();
    if (incomplete > 0) {
      history_whole = false;
      if (first_time) {
        report.skipped.push_back(absl::StrCat(
            "the closed windows of ", incomplete,
            " series (their history files could not all be used): their history starts again"));
      }
    }
  };
  if (apart) load_history(true);

  // The journal after it: files must follow one another exactly.
  uint64_t position = report.snapshot_position;
  // Without a snapshot only a journal from the very start can be replayed.
  const bool no_base =
      !report.snapshot_loaded && !files.journals.empty() && files.journals.begin()->first != 0;
  struct Record {
    absl::string_view payload;
    std::string file;    // the journal it is in
    uint64_t position;  // where it starts
  };
  // The records below point into these mappings (which stay where they are
  // as the vector grows).
  std::vector<FileBytes> journal_bytes;
  std::vector<Record> records;
  bool stopped = false;
  for (const auto& [start, name] : files.journals) {
    if (no_base) {
      SetAside(name, "starts where no usable snapshot is: nothing to replay it onto", report);
      continue;
    }
    if (start < position && !stopped) continue;  // before the snapshot: obsolete
    if (stopped || start != position) {
      SetAside(name,
               stopped ? "comes after a damaged journal"
                       : absl::StrFormat("starts at %016x, where the state reached %016x", start,
                                         position),
               report);
      stopped = true;
      continue;
    }
    absl::StatusOr<FileBytes> bytes = FileBytes::Read(options_.dir + "/" + name);
    if (!bytes.ok() || bytes->size() < kFileHeader ||
        bytes->view().substr(0, 8) != absl::string_view(kJournalMagic, 8) ||
        Reader(bytes->view().substr(8, 8)).Fixed64("position") != start) {
      SetAside(name, bytes.ok() ? "not a torchmond journal of this version"
                                : bytes.status().ToString(),
               report);
      stopped = true;
      continue;
    }
    journal_bytes.push_back(*std::move(bytes));
    const absl::string_view all = journal_bytes.back().view();
    size_t at = kFileHeader;
    while (at < all.size()) {
      Reader h(all.substr(at, kRecordHeader));
      uint32_t len = 0;
      for (int i = 0; i < 4; ++i) len |= uint32_t{h.U8("length")} << (8 * i);
      const uint64_t check = h.Fixed64("check");
      if (!h.ok() || len > kMaxRecord || all.size() - at - kRecordHeader < len ||
          Check(all.substr(at + kRecordHeader, len)) != check) {
        report.skipped.push_back(absl::StrFormat(
            "%s from byte %d: %d bytes of a record that was not written whole (the daemon "
            "stopped while writing it; it was not acknowledged)",
            name, at, all.size() - at));
        break;
      }
      records.push_back(Record{all.substr(at + kRecordHeader, len), name, position});
      at += kRecordHeader + len;
      position += kRecordHeader + len;
    }
    if (at < all.size()) stopped = true;  // later files cannot follow a torn one
  }

  // Replay, in order. An operation whose effect differs from the journaled
  // one means the state is not what the journal was written against: the
  // replay restarts from the snapshot and stops before that record.
  // The windows that the closes of records from `republish_after` on close
  // are collected: the push exporters had not yet written them.
  auto replay = [&](size_t i, absl::Status* why) {
    aggregator.CollectReplayedCloses(
        records[i].position >= republish_after ? &report.republish : nullptr);
    const bool ok = ReplayRecord(records[i].payload, aggregator, clients, why);
    aggregator.CollectReplayedCloses(nullptr);
    return ok;
  };
  size_t replayed = 0;
  absl::Status why;
  for (; replayed < records.size(); ++replayed) {
    if (!replay(replayed, &why)) break;
  }
  if (replayed < records.size()) {
    report.skipped.push_back(absl::StrCat("journal record ", replayed, " of ", records.size(),
                                          " and those after it: ", why.ToString()));
    // Their files go aside (the records before, in the same file, are
    // replayed below and kept by the next snapshot).
    std::string last;
    for (size_t i = replayed; i < records.size(); ++i) {
      if (records[i].file != last) {
        last = records[i].file;
        SetAside(last, "holds records that do not replay onto the state", report);
      }
    }
    if (report.snapshot_loaded) {
      load_snapshot(snapshot_payload);
      if (apart) load_history(false);
    } else {
      // No snapshot: start from nothing again.
      std::string none;
      Writer w(none);
      Aggregator blank(aggregator.options(), aggregator.clock());
      blank.SaveState(w);
      Reader blank_reader(none);
      aggregator.LoadState(blank_reader);
    }
    report.republish.clear();
    for (size_t i = 0; i < replayed; ++i) replay(i, &why);
  }
  report.records_replayed = replayed;
  for (size_t i = 0; i < replayed; ++i) {
    report.journal_bytes_replayed += kRecordHeader + records[i].payload.size();
  }
  position = report.snapshot_position + report.journal_bytes_replayed;
  if (!report.snapshot_loaded && files.journals.empty()) position = 0;
  // Unmapped before the journal goes on (in a file that may have the name of
  // the last one read, if that one held nothing).
  records.clear();
  journal_bytes.clear();
  snapshot_bytes = FileBytes();
  history_payloads.clear();
  history_bytes.clear();
  // The next snapshot's history file follows the snapshot's: every older
  // snapshot names older files only, and one with that number or after
  // was written by a snapshot that did not complete or was set aside. It
  // holds every window if the files read did not hold them all, or if the
  // snapshot held them itself.
  chain_ = chain;
  fallback_chain_ = chain;
  next_history_ = next_history;
  history_whole_next_ = !apart || !history_whole;
  aggregator.FinishRestore();
  aggregator.SetJournal(this);
  clients.SetJournal(this);
  {
    absl::MutexLock p(&pending_mu_);
    sealed_ = position;
  }
  stats_.state_skipped.fetch_add(report.skipped.size(), std::memory_order_relaxed);
  {
    absl::MutexLock io(&io_mu_);
    written_ = synced_ = position;
    snapshot_position_ = report.snapshot_position;
    // The journal goes on from where the state now is, in a file of its
    // own (after a torn record, the old file's tail is never read again).
    // No snapshot here: with a long history one takes seconds to write,
    // and the start would wait for it; the background writes one soon if
    // anything was replayed (then the files before the one restored from
    // go).
    if (!writable_at_start_) {
      broken_ = true;  // said by Open
      stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
    } else if (absl::Status s = StartJournalLocked(position); !s.ok()) {
      broken_ = true;
      stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
      if (log_) log_(absl::StrCat("state: ", s.message()));
    }
    snapshot_soon_ = report.records_replayed > 0 || !report.skipped.empty();
  }
  report.took = absl::Now() - start;
  background_ = std::thread([this] { Background(); });
  return report;
}

uint64_t StateStore::sealed_position() {
  absl::MutexLock p(&pending_mu_);
  return sealed_;
}

uint64_t StateStore::Seal() {
  gate_.AssertHeld();
  // The images of the series changed by long runs (Aggregator::BeforeSeal).
  if (aggregator_ != nullptr) aggregator_->BeforeSeal();
  absl::MutexLock p(&pending_mu_);
  if (record_.empty()) return sealed_;
  const uint32_t len = static_cast<uint32_t>(record_.size());
  char header[kRecordHeader];
  for (int i = 0; i < 4; ++i) header[i] = static_cast<char>(len >> (8 * i));
  const uint64_t check = Check(record_);
  for (int i = 0; i < 8; ++i) header[4 + i] = static_cast<char>(check >> (8 * i));
  pending_.append(header, kRecordHeader);
  pending_.append(record_);
  sealed_ += kRecordHeader + len;
  record_.clear();
  ++records_sealed_;
  return sealed_;
}

bool StateStore::Commit(uint64_t position) {
  absl::MutexLock io(&io_mu_);
  if (written_ >= position) return !broken_;
  uint64_t end;
  {
    absl::MutexLock p(&pending_mu_);
    writing_.swap(pending_);
    end = sealed_;
  }
  const size_t n = writing_.size();
  if (broken_ || closed_ || journal_fd_ < 0) {
    writing_.clear();
    written_ = end;
    return false;
  }
  int err = 0;
  if (!WriteAll(journal_fd_, writing_.data(), n, &err)) {
    broken_ = true;
    stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
    if (log_) {
      log_(absl::StrCat("state: writing the journal in ", options_.dir, " failed (",
                        std::strerror(err),
                        "); batches are applied but not kept until a snapshot succeeds"));
    }
    writing_.clear();
    written_ = end;
    return false;
  }
  writing_.clear();
  written_ = end;
  stats_.state_journal_bytes.fetch_add(n, std::memory_order_relaxed);
  if (options_.fsync == StateOptions::Fsync::kAlways) {
    ::fdatasync(journal_fd_);
    synced_ = end;
  }
  return true;
}

absl::Status StateStore::StartJournalLocked(uint64_t position) {
  // Made with its header under a temporary name, then renamed: a kill
  // while it is made leaves a whole header or no journal (which a restore
  // reads as one with no records), never a torn one it would set aside.
  const std::string path = options_.dir + "/" + Name("journal", position);
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return ErrnoStatus(path, errno);
  const std::string header = Header(kJournalMagic, position);
  int err = 0;
  if (!WriteAll(fd, header.data(), header.size(), &err) ||
      (::rename(tmp.c_str(), path.c_str()) != 0 && (err = errno) != 0)) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return ErrnoStatus(path, err);
  }
  if (journal_fd_ >= 0) {
    if (options_.fsync != StateOptions::Fsync::kNever) ::fdatasync(journal_fd_);
    ::close(journal_fd_);
  }
  journal_fd_ = fd;
  SyncDir(options_.dir);
  return absl::OkStatus();
}

absl::Status StateStore::Snapshot() {
  {
    // While writes fail, a file that cannot even be made fails this one
    // before the state is copied (hundreds of MB with a long history).
    bool broken;
    {
      absl::MutexLock io(&io_mu_);
      broken = broken_;
    }
    if (broken) {
      const std::string probe = options_.dir + "/snapshot-probe.tmp";
      const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
      if (fd < 0) {
        const int err = errno;
        stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
        return ErrnoStatus(absl::StrCat("writing in ", options_.dir), err);
      }
      ::close(fd);
      ::unlink(probe.c_str());
    }
  }
  std::string file;
  std::string history;
  uint64_t position;
  std::vector<uint64_t> chain;
  const uint64_t seq = next_history_;
  {
    // The barrier (the push spool's) is left once the state is copied.
    struct Barrier {
      const std::function<void()>& leave;
      ~Barrier() {
        if (leave) leave();
      }
    };
    if (barrier_enter_) barrier_enter_();
    const Barrier barrier{barrier_leave_};
    absl::MutexLock gate(&gate_);
    position = Seal();
    Commit(position);
    // The closed windows, apart: those since the last snapshot, and every
    // one kept by this file's part of the series; all of them when the
    // files before cannot be counted on (kHistoryParts files in a row,
    // each with its part, hold every window: a chain with a gap does not).
    const bool whole = history_whole_next_ || chain_.empty() || chain_.back() + 1 != seq;
    history = Header(kHistoryMagic, seq);
    history.append(16, '\0');
    Writer hw(history);
    aggregator_->SaveHistory(hw, static_cast<uint32_t>(seq % kHistoryParts),
                             whole ? 1 : kHistoryParts);
    // Until this snapshot is on disk, the windows just counted as held are
    // held by no file the directory's snapshots name.
    history_whole_next_ = true;
    if (!whole) {
      const size_t keep = std::min<size_t>(chain_.size(), kHistoryParts - 1);
      chain.assign(chain_.end() - static_cast<std::ptrdiff_t>(keep), chain_.end());
    }
    chain.push_back(seq);
    file = Header(kSnapshotApartMagic, position);
    file.append(16, '\0');  // length and check, below
    Writer w(file);
    w.Varint(seq + 1);
    w.Varint(chain.size());
    for (uint64_t c : chain) w.Varint(c);
    aggregator_->SaveState(w, Aggregator::HistoryIn::kApart);
    clients_->SaveState(w);
    absl::MutexLock io(&io_mu_);
    if (closed_) return absl::OkStatus();
    // Records from here on go to a journal that starts at the snapshot.
    if (absl::Status s = StartJournalLocked(position); !s.ok()) {
      broken_ = true;
      stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
      return s;
    }
  }
  // The history file first: the snapshot names it.
  if (absl::Status s = WriteWhole(Name("history", seq), history); !s.ok()) return s;
  if (absl::Status s = WriteWhole(Name("snapshot", position), file); !s.ok()) return s;
  SyncDir(options_.dir);
  fallback_chain_ = std::move(chain_);
  chain_ = std::move(chain);
  next_history_ = seq + 1;
  history_whole_next_ = false;
  uint64_t fallback;
  {
    absl::MutexLock io(&io_mu_);
    fallback = std::min(snapshot_position_, position);
    snapshot_position_ = position;
    stats_.state_snapshots.fetch_add(1, std::memory_order_relaxed);
    stats_.state_snapshot_bytes.store(static_cast<int64_t>(file.size() + history.size()),
                                      std::memory_order_relaxed);
    last_snapshot_live_bytes_ = file.size();
    last_snapshot_ = absl::Now();
    if (broken_) {
      broken_ = false;
      if (log_) log_(absl::StrCat("state: ", options_.dir, " is written again"));
    }
  }
  // Obsolete now: what came before the previous snapshot. That one stays,
  // with its journal (which ends where this snapshot starts) and its
  // history files, so that a restore can fall back on it should this one
  // be found damaged.
  Listing files = List(options_.dir);
  for (const auto& [p, n] : files.snapshots) {
    if (p < fallback) ::unlink((options_.dir + "/" + n).c_str());
  }
  for (const auto& [p, n] : files.journals) {
    if (p < fallback) ::unlink((options_.dir + "/" + n).c_str());
  }
  for (const auto& [p, n] : files.histories) {
    if (std::find(chain_.begin(), chain_.end(), p) == chain_.end() &&
        std::find(fallback_chain_.begin(), fallback_chain_.end(), p) == fallback_chain_.end()) {
      ::unlink((options_.dir + "/" + n).c_str());
    }
  }
  return absl::OkStatus();
}

absl::Status StateStore::WriteWhole(const std::string& name, std::string& bytes) {
  // The length and check after the header, over what follows them.
  const absl::string_view payload = absl::string_view(bytes).substr(32);
  std::string tail;
  Writer t(tail);
  t.Fixed64(payload.size());
  t.Fixed64(Check(payload));
  bytes.replace(16, 16, tail);
  const std::string path = options_.dir + "/" + name;
  if (const int err = WriteFileWhole(path + ".tmp", path, bytes, /*sync=*/true); err != 0) {
    stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
    return ErrnoStatus(absl::StrCat("writing ", path), err);
  }
  return absl::OkStatus();
}

void StateStore::Background() {
  absl::Time last_sync = absl::Now();
  absl::Time last_failed_snapshot = absl::InfinitePast();
  bool snapshot_failing = false;
  for (;;) {
    {
      absl::MutexLock lock(&wake_mu_);
      wake_mu_.AwaitWithTimeout(absl::Condition(&stop_), absl::Milliseconds(50));
      if (stop_) return;
    }
    bool snapshot_due = false;
    int sync_fd = -1;
    uint64_t sync_to = 0;
    {
      absl::MutexLock io(&io_mu_);
      if (closed_) return;
      // At least half as much journal as the last snapshot was large
      // without its history file (whose windows are written once, and
      // again once every kHistoryParts snapshots): a restart after a kill
      // replays at most that, on top of reading the snapshot; replaying a
      // byte costs more than reading one.
      const uint64_t due_bytes = std::max(options_.snapshot_bytes, last_snapshot_live_bytes_ / 2);
      // Taken first: behind a short-circuit it would stay set and ask for
      // one more snapshot later.
      const bool soon = std::exchange(snapshot_soon_, false);
      snapshot_due = soon ||
                     (written_ - snapshot_position_ >= due_bytes &&
                      absl::Now() - last_snapshot_ >= options_.snapshot_interval) ||
                     (broken_ && absl::Now() - last_failed_snapshot > absl::Seconds(5));
      if (options_.fsync == StateOptions::Fsync::kInterval && synced_ < written_ &&
          absl::Now() - last_sync >= options_.fsync_interval && journal_fd_ >= 0) {
        // Synced on a copy of the descriptor, so that acknowledgements
        // (Commit) need not wait for the disk.
        sync_fd = ::dup(journal_fd_);
        sync_to = written_;
      }
    }
    if (sync_fd >= 0) {
      ::fdatasync(sync_fd);
      ::close(sync_fd);
      last_sync = absl::Now();
      absl::MutexLock io(&io_mu_);
      synced_ = std::max(synced_, sync_to);
    }
    if (snapshot_due) {
      if (absl::Status s = Snapshot(); !s.ok()) {
        last_failed_snapshot = absl::Now();
        // Said once for a run of failures (retried every 5 s).
        if (!snapshot_failing && log_) {
          log_(absl::StrCat("state: snapshot failed: ", s.message(), " (retried every 5 s)"));
        }
        snapshot_failing = true;
      } else {
        snapshot_failing = false;
      }
    }
  }
}

absl::Status StateStore::Close() {
  {
    absl::MutexLock lock(&wake_mu_);
    stop_ = true;
  }
  if (background_.joinable()) background_.join();
  absl::Status s = Snapshot();
  absl::MutexLock io(&io_mu_);
  closed_ = true;
  if (journal_fd_ >= 0) ::fdatasync(journal_fd_);
  return s;
}


}  // namespace torchmon::server::state

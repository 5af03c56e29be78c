#include "server/sinks/sink_writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <algorithm>
#include <ctime>
#include <string>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/core/json_lines.h"
#include "server/sinks/tfrecord.h"

namespace torchmon::server {
namespace {

// Run files held open at once; past it they are all closed and reopened on
// demand (in append mode), so that many label sets cannot exhaust the
// daemon's file descriptors.
constexpr size_t kMaxOpenRuns = 256;

bool IsRunNameChar(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '_' || c == '=' || c == ',' || c == '+' || c == '-';
}

void AppendEscaped(std::string& out, const std::string& s) {
  for (unsigned char c : s) {
    if (IsRunNameChar(c)) {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppendFormat(&out, "%%%02X", c);
    }
  }
}

std::string Errno(int err) { return std::strerror(err); }

absl::Status CheckDirectory(const std::string& flag, const std::string& dir) {
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", dir, ": ", Errno(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", dir, ": not a directory"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", dir, ": not writable: ", Errno(errno)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string TensorBoardRunName(const Labels& labels) {
  if (labels.empty()) return "no-labels";
  std::string name;
  for (const auto& [key, value] : labels) {
    if (!name.empty()) name.push_back(',');
    AppendEscaped(name, key);
    name.push_back('=');
    AppendEscaped(name, value);
  }
  // A file name has at most 255 bytes: a long one keeps its start and a hash.
  if (name.size() > 200) {
    name = absl::StrFormat("%s-%016x", name.substr(0, 180), std::hash<std::string>{}(name));
  }
  return name;
}

absl::Status SinkWriter::Check(const SinkOptions& options) {
  if (!options.jsonl_file.empty()) {
    const std::string& path = options.jsonl_file;
    struct stat st;
    if (stat(path.c_str(), &st) == 0) {
      if (S_ISDIR(st.st_mode)) {
        return absl::InvalidArgumentError(absl::StrCat("--jsonl-file ", path, ": is a directory"));
      }
      if (access(path.c_str(), W_OK) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--jsonl-file ", path, ": not writable: ", Errno(errno)));
      }
    } else {
      const size_t slash = path.rfind('/');
      const std::string dir = slash == std::string::npos ? "." : path.substr(0, std::max<size_t>(slash, 1));
      if (absl::Status s = CheckDirectory("--jsonl-file", dir); !s.ok()) return s;
    }
  }
  if (!options.tensorboard_dir.empty()) {
    const std::string& dir = options.tensorboard_dir;
    struct stat st;
    if (stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
      // Created at start (SinkWriter::Start) if its parent is there.
      std::string parent = dir;
      while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
      const size_t slash = parent.rfind('/');
      parent = slash == std::string::npos ? "." : parent.substr(0, std::max<size_t>(slash, 1));
      if (stat(parent.c_str(), &st) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--tensorboard-dir ", dir, ": does not exist, nor does its parent ", parent));
      }
      return CheckDirectory("--tensorboard-dir", parent);
    }
    if (absl::Status s = CheckDirectory("--tensorboard-dir", dir); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SinkWriter>> SinkWriter::Start(const SinkOptions& options,
                                                              Broadcaster<ClosedWindow>& windows,
                                                              Broadcaster<EventRecord>& events,
                                                              DaemonStats& stats, LogFn log) {
  if (absl::Status s = Check(options); !s.ok()) return s;
  std::unique_ptr<SinkWriter> writer(
      new SinkWriter(options, windows, events, stats, std::move(log)));
  if (!options.jsonl_file.empty()) {
    writer->jsonl_.path = options.jsonl_file;
    writer->jsonl_.file = std::fopen(options.jsonl_file.c_str(), "a");
    if (writer->jsonl_.file == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("--jsonl-file ", options.jsonl_file, ": ", Errno(errno)));
    }
    stats.outputs[kJsonlSink].name = SinkName(kJsonlSink);
    stats.outputs[kJsonlSink].enabled = true;
  }
  if (!options.tensorboard_dir.empty()) {
    // Owner and group only: the event files hold the training metrics.
    if (mkdir(options.tensorboard_dir.c_str(), 0750) == 0) {
      chmod(options.tensorboard_dir.c_str(), 0750);  // whatever the umask
    } else if (errno != EEXIST) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensorboard-dir ", options.tensorboard_dir, ": ", Errno(errno)));
    }
    stats.outputs[kTensorBoardSink].name = SinkName(kTensorBoardSink);
    stats.outputs[kTensorBoardSink].enabled = true;
  }
  SinkWriter* w = writer.get();
  w->window_sub_ = windows.Subscribe([](const ClosedWindow&) { return true; }, [w] { w->Wake(); },
                                     options.queue_capacity, /*counted_by_publish=*/false);
  if (!options.jsonl_file.empty()) {
    w->event_sub_ = events.Subscribe([](const EventRecord&) { return true; }, [w] { w->Wake(); },
                                     options.queue_capacity, /*counted_by_publish=*/false);
  }
  w->thread_ = std::thread([w] { w->Run(); });
  return writer;
}

SinkWriter::SinkWriter(SinkOptions options, Broadcaster<ClosedWindow>& windows,
                       Broadcaster<EventRecord>& events, DaemonStats& stats, LogFn log)
    : options_(std::move(options)),
      windows_(windows),
      events_(events),
      stats_(stats),
      log_(std::move(log)) {
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  std::string safe_host;
  AppendEscaped(safe_host, host);
  file_suffix_ = absl::StrCat(".", static_cast<int64_t>(std::time(nullptr)), ".", safe_host, ".",
                              getpid(), ".torchmond");
}

SinkWriter::~SinkWriter() { Finish(); }

void SinkWriter::Wake() {
  absl::MutexLock lock(&mu_);
  wake_ = true;
}

void SinkWriter::Reopen() {
  absl::MutexLock lock(&mu_);
  reopen_ = true;
  wake_ = true;
}

void SinkWriter::Finish() {
  if (!thread_.joinable()) return;
  {
    absl::MutexLock lock(&mu_);
    finishing_ = true;
    wake_ = true;
  }
  thread_.join();
  if (window_sub_) windows_.Unsubscribe(window_sub_);
  if (event_sub_) events_.Unsubscribe(event_sub_);
}

void SinkWriter::Run() {
  for (;;) {
    bool reopen, finishing;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(&wake_));
      wake_ = false;
      reopen = std::exchange(reopen_, false);
      finishing = finishing_;
    }
    if (reopen) ReopenJsonl();
    while (std::optional<ClosedWindow> w = window_sub_->Pop()) WriteWindow(*w);
    if (event_sub_) {
      while (std::optional<EventRecord> e = event_sub_->Pop()) WriteEvent(*e);
    }
    stats_.outputs[kTensorBoardSink].dropped.store(
        options_.tensorboard_dir.empty() ? 0 : window_sub_->Dropped(), std::memory_order_relaxed);
    if (!options_.jsonl_file.empty()) {
      stats_.outputs[kJsonlSink].dropped.store(window_sub_->Dropped() + event_sub_->Dropped(),
                                             std::memory_order_relaxed);
      Flush(kJsonlSink, jsonl_);
    }
    for (auto& [labels, run] : runs_) Flush(kTensorBoardSink, run);
    // Closed and drained (Close wakes this thread after the last Publish),
    // or told to finish after this pass.
    if (finishing || (window_sub_->Finished() && (!event_sub_ || event_sub_->Finished()))) break;
  }
  if (jsonl_.file != nullptr) std::fclose(jsonl_.file);
  for (auto& [labels, run] : runs_) {
    if (run.file != nullptr) std::fclose(run.file);
  }
}

void SinkWriter::WriteWindow(const ClosedWindow& window) {
  if (jsonl_.file != nullptr) Write(kJsonlSink, jsonl_, WindowJsonLine(window) + "\n");
  if (options_.tensorboard_dir.empty()) return;
  Output* run = TensorBoardFile(*window.series);
  if (run == nullptr) {
    stats_.outputs[kTensorBoardSink].errors.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  // As torch.monitor's TensorboardEventHandler: one scalar per aggregation,
  // tagged "<stat>.<aggregation>", at the window's end. The step is the
  // window's index since the epoch, so curves of every rank line up.
  std::vector<std::pair<std::string, float>> scalars;
  // Quantiles are tagged "<stat>.p99".
  ForEachAggregate(window, [&](const AggregateRef& ref, double value) {
    scalars.emplace_back(absl::StrCat(window.series->stat, ".", AggregateName(ref)),
                         static_cast<float>(value));
  });
  const int64_t length = window.end_ms - window.start_ms;
  const int64_t step = length > 0 ? window.start_ms / length : 0;
  Write(kTensorBoardSink, *run,
        TfRecord(ScalarsEvent(static_cast<double>(window.end_ms) / 1000.0, step, scalars)));
}

void SinkWriter::WriteEvent(const EventRecord& event) {
  if (jsonl_.file != nullptr) Write(kJsonlSink, jsonl_, EventJsonLine(event) + "\n");
}

void SinkWriter::Write(int sink, Output& out, const std::string& bytes) {
  if (out.file == nullptr ||
      std::fwrite(bytes.data(), 1, bytes.size(), out.file) != bytes.size()) {
    stats_.outputs[sink].errors.fetch_add(1, std::memory_order_relaxed);
    Failed(sink, absl::StrCat("writing ", out.path, ": ", Errno(errno)));
    if (out.file != nullptr) std::clearerr(out.file);
    return;
  }
  ++out.unflushed;
}

void SinkWriter::Flush(int sink, Output& out) {
  if (out.file == nullptr || out.unflushed == 0) return;
  const uint64_t records = std::exchange(out.unflushed, 0);
  if (std::fflush(out.file) != 0) {
    stats_.outputs[sink].errors.fetch_add(records, std::memory_order_relaxed);
    Failed(sink, absl::StrCat("writing ", out.path, ": ", Errno(errno)));
    std::clearerr(out.file);
    return;
  }
  stats_.outputs[sink].records.fetch_add(records, std::memory_order_relaxed);
  Recovered(sink);
}

void SinkWriter::Failed(int sink, const std::string& what) {
  if (std::exchange(failing_[sink], true)) return;
  log_(absl::StrCat("sink ", SinkName(sink), ": ", what,
                    "; records lost until writes succeed again are counted in "
                    "torchmon_daemon_sink_errors_total"));
}

void SinkWriter::Recovered(int sink) {
  if (!std::exchange(failing_[sink], false)) return;
  log_(absl::StrCat("sink ", SinkName(sink), ": writing again"));
}

SinkWriter::Output* SinkWriter::TensorBoardFile(const SeriesKey& series) {
  auto [it, inserted] = runs_.try_emplace(series.labels);
  Output& run = it->second;
  if (run.file != nullptr) return &run;
  if (open_runs_ >= kMaxOpenRuns) {
    for (auto& [labels, other] : runs_) {
      if (other.file == nullptr) continue;
      Flush(kTensorBoardSink, other);
      std::fclose(other.file);
      other.file = nullptr;
    }
    open_runs_ = 0;
  }
  const bool new_file = run.path.empty();
  if (new_file) {
    const std::string dir =
        absl::StrCat(options_.tensorboard_dir, "/", TensorBoardRunName(series.labels.get()));
    if (mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) {
      Failed(kTensorBoardSink, absl::StrCat("creating ", dir, ": ", Errno(errno)));
      runs_.erase(it);
      return nullptr;
    }
    run.path = absl::StrCat(dir, "/events.out.tfevents", file_suffix_);
  }
  run.file = std::fopen(run.path.c_str(), "a");
  if (run.file == nullptr) {
    Failed(kTensorBoardSink, absl::StrCat("opening ", run.path, ": ", Errno(errno)));
    if (new_file) runs_.erase(it);
    return nullptr;
  }
  ++open_runs_;
  if (new_file) {
    // Every event file starts with its version; not counted as a record.
    const std::string version = TfRecord(FileVersionEvent(static_cast<double>(std::time(nullptr))));
    if (std::fwrite(version.data(), 1, version.size(), run.file) != version.size()) {
      Failed(kTensorBoardSink, absl::StrCat("writing ", run.path, ": ", Errno(errno)));
    }
  }
  return &run;
}

void SinkWriter::ReopenJsonl() {
  if (jsonl_.file == nullptr && jsonl_.path.empty()) {
    log_("SIGHUP: no sink file to reopen");
    return;
  }
  Flush(kJsonlSink, jsonl_);
  std::FILE* fresh = std::fopen(jsonl_.path.c_str(), "a");
  if (fresh == nullptr) {
    // Keep writing to the file already open (renamed, perhaps): nothing is
    // lost, and the next SIGHUP tries again.
    log_(absl::StrCat("sink jsonl: reopening ", jsonl_.path, ": ", Errno(errno),
                      "; still writing to the file open before"));
    return;
  }
  if (jsonl_.file != nullptr) std::fclose(jsonl_.file);
  jsonl_.file = fresh;
  log_(absl::StrCat("sink jsonl: reopened ", jsonl_.path));
}

}  // namespace torchmon::server

// The daemon's sinks: every closed window (the partial ones of a shutdown
// included) and every event, written to a JSON-lines file, and the windows
// to TensorBoard event files (docs/sinks.md).
//
// One writer thread takes them from its own subscriptions to the daemon's
// broadcasters, so file I/O never runs on the ingest path or the window
// timer. The subscriptions are bounded: if the disk cannot keep up, the
// oldest queued records are dropped and counted
// (torchmon_daemon_sink_dropped_total); write errors are counted
// (torchmon_daemon_sink_errors_total) and logged once per run of failures.
//
// Threading: Start, Finish and the destructor are called by one thread (the
// daemon's wiring), in that order; Reopen by any thread, any number of
// times, until Finish returns. The files, the TensorBoard runs and the
// failure state belong to the writer thread alone; the other threads only
// set flags under mu_ and wake it. The LogFn is called on the writer thread.
#ifndef TORCHMON_SERVER_SINKS_SINK_WRITER_H_
#define TORCHMON_SERVER_SINKS_SINK_WRITER_H_

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/core/event_log.h"
#include "server/core/types.h"
#include "server/core/broadcaster.h"
#include "server/core/daemon_stats.h"
#include "server/sinks/sink_options.h"

namespace torchmon::server {

// The sinks, as indices into DaemonStats::outputs and by their names there
// (the `sink` label of torchmon_daemon_sink_*).
enum SinkKind { kJsonlSink = 0, kTensorBoardSink = 1 };
inline const char* SinkName(int kind) { return kind == kJsonlSink ? "jsonl" : "tensorboard"; }

// The TensorBoard run directory of a label set: "k=v,k=v" in key order,
// bytes other than [A-Za-z0-9._=,+-] written %XX (so distinct label sets
// never share a run); "no-labels" for none.
std::string TensorBoardRunName(const Labels& labels);

class SinkWriter {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // Checks what Start would open without opening it: the JSON-lines file
  // can be created or appended to, the TensorBoard directory exists and is
  // writable. Errors name the flag.
  static absl::Status Check(const SinkOptions& options);

  // Opens the sinks (errors name the flag and the path), subscribes to
  // `windows` and `events` and starts the writer thread.
  static absl::StatusOr<std::unique_ptr<SinkWriter>> Start(const SinkOptions& options,
                                                           Broadcaster<ClosedWindow>& windows,
                                                           Broadcaster<EventRecord>& events,
                                                           DaemonStats& stats, LogFn log);
  // Stops the writer (Finish) if still running.
  ~SinkWriter();

  // SIGHUP: the JSON-lines file is closed and opened again by its path (log
  // rotation). Returns at once; any thread.
  void Reopen() ABSL_LOCKS_EXCLUDED(mu_);

  // Writes everything queued, flushes, closes the files and stops the
  // thread. Called once the broadcasters are closed, it writes all they
  // published.
  void Finish() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // One output file and its failure state.
  struct Output {
    std::string path;
    std::FILE* file = nullptr;
    uint64_t unflushed = 0;  // records written since the last flush
  };

  SinkWriter(SinkOptions options, Broadcaster<ClosedWindow>& windows,
             Broadcaster<EventRecord>& events, DaemonStats& stats, LogFn log);

  void Run();
  void Wake() ABSL_LOCKS_EXCLUDED(mu_);
  void WriteWindow(const ClosedWindow& window);
  void WriteEvent(const EventRecord& event);
  // Appends `bytes` as one record of `sink` to `out`.
  void Write(int sink, Output& out, const std::string& bytes);
  void Flush(int sink, Output& out);
  void Failed(int sink, const std::string& what);
  void Recovered(int sink);
  Output* TensorBoardFile(const SeriesKey& series);
  void ReopenJsonl();

  const SinkOptions options_;
  Broadcaster<ClosedWindow>& windows_;
  Broadcaster<EventRecord>& events_;
  DaemonStats& stats_;
  LogFn log_;
  std::shared_ptr<Broadcaster<ClosedWindow>::Subscription> window_sub_;
  std::shared_ptr<Broadcaster<EventRecord>::Subscription> event_sub_;

  absl::Mutex mu_;
  bool wake_ ABSL_GUARDED_BY(mu_) = false;
  bool reopen_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;

  // Writer thread only.
  Output jsonl_;
  absl::flat_hash_map<LabelSet, Output> runs_;
  size_t open_runs_ = 0;
  std::string file_suffix_;  // ".<unix s>.<host>.<pid>.torchmond"
  bool failing_[2] = {false, false};
  std::thread thread_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_SINKS_SINK_WRITER_H_

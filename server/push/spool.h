// The push queues on disk (torchmond --state-dir with push endpoints;
// docs/push.md, "Across restarts"): every request an exporter holds is also
// a file, removed once its endpoint took it (an answer 2xx) or refused it for
// good, so that a daemon killed or stopped while an endpoint is away sends
// what it held once both are back.
//
// In the state directory:
//   push/published               the journal position through which every
//                                pass of closed windows is in the queues
//   push/<exporter>-<hash>/      one endpoint's queue (hash: of its URL)
//     endpoint                   its URL, for whoever reads the directory
//     <position>-<seq>           one request of the pass at <position>
// A pass's requests are written for every endpoint, then `published` is
// moved past it, and only then handed to the senders. At a start, the
// requests of passes past `published` are removed (no sender ever saw
// them): the restore closes those windows again from the journal, and they
// are queued anew. So each request is sent once, but for a kill between an
// endpoint's answer and the removal of the request's file: that request is
// sent again (at least once; remote-write and OTLP receivers take a repeat
// of the same samples).
//
// Thread-safe: Write and MarkPublished from the encoder, Remove from the
// senders, Load before either.
#ifndef TORCHMON_SERVER_PUSH_SPOOL_H_
#define TORCHMON_SERVER_PUSH_SPOOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/daemon_stats.h"
#include "server/push/encode.h"
#include "server/push/push_options.h"

namespace torchmon::server {

class PushSpool {
 public:
  using LogFn = std::function<void(const std::string&)>;

  // One window end's requests read back, oldest first.
  struct Queued {
    uint64_t position = 0;
    int64_t end_ms = 0;
    int64_t queued_ms = 0;
    std::vector<EncodedRequest> requests;
    std::vector<std::string> files;  // one per request
  };

  // Opens (creating) `state_dir`/push for `endpoints`, reading where the
  // queues stand. The queues of endpoints no longer configured are removed,
  // said in the log. `sync`: each file is fsync()ed before it counts (the
  // state's --state-fsync always). `stats` gets write errors and skipped
  // files (torchmon_daemon_state_*).
  static absl::StatusOr<std::unique_ptr<PushSpool>> Open(const std::string& state_dir,
                                                         const std::vector<PushEndpoint>& endpoints,
                                                         bool sync, LogFn log, DaemonStats& stats);

  // The journal position through which every pass is queued; nullopt for
  // queues that never had one (the first start with push endpoints).
  std::optional<uint64_t> published() const { return published_; }

  // Endpoint `endpoint`'s queue, oldest first. Requests of passes past
  // published() are removed; a damaged file is moved to the state's
  // skipped folder, said in the log and counted.
  std::vector<Queued> Load(size_t endpoint);

  // Writes one request of the pass at `position`; returns its file, or ""
  // when it could not be written (said once in a row, counted: the request
  // is still sent from memory, but would not outlive the daemon).
  std::string Write(size_t endpoint, uint64_t position, uint32_t seq, int64_t end_ms,
                    int64_t queued_ms, const EncodedRequest& request);
  // Every pass through `position` is queued.
  void MarkPublished(uint64_t position);
  // A request its endpoint took, or that is dropped.
  void Remove(const std::string& file);

  const std::string& dir() const { return dir_; }

 private:
  PushSpool(std::string state_dir, bool sync, LogFn log, DaemonStats& stats);
  bool WriteFile(const std::string& path, const std::string& bytes);
  void Failed(const std::string& what, int err);
  void SetAside(const std::string& path, const std::string& name, const std::string& why);

  const std::string state_dir_;
  const std::string dir_;
  const bool sync_;
  const LogFn log_;
  DaemonStats& stats_;
  std::vector<std::string> queues_;  // each endpoint's folder
  std::optional<uint64_t> published_;
  std::atomic<bool> failing_{false};
};

// The folder of one endpoint's queue under push/: its exporter and a hash
// of its URL.
std::string SpoolQueueName(const PushEndpoint& endpoint);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_PUSH_SPOOL_H_

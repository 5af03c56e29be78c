// What the daemon's sinks write where (--jsonl-file, --tensorboard-dir).
#ifndef TORCHMON_SERVER_SINKS_SINK_OPTIONS_H_
#define TORCHMON_SERVER_SINKS_SINK_OPTIONS_H_

#include <cstddef>
#include <string>

namespace torchmon::server {

struct SinkOptions {
  std::string jsonl_file;       // --jsonl-file; empty: no JSON-lines sink
  std::string tensorboard_dir;  // --tensorboard-dir; empty: no TensorBoard sink
  // Records queued for the writer, per source, before the oldest are dropped.
  size_t queue_capacity = 100000;

  bool any() const { return !jsonl_file.empty() || !tensorboard_dir.empty(); }
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_SINKS_SINK_OPTIONS_H_

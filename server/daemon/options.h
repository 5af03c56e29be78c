// torchmond's command line: every flag, its default and its validation.
#ifndef TORCHMON_SERVER_DAEMON_OPTIONS_H_
#define TORCHMON_SERVER_DAEMON_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/core/aggregator.h"
#include "server/daemon/security_options.h"
#include "server/ingest/ingest_service.h"
#include "server/state/state_store.h"
#include "server/push/push_options.h"
#include "server/sinks/sink_options.h"

namespace torchmon::server {

// A gRPC listening address, resolved from a --listen value.
struct ListenAddress {
  enum class Kind { kUnix, kTcp };
  Kind kind = Kind::kTcp;
  std::string path;     // kUnix: absolute socket path
  std::string host;     // kTcp
  int port = 0;         // kTcp; 0 picks a free port
  std::string ToGrpcUri() const;
};

// Parses "unix:///abs/path", "host:port", ":port" (loopback), "[::1]:port".
absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& text);

struct DaemonOptions {
  std::vector<ListenAddress> listen;   // default: the default Unix socket
  std::string metrics_listen = "127.0.0.1:9464";
  AggregatorOptions aggregator;
  IngestServiceOptions ingest;
  // Largest gRPC message accepted; larger ones fail with RESOURCE_EXHAUSTED.
  int64_t max_message_bytes = 16 << 20;
  size_t max_events = 10000;
  // 0660 when --socket-group is given without --socket-mode.
  uint32_t socket_mode = 0600;
  int64_t drain_timeout_ms = 1000;
  SecurityOptions security;
  SinkOptions sinks;
  PushOptions push;  // --remote-write-url, --otlp-endpoint (docs/push.md)
  // --state-dir, --state-fsync: what survives a restart (docs/reliability.md).
  // An empty dir: nothing is kept.
  state::StateOptions state;
  bool live_page = true;  // --live-page: GET / on the metrics port (docs/live-page.md)  // --jsonl-file, --tensorboard-dir (docs/sinks.md)
  // --config FILE / --check-config FILE: the configuration file read, if any.
  std::string config_file;
  // --check-config: validate the configuration and exit; start nothing.
  bool check_config = false;
  bool help = false;
  bool version = false;
  bool verbose = false;  // --version --verbose: server/daemon/build_info.h
};

// Parses argv, after the configuration file that --config or --check-config
// names (config_file.h): flags on the command line override the file's
// settings, and --listen on the command line replaces the file's listen
// lines. On error the message names the flag (or FILE:LINE) and the bad
// value.
// Security flags are checked against each other and the listeners
// (ValidateSecurityOptions); files and names they give are only looked at
// when the daemon starts.
absl::StatusOr<DaemonOptions> ParseDaemonOptions(int argc, char** argv);

// The --help text, with the defaults.
std::string DaemonUsage();

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_OPTIONS_H_

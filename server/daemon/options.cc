#include "server/daemon/options.h"

#include <cstdlib>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/daemon/config_file.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {

std::string ListenAddress::ToGrpcUri() const {
  if (kind == Kind::kUnix) return absl::StrCat("unix://", path);
  return absl::StrCat(host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host,
                      ":", port);
}

absl::StatusOr<ListenAddress> ParseListenAddress(const std::string& text) {
  ListenAddress out;
  if (absl::StartsWith(text, "unix:")) {
    std::string path = text.substr(5);
    if (absl::StartsWith(path, "//")) path = path.substr(2);
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--listen \"", text, "\": a Unix socket needs an absolute path, e.g. unix:///run/torchmon/torchmond.sock"));
    }
    out.kind = ListenAddress::Kind::kUnix;
    out.path = path;
    return out;
  }
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen \"", text, "\" is neither unix:///path nor host:port"));
  }
  std::string host = text.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) host = host.substr(1, host.size() - 2);
  int port;
  if (!absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--listen \"", text, "\": port must be a number in [0, 65535]"));
  }
  out.kind = ListenAddress::Kind::kTcp;
  out.host = host.empty() ? "127.0.0.1" : host;  // loopback unless told otherwise
  out.port = port;
  return out;
}

std::string DaemonUsage() {
  return absl::StrCat(
      "Usage: torchmond [FLAGS]\n"
      "\n"
      "torchmond aggregates torchmon stat samples from training processes in\n"
      "epoch-aligned windows and serves them to Prometheus and to queries.\n"
      "\n"
      "Flags (DURATION: 500ms, 2s, 1m, 1h):\n"
      "  --config FILE          Read settings from FILE first: one per line, NAME = VALUE,\n"
      "                         NAME being any flag below without its -- (listen may\n"
      "                         repeat; # starts a comment). Flags given here override\n"
      "                         the file; --listen here replaces its listen lines.\n"
      "  --check-config FILE    Check FILE (and the files it names: TLS, token, auth) as\n"
      "                         --config would, print what is wrong or \"ok\", and exit\n"
      "                         (0 valid, 2 not). Binds nothing.\n"
      "  --listen ADDR          gRPC address, repeatable: unix:///abs/path or host:port\n"
      "                         (\":port\" binds 127.0.0.1; port 0 picks a free port).\n"
      "                         Default: unix://", protocol::DefaultSocketPath(), "\n"
      "  --metrics-listen HOST:PORT\n"
      "                         Prometheus /metrics endpoint, and /healthz for probes\n"
      "                         (\":port\" binds 127.0.0.1; port 0 picks a free port).\n"
      "                         Default: 127.0.0.1:9464\n"
      "  --grace DURATION       How long after its end a window stays open for late\n"
      "                         samples before it closes. Default: 2s\n"
      "  --series-ttl DURATION  Forget a series (and drop it from /metrics) after this\n"
      "                         long without samples. Default: 10m\n"
      "  --history N            Closed windows kept per series for queries. Default: 120\n"
      "  --max-skew DURATION    Samples stamped further than this in the daemon's future\n"
      "                         are counted as skewed. Default: 60s\n"
      "  --max-events N         Events kept in the queryable event log. Default: 10000\n"
      "  --max-series N         Series held at once; new ones past it are refused and\n"
      "                         counted. Default: 1000000\n"
      "  --max-series-per-client N\n"
      "                         Series one client stream may define (its cardinality\n"
      "                         budget). Default: 100000\n"
      "  --max-streams N        Ingest streams open at once. Default: 4096\n"
      "  --max-message-size BYTES\n"
      "                         Largest gRPC message accepted. Default: 16777216 (16 MiB)\n"
      "  --socket-mode OCTAL    File mode of Unix sockets. Default: 0600 (owner only),\n"
      "                         0660 with --socket-group\n"
      "  --drain-timeout DURATION\n"
      "                         On SIGTERM/SIGINT, how long open streams may keep\n"
      "                         delivering before they are cut. Default: 1s\n"
      "  --live-page on|off     The live page at / on the metrics port: series, recent\n"
      "                         windows plotted, events. Default: on (docs/live-page.md)\n"
      "  --jsonl-file PATH      Append every closed window and event to PATH, one JSON\n"
      "                         object per line; SIGHUP reopens it (log rotation).\n"
      "                         Default: none (docs/sinks.md)\n"
      "  --tensorboard-dir DIR  Write every closed window to TensorBoard event files,\n"
      "                         one run directory per label set under DIR.\n"
      "                         Default: none (docs/sinks.md)\n"
      "  --version              Print the version and exit.\n"
      "  -h, --help             Print this help and exit.\n"
      "\n",
      SecurityUsage(),
      "\n"
      "When every listener is up, torchmond prints one line to stdout:\n"
      "  torchmond ready grpc=<addr>[,<addr>...] metrics=<host:port>\n"
      "SIGTERM/SIGINT: stop accepting, close every open window (marked partial), exit 0.\n"
      "SIGHUP: reopen the --jsonl-file (the configuration is read only at start).\n");
}

namespace {

struct ParseState {
  bool socket_mode_given = false;
};

// Flags that take no value; every other flag takes exactly one.
bool IsSwitch(absl::string_view arg) { return arg == "-h" || arg == "--help" || arg == "--version"; }

// Applies one flag that takes a value (`arg` is "--name"); `next` yields the
// value. Sets `known` to false, and consumes nothing, if `arg` is no such
// flag. An error names the flag and the bad value.
absl::Status ApplyFlag(const std::string& arg,
                       absl::FunctionRef<absl::StatusOr<std::string>()> next,
                       DaemonOptions& options, ParseState& state, bool& known) {
  known = true;
  auto duration = [&]() -> absl::StatusOr<int64_t> {
    auto v = next();
    if (!v.ok()) return v.status();
    auto ms = protocol::ParseDurationMs(*v);
    if (!ms.ok()) return absl::InvalidArgumentError(absl::StrCat(arg, ": ", ms.status().message()));
    return *ms;
  };
  auto count = [&]() -> absl::StatusOr<int64_t> {
    auto v = next();
    if (!v.ok()) return v.status();
    int64_t n;
    if (!absl::SimpleAtoi(*v, &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat(arg, " \"", *v, "\" is not a positive integer"));
    }
    return n;
  };
#define TORCHMON_ASSIGN(lhs, expr)    \
  do {                                \
    auto _v = (expr);                 \
    if (!_v.ok()) return _v.status(); \
    lhs = *_v;                        \
  } while (0)
  if (arg == "--listen") {
    std::string text;
    TORCHMON_ASSIGN(text, next());
    ListenAddress addr;
    TORCHMON_ASSIGN(addr, ParseListenAddress(text));
    options.listen.push_back(addr);
  } else if (arg == "--metrics-listen") {
    TORCHMON_ASSIGN(options.metrics_listen, next());
    if (options.metrics_listen.rfind(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--metrics-listen \"", options.metrics_listen, "\" is not HOST:PORT"));
    }
    // Loopback unless told otherwise, as for --listen; CivetWeb would bind
    // every interface for a bare port.
    if (options.metrics_listen[0] == ':') options.metrics_listen.insert(0, "127.0.0.1");
  } else if (arg == "--grace") {
    TORCHMON_ASSIGN(options.aggregator.grace_ms, duration());
  } else if (arg == "--series-ttl") {
    TORCHMON_ASSIGN(options.aggregator.series_ttl_ms, duration());
    if (options.aggregator.series_ttl_ms < 1000) {
      return absl::InvalidArgumentError("--series-ttl must be at least 1s");
    }
  } else if (arg == "--history") {
    TORCHMON_ASSIGN(options.aggregator.history_windows, count());
  } else if (arg == "--max-skew") {
    TORCHMON_ASSIGN(options.aggregator.max_future_skew_ms, duration());
  } else if (arg == "--max-events") {
    TORCHMON_ASSIGN(options.max_events, count());
  } else if (arg == "--max-series") {
    TORCHMON_ASSIGN(options.aggregator.max_series, count());
  } else if (arg == "--max-series-per-client") {
    TORCHMON_ASSIGN(options.ingest.limits.max_series_per_stream, count());
  } else if (arg == "--max-streams") {
    TORCHMON_ASSIGN(options.ingest.max_streams, count());
  } else if (arg == "--max-message-size") {
    TORCHMON_ASSIGN(options.max_message_bytes, count());
    if (options.max_message_bytes < 4096 || options.max_message_bytes > (int64_t{1} << 30)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-message-size ", options.max_message_bytes,
          " is outside [4096, 1073741824] bytes"));
    }
  } else if (arg == "--live-page") {
    std::string text;
    TORCHMON_ASSIGN(text, next());
    if (text != "on" && text != "off") {
      return absl::InvalidArgumentError(
          absl::StrCat("--live-page \"", text, "\" is neither on nor off"));
    }
    options.live_page = text == "on";
  } else if (arg == "--jsonl-file" || arg == "--tensorboard-dir") {
    std::string path;
    TORCHMON_ASSIGN(path, next());
    if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(arg, " is empty"));
    (arg == "--jsonl-file" ? options.sinks.jsonl_file : options.sinks.tensorboard_dir) = path;
  } else if (arg == "--drain-timeout") {
    TORCHMON_ASSIGN(options.drain_timeout_ms, duration());
  } else if (arg == "--socket-mode") {
    std::string text;
    TORCHMON_ASSIGN(text, next());
    char* end = nullptr;
    const long mode = std::strtol(text.c_str(), &end, 8);
    if (text.empty() || *end != '\0' || mode < 0 || mode > 0777) {
      return absl::InvalidArgumentError(
          absl::StrCat("--socket-mode \"", text, "\" is not an octal file mode such as 0600"));
    }
    options.socket_mode = static_cast<uint32_t>(mode);
    state.socket_mode_given = true;
  } else if (IsSecurityFlag(arg)) {
    std::string text;
    TORCHMON_ASSIGN(text, next());
    if (absl::Status s = SetSecurityFlag(arg, text, options.security); !s.ok()) return s;
  } else if (arg == "--config" || arg == "--check-config") {
    // Read before every other flag (ParseDaemonOptions); only the value
    // is consumed here.
    std::string unused;
    TORCHMON_ASSIGN(unused, next());
  } else {
    known = false;
  }
#undef TORCHMON_ASSIGN
  return absl::OkStatus();
}

// Settings of the configuration file that are not flags one would set there.
bool IsCommandLineOnly(absl::string_view name) {
  return name == "help" || name == "h" || name == "version" || name == "config" ||
         name == "check-config";
}

}  // namespace

absl::StatusOr<DaemonOptions> ParseDaemonOptions(int argc, char** argv) {
  DaemonOptions options;
  ParseState state;
  // Splits argv[i] into the flag and an inline "=value"; a flag's value is
  // the inline one or the next argument.
  auto split = [&](int i, std::string& arg, std::optional<std::string>& inline_value) {
    arg = argv[i];
    inline_value.reset();
    if (absl::StartsWith(arg, "--")) {
      if (size_t eq = arg.find('='); eq != std::string::npos) {
        inline_value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
      }
    }
  };

  // First pass: the configuration file, and whether the command line has its
  // own listeners (which then replace the file's).
  bool listen_on_command_line = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg;
    std::optional<std::string> value;
    split(i, arg, value);
    if (IsSwitch(arg) || !absl::StartsWith(arg, "--")) continue;
    if (!value.has_value()) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      value = argv[++i];
    }
    if (arg == "--listen") listen_on_command_line = true;
    if (arg == "--config" || arg == "--check-config") {
      if (value->empty()) return absl::InvalidArgumentError(absl::StrCat(arg, " is empty"));
      if (!options.config_file.empty()) {
        return absl::InvalidArgumentError(
            "give one configuration file (--config FILE or --check-config FILE)");
      }
      options.config_file = *value;
      options.check_config = arg == "--check-config";
    }
  }
  if (!options.config_file.empty()) {
    auto settings = ReadConfigFile(options.config_file);
    if (!settings.ok()) return settings.status();
    for (const ConfigSetting& setting : *settings) {
      if (IsCommandLineOnly(setting.name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            setting.origin, ": ", setting.name, " is a command-line flag, not a setting"));
      }
      if (setting.name == "listen" && listen_on_command_line) continue;
      bool known;
      absl::Status s = ApplyFlag(
          absl::StrCat("--", setting.name),
          [&]() -> absl::StatusOr<std::string> { return setting.value; }, options, state, known);
      if (!known) {
        return absl::InvalidArgumentError(absl::StrCat(
            setting.origin, ": unknown setting \"", setting.name,
            "\" (every torchmond flag of --help, without its --, can be set)"));
      }
      if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(setting.origin, ": ", s.message()));
    }
  }

  // Second pass: the command line, which overrides the file.
  for (int i = 1; i < argc; ++i) {
    std::string arg;
    std::optional<std::string> value;
    split(i, arg, value);
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      continue;
    }
    if (arg == "--version") {
      options.version = true;
      continue;
    }
    auto next = [&]() -> absl::StatusOr<std::string> {
      if (value.has_value()) return *value;
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      return std::string(argv[++i]);
    };
    bool known = false;
    absl::Status s;
    if (absl::StartsWith(arg, "--")) s = ApplyFlag(arg, next, options, state, known);
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag \"", argv[i], "\" (see torchmond --help)"));
    }
    if (!s.ok()) return s;
  }
  // A client that went away is remembered as long as its series are.
  options.ingest.client_memory_ms = options.aggregator.series_ttl_ms;
  if (options.listen.empty()) {
    ListenAddress addr;
    addr.kind = ListenAddress::Kind::kUnix;
    addr.path = protocol::DefaultSocketPath();
    options.listen.push_back(addr);
  }
  // A group is named so that its members can connect.
  if (!options.security.socket_group.empty() && !state.socket_mode_given) options.socket_mode = 0660;
  if (absl::Status s = ValidateSecurityOptions(options); !s.ok()) return s;
  return options;
}

}  // namespace torchmon::server

#include "server/daemon/options.h"

#include <cstdlib>
#include <optional>

#include "absl/functional/function_ref.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
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

namespace {

struct ParseState {
  bool socket_mode_given = false;
};

absl::StatusOr<int64_t> Duration(absl::string_view flag, const std::string& value) {
  auto ms = protocol::ParseDurationMs(value);
  if (!ms.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, ": ", ms.status().message()));
  return *ms;
}

absl::StatusOr<int64_t> Count(absl::string_view flag, const std::string& value) {
  int64_t n;
  if (!absl::SimpleAtoi(value, &n) || n < 1) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " \"", value, "\" is not a positive integer"));
  }
  return n;
}

#define TORCHMON_ASSIGN(lhs, expr)    \
  do {                                \
    auto _v = (expr);                 \
    if (!_v.ok()) return _v.status(); \
    lhs = *_v;                        \
  } while (0)

using ApplyFn = absl::Status (*)(absl::string_view flag, const std::string& value,
                                 DaemonOptions& options, ParseState& state);
using ShowFn = std::string (*)(const DaemonOptions& defaults);

// A flag that sets a path or a name, which may not be empty.
template <std::string& (*Field)(DaemonOptions&)>
absl::Status SetText(absl::string_view flag, const std::string& value, DaemonOptions& options,
                     ParseState&) {
  if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  Field(options) = value;
  return absl::OkStatus();
}
std::string& JsonlFile(DaemonOptions& o) { return o.sinks.jsonl_file; }
std::string& TensorBoardDir(DaemonOptions& o) { return o.sinks.tensorboard_dir; }
std::string& StateDir(DaemonOptions& o) { return o.state.dir; }
template <std::string SecurityOptions::*Field>
std::string& Security(DaemonOptions& o) {
  return o.security.*Field;
}
template <std::string SecurityOptions::*Field>
constexpr ApplyFn SetSecurity = SetText<Security<Field>>;

// Where each plain duration or count setting lives in DaemonOptions.
int64_t& GraceMs(DaemonOptions& o) { return o.aggregator.grace_ms; }
int64_t& MaxSkewMs(DaemonOptions& o) { return o.aggregator.max_future_skew_ms; }
int64_t& DrainTimeoutMs(DaemonOptions& o) { return o.drain_timeout_ms; }
size_t& HistoryWindows(DaemonOptions& o) { return o.aggregator.history_windows; }
size_t& MaxEvents(DaemonOptions& o) { return o.max_events; }
size_t& MaxSeries(DaemonOptions& o) { return o.aggregator.max_series; }
size_t& MaxSeriesPerClient(DaemonOptions& o) { return o.ingest.limits.max_series_per_stream; }
int64_t& MaxStreams(DaemonOptions& o) { return o.ingest.max_streams; }
size_t& PushQueueWindows(DaemonOptions& o) { return o.push.queue_windows; }
int64_t& PushFlushTimeoutMs(DaemonOptions& o) { return o.push.flush_timeout_ms; }

// A repeatable flag naming a push endpoint of `protocol`.
template <PushProtocol protocol>
absl::Status AddPushEndpoint(absl::string_view flag, const std::string& value,
                             DaemonOptions& options, ParseState&) {
  PushEndpoint endpoint;
  TORCHMON_ASSIGN(endpoint, ParsePushEndpoint(protocol, flag, value));
  options.push.endpoints.push_back(std::move(endpoint));
  return absl::OkStatus();
}

// A flag whose value is a duration (in ms) stored as is.
template <int64_t& (*Field)(DaemonOptions&)>
absl::Status SetDuration(absl::string_view flag, const std::string& value, DaemonOptions& options,
                         ParseState&) {
  TORCHMON_ASSIGN(Field(options), Duration(flag, value));
  return absl::OkStatus();
}
template <int64_t& (*Field)(DaemonOptions&)>
std::string ShowDuration(const DaemonOptions& defaults) {
  return protocol::FormatDurationMs(Field(const_cast<DaemonOptions&>(defaults)));
}

// A flag whose value is a positive count stored as is.
template <typename T, T& (*Field)(DaemonOptions&)>
absl::Status SetCount(absl::string_view flag, const std::string& value, DaemonOptions& options,
                      ParseState&) {
  TORCHMON_ASSIGN(Field(options), Count(flag, value));
  return absl::OkStatus();
}
template <typename T, T& (*Field)(DaemonOptions&)>
std::string ShowCount(const DaemonOptions& defaults) {
  return absl::StrCat(Field(const_cast<DaemonOptions&>(defaults)));
}

// Every setting of torchmond, once: the command line parses by it, the
// configuration file takes the same names without "--" (config_file.h),
// and --help is written from it.
struct DaemonFlag {
  const char* name;  // "--grace"
  const char* value_name;  // "DURATION"; null for a flag without a value
  // The --help text, wrapped at 55 columns ("\n" between lines).
  const char* help;
  // The default --help states after the help, on the help's last line
  // ("Default: 2s") or on a line of its own; null for none.
  ShowFn show_default;
  bool default_on_own_line;
  // Null for a flag the parser handles itself (--config, --help, ...).
  ApplyFn apply;
  // Not a setting of the configuration file.
  bool command_line_only;
  // The section of --help it opens, if any.
  const char* section;
};

const DaemonFlag kDaemonFlags[] = {
    {"--config", "FILE",
     "Read settings from FILE first: one per line, NAME = VALUE,\n"
     "NAME being any flag below without its -- (listen may\n"
     "repeat; # starts a comment). Flags given here override\n"
     "the file; --listen here replaces its listen lines.",
     nullptr, false, nullptr, true, "Flags (DURATION: 500ms, 2s, 1m, 1h):"},
    {"--check-config", "FILE",
     "Check FILE (and the files it names: TLS, token, auth) as\n"
     "--config would, print what is wrong or \"ok\", and exit\n"
     "(0 valid, 2 not). Binds nothing.",
     nullptr, false, nullptr, true, nullptr},
    {"--listen", "ADDR",
     "gRPC address, repeatable: unix:///abs/path or host:port\n"
     "(\":port\" binds 127.0.0.1; port 0 picks a free port).",
     [](const DaemonOptions&) { return absl::StrCat("unix://", protocol::DefaultSocketPath()); },
     true,
     [](absl::string_view, const std::string& value, DaemonOptions& options, ParseState&) {
       ListenAddress addr;
       TORCHMON_ASSIGN(addr, ParseListenAddress(value));
       options.listen.push_back(addr);
       return absl::OkStatus();
     },
     false, nullptr},
    {"--metrics-listen", "HOST:PORT",
     "Prometheus /metrics endpoint, and /healthz for probes\n"
     "(\":port\" binds 127.0.0.1; port 0 picks a free port).",
     [](const DaemonOptions& d) { return d.metrics_listen; }, true,
     [](absl::string_view, const std::string& value, DaemonOptions& options, ParseState&) {
       if (value.rfind(':') == std::string::npos) {
         return absl::InvalidArgumentError(
             absl::StrCat("--metrics-listen \"", value, "\" is not HOST:PORT"));
       }
       // Loopback unless told otherwise, as for --listen; a bare port
       // would bind every interface.
       options.metrics_listen = value[0] == ':' ? absl::StrCat("127.0.0.1", value) : value;
       return absl::OkStatus();
     },
     false, nullptr},
    {"--grace", "DURATION",
     "How long after its end a window stays open for late\n"
     "samples before it closes.",
     ShowDuration<GraceMs>, false, SetDuration<GraceMs>, false, nullptr},
    {"--series-ttl", "DURATION",
     "Forget a series (and drop it from /metrics) after this\n"
     "long without samples.",
     [](const DaemonOptions& d) { return protocol::FormatDurationMs(d.aggregator.series_ttl_ms); },
     false,
     [](absl::string_view flag, const std::string& value, DaemonOptions& options, ParseState&) {
       TORCHMON_ASSIGN(options.aggregator.series_ttl_ms, Duration(flag, value));
       if (options.aggregator.series_ttl_ms < 1000) {
         return absl::InvalidArgumentError("--series-ttl must be at least 1s");
       }
       return absl::OkStatus();
     },
     false, nullptr},
    {"--history", "N", "Closed windows kept per series for queries.",
     ShowCount<size_t, HistoryWindows>, false, SetCount<size_t, HistoryWindows>, false, nullptr},
    {"--max-skew", "DURATION",
     "Samples stamped further than this in the daemon's future\n"
     "are counted as skewed.",
     [](const DaemonOptions& d) {  // in seconds, as clock skew is usually told
       const int64_t ms = d.aggregator.max_future_skew_ms;
       return ms % 1000 == 0 ? absl::StrCat(ms / 1000, "s") : protocol::FormatDurationMs(ms);
     },
     false, SetDuration<MaxSkewMs>, false, nullptr},
    {"--max-events", "N", "Events kept in the queryable event log.",
     ShowCount<size_t, MaxEvents>, false, SetCount<size_t, MaxEvents>, false, nullptr},
    {"--max-series", "N",
     "Series held at once; new ones past it are refused and\n"
     "counted.",
     ShowCount<size_t, MaxSeries>, false, SetCount<size_t, MaxSeries>, false, nullptr},
    {"--max-series-per-client", "N",
     "Series one client stream may define (its cardinality\n"
     "budget).",
     ShowCount<size_t, MaxSeriesPerClient>, false, SetCount<size_t, MaxSeriesPerClient>, false,
     nullptr},
    {"--max-streams", "N", "Ingest streams open at once.", ShowCount<int64_t, MaxStreams>, false,
     SetCount<int64_t, MaxStreams>, false, nullptr},
    {"--max-message-size", "BYTES", "Largest gRPC message accepted.",
     [](const DaemonOptions& d) {
       return absl::StrCat(d.max_message_bytes, " (", d.max_message_bytes >> 20, " MiB)");
     },
     false,
     [](absl::string_view flag, const std::string& value, DaemonOptions& options, ParseState&) {
       TORCHMON_ASSIGN(options.max_message_bytes, Count(flag, value));
       if (options.max_message_bytes < 4096 || options.max_message_bytes > (int64_t{1} << 30)) {
         return absl::InvalidArgumentError(absl::StrCat("--max-message-size ",
                                                        options.max_message_bytes,
                                                        " is outside [4096, 1073741824] bytes"));
       }
       return absl::OkStatus();
     },
     false, nullptr},
    {"--socket-mode", "OCTAL", "File mode of Unix sockets.",
     [](const DaemonOptions&) { return std::string("0600 (owner only),\n0660 with --socket-group"); },
     false,
     [](absl::string_view, const std::string& value, DaemonOptions& options, ParseState& state) {
       char* end = nullptr;
       const long mode = std::strtol(value.c_str(), &end, 8);
       if (value.empty() || *end != '\0' || mode < 0 || mode > 0777) {
         return absl::InvalidArgumentError(
             absl::StrCat("--socket-mode \"", value, "\" is not an octal file mode such as 0600"));
       }
       options.socket_mode = static_cast<uint32_t>(mode);
       state.socket_mode_given = true;
       return absl::OkStatus();
     },
     false, nullptr},
    {"--drain-timeout", "DURATION",
     "On SIGTERM/SIGINT, how long open streams may keep\n"
     "delivering before they are cut.",
     ShowDuration<DrainTimeoutMs>, false, SetDuration<DrainTimeoutMs>, false, nullptr},
    {"--live-page", "on|off",
     "The live page at / on the metrics port: series, recent\n"
     "windows plotted, events.",
     [](const DaemonOptions& d) {
       return absl::StrCat(d.live_page ? "on" : "off", " (docs/live-page.md)");
     },
     false,
     [](absl::string_view, const std::string& value, DaemonOptions& options, ParseState&) {
       if (value != "on" && value != "off") {
         return absl::InvalidArgumentError(
             absl::StrCat("--live-page \"", value, "\" is neither on nor off"));
       }
       options.live_page = value == "on";
       return absl::OkStatus();
     },
     false, nullptr},
    {"--state-dir", "DIR",
     "Keep the daemon's state in DIR: every batch is\n"
     "journaled before it is acknowledged, and a restart or\n"
     "a kill loses no acknowledged sample and splits no\n"
     "window.",
     [](const DaemonOptions&) {
       return std::string("none: nothing survives a restart\n(the packages: /var/lib/torchmon)");
     },
     true, SetText<StateDir>, false, nullptr},
    {"--state-fsync", "always|never|DURATION",
     "With --state-dir: fsync the journal after every write,\n"
     "never, or every DURATION. A killed daemon loses nothing\n"
     "either way; this is for a power loss.",
     [](const DaemonOptions&) { return std::string("1s"); }, false,
     [](absl::string_view, const std::string& value, DaemonOptions& options, ParseState&) {
       auto fsync = state::ParseFsync(value);
       if (!fsync.ok()) return fsync.status();
       options.state.fsync = fsync->first;
       if (fsync->first == state::StateOptions::Fsync::kInterval) {
         options.state.fsync_interval = fsync->second;
       }
       return absl::OkStatus();
     },
     false, nullptr},
    {"--jsonl-file", "PATH",
     "Append every closed window and event to PATH, one JSON\n"
     "object per line; SIGHUP reopens it (log rotation).",
     [](const DaemonOptions&) { return std::string("none (docs/sinks.md)"); }, true,
     SetText<JsonlFile>, false, nullptr},
    {"--tensorboard-dir", "DIR",
     "Write every closed window to TensorBoard event files,\n"
     "one run directory per label set under DIR.",
     [](const DaemonOptions&) { return std::string("none (docs/sinks.md)"); }, true,
     SetText<TensorBoardDir>, false, nullptr},
    {"--remote-write-url", "URL [OPTION=VALUE...]",
     "Push every closed window to URL with Prometheus\n"
     "remote-write 1.0; repeatable. Options after the URL:\n"
     "bearer_token_file=, basic_auth_username= with\n"
     "basic_auth_password_file=, ca_file=, cert_file= with\n"
     "key_file=, server_name=, timeout= (docs/push.md).",
     [](const DaemonOptions&) { return std::string("none"); }, false,
     AddPushEndpoint<PushProtocol::kRemoteWrite>, false, nullptr},
    {"--otlp-endpoint", "URL [OPTION=VALUE...]",
     "Push every closed window to URL with OTLP/HTTP\n"
     "(protobuf, gzipped); repeatable; the options of\n"
     "--remote-write-url. A URL without a path gets\n"
     "/v1/metrics.",
     [](const DaemonOptions&) { return std::string("none"); }, false,
     AddPushEndpoint<PushProtocol::kOtlp>, false, nullptr},
    {"--push-queue", "N",
     "Window ends each push endpoint holds while it cannot\n"
     "send; past it the oldest are dropped and counted.",
     ShowCount<size_t, PushQueueWindows>, false, SetCount<size_t, PushQueueWindows>, false,
     nullptr},
    {"--push-flush-timeout", "DURATION",
     "On SIGTERM/SIGINT, how long the push endpoints may keep\n"
     "sending what they hold; the rest is dropped and counted.",
     ShowDuration<PushFlushTimeoutMs>, false, SetDuration<PushFlushTimeoutMs>, false, nullptr},
    {"--version", nullptr, "Print the version and exit.", nullptr, false, nullptr, true, nullptr},
    {"--verbose", nullptr,
     "With --version: also the compiler, the C++ runtime, the\n"
     "libraries torchmond runs with and their versions.",
     nullptr, false, nullptr, true, nullptr},
    {"--help", nullptr, "Print this help and exit.", nullptr, false, nullptr, true, nullptr},
    {"--socket-group", "GROUP",
     "Group of the Unix sockets, whose mode then defaults to\n"
     "0660 (owner and group).",
     [](const DaemonOptions&) { return std::string("the daemon's group."); }, false,
     SetSecurity<&SecurityOptions::socket_group>, false, "Security (docs/security.md):"},
    {"--peer-labels", "on|off",
     "On Unix sockets, label every series and event with what\n"
     "the kernel says of the client: user, and from its\n"
     "cgroup slurm_job_id, slurm_step, k8s_pod_uid,\n"
     "container_id, systemd_unit. Clients may not send them,\n"
     "see only their own user's series and events, and may\n"
     "label only their own jobs (job=). TCP clients are\n"
     "named by their token or certificate. off: every label\n"
     "is the client's, every client sees everything.",
     [](const DaemonOptions& d) { return std::string(d.security.peer_labels ? "on" : "off"); },
     false,
     [](absl::string_view, const std::string& value, DaemonOptions& options, ParseState&) {
       if (value != "on" && value != "off") {
         return absl::InvalidArgumentError(
             absl::StrCat("--peer-labels \"", value, "\" is neither on nor off"));
       }
       options.security.peer_labels = value == "on";
       return absl::OkStatus();
     },
     false, nullptr},
    {"--admin-group", "GROUP",
     "With --peer-labels on: members of GROUP see every user's\n"
     "series and events in queries; every other client sees\n"
     "its own user's only.",
     [](const DaemonOptions&) { return std::string("root and the daemon's own user only"); },
     false, SetSecurity<&SecurityOptions::admin_group>, false, nullptr},
    {"--tls-cert", "FILE",
     "PEM certificate chain; with --tls-key, TCP listeners\n"
     "speak TLS only. Unix sockets stay plain.",
     [](const DaemonOptions&) { return std::string("no TLS"); }, false,
     SetSecurity<&SecurityOptions::tls_cert_file>, false, nullptr},
    {"--tls-key", "FILE", "PEM private key of --tls-cert; not readable by others.", nullptr, false,
     SetSecurity<&SecurityOptions::tls_key_file>, false, nullptr},
    {"--tls-client-ca", "FILE",
     "PEM CA certificates: TCP clients must present a\n"
     "certificate signed by one of them.",
     [](const DaemonOptions&) { return std::string("not asked"); }, false,
     SetSecurity<&SecurityOptions::tls_client_ca_file>, false, nullptr},
    {"--auth-token-file", "FILE",
     "Tokens, one per line, each alone or after a name\n"
     "(\"alice <token>\"): every gRPC call on every listener\n"
     "must carry one (\"authorization: Bearer <token>\"), or\n"
     "is refused UNAUTHENTICATED; a peer that keeps failing\n"
     "is slowed. Not readable by others. With --peer-labels\n"
     "on, a token's name is its TCP clients' user.",
     [](const DaemonOptions&) { return std::string("no token asked"); }, true,
     SetSecurity<&SecurityOptions::auth_token_file>, false, nullptr},
    {"--metrics-auth-file", "FILE",
     "\"user:password\" lines: scrapes of /metrics must carry\n"
     "one as HTTP basic auth, or get 401 (/healthz never\n"
     "asks). Not readable by others. --web-config-file's\n"
     "hashed basic_auth_users are to be preferred.",
     [](const DaemonOptions&) { return std::string("no authentication"); }, false,
     SetSecurity<&SecurityOptions::metrics_auth_file>, false, nullptr},
    {"--web-config-file", "FILE",
     "The Prometheus exporter toolkit's web configuration\n"
     "(YAML): tls_server_config (cert_file, key_file,\n"
     "client_auth_type, client_ca_file, min_version,\n"
     "max_version) puts /metrics and the live page behind\n"
     "TLS; basic_auth_users (bcrypt hashes) asks for a\n"
     "password. Not readable by others.",
     [](const DaemonOptions&) { return std::string("plain HTTP"); }, true,
     SetSecurity<&SecurityOptions::web_config_file>, false, nullptr},
    {"--user", "USER",
     "When started as root: switch to USER (and its groups)\n"
     "once every listener is bound and every file read.",
     [](const DaemonOptions&) { return std::string("keep the starting user (a warning as root)"); },
     true, SetSecurity<&SecurityOptions::user>, false, nullptr},
};

#undef TORCHMON_ASSIGN

const DaemonFlag* FindFlag(absl::string_view name) {
  if (name == "-h") name = "--help";
  for (const DaemonFlag& f : kDaemonFlags) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

// Flags that take no value; every other flag takes exactly one.
bool IsSwitch(absl::string_view arg) {
  const DaemonFlag* f = FindFlag(arg);
  return f != nullptr && f->value_name == nullptr;
}

}  // namespace

std::string DaemonUsage() {
  constexpr size_t kHelpColumn = 25;
  const DaemonOptions defaults;
  std::string out =
      "Usage: torchmond [FLAGS]\n"
      "\n"
      "torchmond aggregates torchmon stat samples from training processes in\n"
      "epoch-aligned windows and serves them to Prometheus and to queries.\n";
  const std::string indent(kHelpColumn, ' ');
  for (const DaemonFlag& f : kDaemonFlags) {
    if (f.section != nullptr) absl::StrAppend(&out, "\n", f.section, "\n");
    std::string head = absl::StrCat("  ", std::string(f.name) == "--help" ? "-h, " : "", f.name);
    if (f.value_name != nullptr) absl::StrAppend(&head, " ", f.value_name);
    std::string help = f.help;
    if (f.show_default != nullptr) {
      absl::StrAppend(&help, f.default_on_own_line ? "\n" : " ", "Default: ", f.show_default(defaults));
    }
    // The help from kHelpColumn, its first line beside the flag if there is room.
    out += head.size() + 1 < kHelpColumn ? head + std::string(kHelpColumn - head.size(), ' ')
                                         : head + "\n" + indent;
    absl::StrAppend(&out, absl::StrReplaceAll(help, {{"\n", "\n" + indent}}), "\n");
  }
  absl::StrAppend(
      &out,
      "\n"
      "When every listener is up, torchmond prints one line to stdout:\n"
      "  torchmond ready grpc=<addr>[,<addr>...] metrics=<host:port>\n"
      "SIGTERM/SIGINT: stop accepting, close every open window (marked partial), exit 0.\n"
      "SIGHUP: reopen the --jsonl-file, re-read --auth-token-file, --metrics-auth-file,\n"
      "--web-config-file with the files it names, and --tls-cert, --tls-key and\n"
      "--tls-client-ca (the rest of the configuration is read only at start).\n");
  return out;
}

namespace {

// Applies one flag that takes a value (`arg` is "--name") to `options`.
// Sets `known` to false if `arg` is no such flag. An error names the flag
// and the bad value.
absl::Status ApplyFlag(const std::string& arg, const std::string& value, DaemonOptions& options,
                       ParseState& state, bool& known) {
  const DaemonFlag* f = FindFlag(arg);
  known = f != nullptr && f->value_name != nullptr;
  if (!known || f->apply == nullptr) return absl::OkStatus();  // --config: read before the rest
  return f->apply(arg, value, options, state);
}

// Settings of the configuration file that are not flags one would set there.
bool IsCommandLineOnly(absl::string_view name) {
  if (name == "h") return true;
  const DaemonFlag* f = FindFlag(absl::StrCat("--", name));
  return f != nullptr && f->command_line_only;
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
      absl::Status s =
          ApplyFlag(absl::StrCat("--", setting.name), setting.value, options, state, known);
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
    if (arg == "--verbose") {
      options.verbose = true;
      continue;
    }
    const int at = i;
    bool known = absl::StartsWith(arg, "--") && FindFlag(arg) != nullptr;
    if (known && !value.has_value()) {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      value = argv[++i];
    }
    absl::Status s;
    if (known) s = ApplyFlag(arg, *value, options, state, known);
    if (!known) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag \"", argv[at], "\" (see torchmond --help)"));
    }
    if (!s.ok()) return s;
  }
  // The push exporters send each series' histogram as its window closes.
  options.aggregator.histograms_on_close = options.push.any();
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

#include "server/daemon/daemon.h"

#include <dirent.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/grpc_security_constants.h"
#include "grpc/support/log.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/security/auth_context.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "server/core/rate_limited_log.h"
#include "server/daemon/privileges.h"
#include "server/daemon/unix_acceptor.h"
#include "server/daemon/unix_socket.h"

namespace torchmon::server {
namespace {

constexpr auto kTickInterval = std::chrono::milliseconds(50);
constexpr int64_t kExpiryIntervalMs = 1000;
// Freed memory goes back to the OS this long after something was released
// (a stream ended, series expired: their teardown finishes meanwhile), and
// at most once per interval.
constexpr int64_t kTrimDelayMs = 1000;
constexpr int64_t kTrimIntervalMs = 10'000;
// At shutdown, how long after the drain calls may take to write their last
// messages (acks, the partial windows to watchers) before they are cut.
constexpr absl::Duration kFinalWritesCap = absl::Seconds(5);
// How long watchers get to read the last items before their streams end
// (LetWatchersRead).
constexpr absl::Duration kWatcherReadTime = absl::Milliseconds(250);

// glibc keeps freed memory for reuse: without this a daemon that outlives
// many jobs would keep the footprint of its busiest moment (a burst of
// definitions, a large query answer) for good. Measured on a daemon whose
// 100k series' clients had gone: RSS over baseline 2.8 KB per series before,
// 0.63-0.71 KB after (docs/performance.md).
void ReleaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void Log(const std::string& line) { std::cerr << "torchmond: " << line << std::endl; }

// What clients get wrong, logged rate-limited (docs/operating.md):
// refused TLS handshakes, tokens, streams and batch parts. One per process,
// never destroyed: gRPC's threads may log through it until the very end.
RateLimitedLog& ClientLog() {
  static const SystemClock clock;
  static RateLimitedLog* const log = new RateLimitedLog(clock, kClientLogIntervalMs, Log);
  return *log;
}

// gRPC's own log lines. Its errors are mostly about peers (a refused TLS
// handshake is one line per attempt): rate-limited like the rest, a kind per
// source line. Other severities (GRPC_VERBOSITY=info or debug, asked for
// when debugging) are written as gRPC writes them.
void GrpcLog(gpr_log_func_args* args) {
  const absl::string_view message = args->message != nullptr ? args->message : "";
  if (args->severity != GPR_LOG_SEVERITY_ERROR) {
    std::fprintf(stderr, "%s %s:%d] %s\n", gpr_log_severity_string(args->severity),
                 args->file != nullptr ? args->file : "?", args->line, args->message);
    return;
  }
  if (absl::StrContains(message, "Handshake failed")) {
    ClientLog().Report("refused a TLS handshake", message);
    return;
  }
  absl::string_view file = args->file != nullptr ? args->file : "?";
  if (const size_t slash = file.rfind('/'); slash != absl::string_view::npos) {
    file.remove_prefix(slash + 1);
  }
  ClientLog().Report(absl::StrCat("grpc error at ", file, ":", args->line), message);
}

// Who is calling, with --peer-labels (docs/security.md, "Who sees what"):
// on a Unix connection the daemon accepted, the user the kernel names (and
// the labels its cgroup vouches for); over TCP, the name of the token the
// call carries ("NAME TOKEN" in --auth-token-file), else the common name of
// its verified client certificate; else nobody known (user "").
struct Caller {
  std::string user;
  Labels labels;  // sorted
  bool admin = false;
};

// The "authorization" metadata of a call, if it carried one.
std::optional<absl::string_view> AuthorizationOf(const grpc::CallbackServerContext& call) {
  const auto& metadata = call.client_metadata();
  const auto it = metadata.find("authorization");
  if (it == metadata.end()) return std::nullopt;
  return absl::string_view(it->second.data(), it->second.size());
}

Caller CallerOf(const PeerDirectory& peers, const ServerSecurity* security,
                const grpc::CallbackServerContext& call) {
  Caller caller;
  if (auto identity = peers.Find(call.peer())) {
    caller.user = identity->user;
    caller.labels = identity->labels;
    caller.admin = identity->admin;
    return caller;
  }
  // The token from the call's own metadata: a connection may carry calls
  // of several tokens.
  if (const TokenAuthMetadataProcessor* check =
          security != nullptr ? security->token_check() : nullptr) {
    if (const std::optional<absl::string_view> authorization = AuthorizationOf(call)) {
      std::optional<std::string> name = check->TokenNameOf(*authorization);
      if (name.has_value() && !name->empty()) caller.user = *std::move(name);
    }
  }
  // The certificate is the connection's, verified in the handshake.
  if (const auto auth = call.auth_context(); caller.user.empty() && auth != nullptr &&
                                             auth->IsPeerAuthenticated()) {
    const std::vector<grpc::string_ref> names =
        auth->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME);
    if (!names.empty()) caller.user.assign(names.front().data(), names.front().size());
  }
  if (!caller.user.empty()) caller.labels = {{"user", caller.user}};
  return caller;
}

// The token check of --auth-token-file for the calls of the services that
// ServicesCheckingTokens names, asked first by each of their handlers,
// where gRPC's transport cannot: it knows the caller's peer, so that one
// that keeps failing is slowed and no other is (docs/security.md,
// "Throttling"), and it sees the calls of Unix connections the daemon
// accepted itself, which gRPC serves without transport security. A peer is
// its user on such a connection (the kernel's word: one user's clients share
// a throttle whatever their process), else its address without the port;
// the clients of a Unix socket gRPC accepted cannot be told apart and are
// not slowed.
CallGate TokenGate(const PeerDirectory* peers, const std::unique_ptr<ServerSecurity>* security) {
  return [peers, security](const grpc::CallbackServerContext& call) -> grpc::Status {
    const TokenAuthMetadataProcessor* check =
        *security != nullptr ? (*security)->token_check() : nullptr;
    if (check == nullptr) return grpc::Status::OK;
    const std::string peer = call.peer();
    std::string key;
    if (auto identity = peers->Find(peer)) {
      key = absl::StrCat("uid:", identity->credentials.uid);
    } else {
      key = TokenAuthMetadataProcessor::ThrottleKeyOf(peer);
    }
    return check->AdmitCall(key, AuthorizationOf(call), absl::Now());
  };
}

// The ingest options with the daemon's parts: its client log, its token
// gate `admit`, and with --peer-labels the labels the daemon vouches for
// about each stream's caller (`peers`: the Unix connections the daemon
// accepted itself), and `jobs`, which user each job label belongs to.
IngestServiceOptions WithDaemonParts(IngestServiceOptions options, CallGate admit,
                                     const PeerDirectory* peers,
                                     const std::unique_ptr<ServerSecurity>* security,
                                     JobClaims* jobs) {
  options.client_log = &ClientLog();
  options.admit = std::move(admit);
  if (peers != nullptr) {
    std::vector<std::string> reserved(std::begin(kVouchedLabelNames),
                                      std::end(kVouchedLabelNames));
    options.vouch = [peers, security, jobs,
                     reserved = std::move(reserved)](const grpc::CallbackServerContext& call) {
      Caller caller = CallerOf(*peers, security->get(), call);
      VouchedIdentity vouched;
      vouched.reserved = reserved;
      vouched.jobs = jobs;
      vouched.labels = std::move(caller.labels);
      vouched.owner = std::move(caller.user);
      return vouched;
    };
  }
  return options;
}

// With --peer-labels, who sees what in queries: a caller its own user's
// series and events; an admin (AdminRule) everything; a caller the daemon
// cannot identify only what no identified one sent (no user label).
QueryService::ScopeOfCall QueryScope(const PeerDirectory* peers,
                                     const std::unique_ptr<ServerSecurity>* security) {
  if (peers == nullptr) return nullptr;
  return [peers, security](const grpc::CallbackServerContext& call) -> std::optional<LabelMatcher> {
    const Caller caller = CallerOf(*peers, security->get(), call);
    if (caller.admin) return std::nullopt;
    return LabelMatcher{"user", caller.user, LabelMatcher::Op::kEqual};
  };
}

}  // namespace

namespace {

// --state-dir created or left by root: the daemon writes in it after
// dropping to --user.
absl::Status ChownStateDir(const std::string& dir, uid_t uid, gid_t gid) {
  // The directory and everything in it, its folders (skipped/, push/ and
  // the queues in it) included.
  std::vector<std::string> paths = {dir};
  for (size_t i = 0; i < paths.size(); ++i) {
    if (::lchown(paths[i].c_str(), uid, gid) != 0) {
      return absl::PermissionDeniedError(absl::StrCat("--state-dir: cannot give ", paths[i],
                                                      " to --user: ", std::strerror(errno)));
    }
    DIR* d = ::opendir(paths[i].c_str());  // fails for a file: nothing to walk
    if (d == nullptr) continue;
    while (const dirent* e = ::readdir(d)) {
      const absl::string_view name = e->d_name;
      if (name != "." && name != "..") paths.push_back(absl::StrCat(paths[i], "/", name));
    }
    ::closedir(d);
  }
  return absl::OkStatus();
}

}  // namespace

int StartFailureExitStatus(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kPermissionDenied:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kUnauthenticated:  // a token or password file's contents
      return kExitConfig;
    default:
      return kExitStartFailed;
  }
}

Daemon::Daemon(DaemonOptions options, const Clock& clock)
    : options_(std::move(options)),
      clock_(clock),
      aggregator_(options_.aggregator, clock_),
      events_(options_.max_events, options_.aggregator.series_ttl_ms, clock_),
      ingest_service_(aggregator_, events_, stats_, events_out_, clock_,
                      WithDaemonParts(options_.ingest, TokenGate(&peers_, &security_),
                                      options_.security.peer_labels ? &peers_ : nullptr,
                                      &security_, &jobs_)),
      query_service_(aggregator_, events_, stats_, windows_out_, events_out_,
                     QueryScope(options_.security.peer_labels ? &peers_ : nullptr, &security_),
                     TokenGate(&peers_, &security_)),
      health_service_({"", v1::Ingest::service_full_name(), v1::Query::service_full_name()},
                      TokenGate(&peers_, &security_)),
      exposition_(aggregator_, events_, stats_, TORCHMON_VERSION),
      live_page_(aggregator_, events_),
      timer_(io_),
      signals_(io_, SIGINT, SIGTERM),
      hangup_(io_, SIGHUP) {
  stats_.start_time_ms.store(clock_.NowMs(), std::memory_order_relaxed);
}

absl::Status CheckStartable(const DaemonOptions& options) {
  DaemonStats stats;
  auto security = ServerSecurity::Load(options.security, stats);
  if (!security.ok()) return security.status();
  if (!options.security.user.empty()) {
    if (auto user = LookUpUser(options.security.user); !user.ok()) return user.status();
  }
  for (const std::string* group : {&options.security.socket_group, &options.security.admin_group}) {
    if (group->empty()) continue;
    if (auto gid = LookUpGroup(*group); !gid.ok()) return gid.status();
  }
  if (absl::Status s = SinkWriter::Check(options.sinks); !s.ok()) return s;
  return CheckPushOptions(options.push);
}

Daemon::~Daemon() {
  for (auto& acceptor : acceptors_) acceptor->Stop();
  if (server_) server_->Shutdown(std::chrono::system_clock::now());
}

absl::Status Daemon::Start() {
  const bool as_root = geteuid() == 0;
  gpr_set_log_function(GrpcLog);
  auto security = ServerSecurity::Load(options_.security, stats_, &ClientLog());
  if (!security.ok()) return security.status();
  security_ = *std::move(security);
  for (const std::string& warning :
       SecurityWarnings(options_, as_root, security_->metrics_protection())) {
    Log(absl::StrCat("warning: ", warning));
  }
  // The sinks subscribe before anything can be published, and open their
  // files before privileges are dropped.
  if (options_.sinks.any()) {
    auto sinks = SinkWriter::Start(options_.sinks, windows_out_, events_out_, stats_, Log);
    if (!sinks.ok()) return sinks.status();
    sinks_ = *std::move(sinks);
  }
  // Sockets belong to the user the daemon will run as, so that it can still
  // remove them at exit after --user.
  std::optional<UserIdentity> run_as;
  SocketOwner owner{geteuid(), getegid(), false};
  if (!options_.security.user.empty()) {
    auto user = LookUpUser(options_.security.user);
    if (!user.ok()) return user.status();
    if (absl::Status s = CheckCanSwitchTo(*user); !s.ok()) return s;
    run_as = *user;
    owner.uid = user->uid;
    owner.gid = user->gid;
  }
  if (!options_.security.socket_group.empty()) {
    auto gid = LookUpGroup(options_.security.socket_group);
    if (!gid.ok()) return gid.status();
    owner.gid = *gid;
    owner.group_given = true;
  }
  {
    // The pass lock from the restore to the first Publish: the store's
    // snapshots start with the restore and take this lock (the barrier
    // below), so none reads pusher_ while it is set, and none seals the
    // journal's closes past the push mark before their windows are queued.
    absl::MutexLock publishing(&publish_mu_);
    std::unique_ptr<PushSpool> spool;
    std::vector<ClosedWindow> republish;
    if (!options_.state.dir.empty()) {
      // Restored before anything is served: no batch is applied to a state
      // that is not yet the one the last daemon acknowledged.
      auto store = state::StateStore::Open(options_.state, Log, &stats_);
      if (!store.ok()) return store.status();
      state_ = *std::move(store);
      if (options_.push.any()) {
        auto opened = PushSpool::Open(options_.state.dir, options_.push.endpoints,
                                      options_.state.fsync == state::StateOptions::Fsync::kAlways,
                                      Log, stats_);
        if (!opened.ok()) return opened.status();
        spool = *std::move(opened);
        state_->SetSnapshotBarrier(
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
              publish_mu_.Lock();
              if (pusher_) pusher_->AwaitWritten();
            },
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { publish_mu_.Unlock(); });
      }
      // A directory that cannot be written cannot change owner either: the
      // restore below reads it as root.
      if (run_as && as_root && state_->writable_at_start()) {
        if (absl::Status s = ChownStateDir(options_.state.dir, run_as->uid, run_as->gid); !s.ok()) {
          return s;
        }
      }
      // The windows of closes past the push queues' mark were not yet
      // written to them: the replay closes them again, for the pusher.
      const uint64_t republish_after =
          spool != nullptr && spool->published().has_value() ? *spool->published() : UINT64_MAX;
      state::RestoreReport restored =
          state_->Restore(aggregator_, ingest_service_.clients(), republish_after);
      republish = std::move(restored.republish);
      ingest_service_.SetJournal(state_.get());
      for (const std::string& skipped : restored.skipped)
        Log(absl::StrCat("state: skipped ", skipped));
      Log(absl::StrCat("state: restored ", aggregator_.series_count(), " series and ",
                       aggregator_.open_windows(), " open windows from ", options_.state.dir,
                       restored.snapshot_loaded ? "" : " (no snapshot: a new state)", ", ",
                       restored.records_replayed, " journal records replayed, in ",
                       absl::FormatDuration(restored.took),
                       "; windows whose grace ended meanwhile close now"));
    }
    if (options_.push.any()) {
      if (spool != nullptr && !spool->published().has_value()) {
        // New queues: from here on every pass is either in the journal after
        // the mark or in the queues.
        spool->MarkPublished(state_->sealed_position());
      }
      auto pusher =
          Pusher::Start(options_.push, stats_, clock_, Log, TORCHMON_VERSION, std::move(spool));
      if (!pusher.ok()) return pusher.status();
      pusher_ = *std::move(pusher);
      if (!republish.empty()) {
        Log(absl::StrCat(
            "push: ", republish.size(),
            " series windows closed before the restart but not yet queued: queued now"));
        pusher_->Publish(std::move(republish), state_->sealed_position());
      }
    }
  }
  // Who sees every user's series (--peer-labels): root, the user the
  // daemon runs as, and --admin-group's members.
  AdminRule admins{owner.uid, std::nullopt};
  if (!options_.security.admin_group.empty()) {
    auto gid = LookUpGroup(options_.security.admin_group);
    if (!gid.ok()) return gid.status();
    admins.gid = *gid;
  }

  // Health checking and reflection (grpc++'s grpc.reflection.v1alpha, a
  // process-wide switch read when the builder is made) let generic tools
  // work (docs/grpc-tooling.md). They are served like every other service:
  // on every listener, over TLS where it is on, and behind the token check
  // of --auth-token-file, which runs in the transport for every call.
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::vector<std::unique_ptr<int>> ports;
  for (const ListenAddress& addr : options_.listen) {
    ports.push_back(std::make_unique<int>(0));
    if (addr.kind == ListenAddress::Kind::kUnix) {
      std::vector<std::string> warnings;
      if (absl::Status s = PrepareUnixSocket(addr.path, owner, &warnings); !s.ok()) return s;
      for (const std::string& warning : warnings) Log(absl::StrCat("warning: ", warning));
      if (options_.security.peer_labels) {
        // Accepted here, each connection's peer looked at, then handed to
        // gRPC (unix_acceptor.h).
        auto acceptor = UnixAcceptor::Listen(addr.path, options_.socket_mode, owner);
        if (!acceptor.ok()) return acceptor.status();
        acceptors_.push_back(*std::move(acceptor));
        continue;
      }
    }
    builder.AddListeningPort(addr.ToGrpcUri(), security_->CredentialsFor(addr), ports.back().get());
  }
  builder.RegisterService(&ingest_service_);
  builder.RegisterService(&query_service_);
  builder.RegisterService(&health_service_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options_.max_message_bytes));
  {
    // gRPC binds a Unix socket with the mode the umask leaves and only then
    // can it be chmod-ed: under this umask it is owner-only meanwhile.
    ScopedUmask owner_only(0177);
    server_ = builder.BuildAndStart();
  }
  if (!server_) {
    std::vector<std::string> uris;
    for (const ListenAddress& addr : options_.listen) uris.push_back(addr.ToGrpcUri());
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", absl::StrJoin(uris, ", "), " (address in use or not permitted?",
        options_.security.tls() ? " do --tls-cert and --tls-key belong together?" : "", ")"));
  }
  for (size_t i = 0; i < options_.listen.size(); ++i) {
    const ListenAddress& addr = options_.listen[i];
    if (addr.kind == ListenAddress::Kind::kUnix) {
      // With --peer-labels, UnixAcceptor::Listen finished the socket.
      if (!options_.security.peer_labels) {
        if (absl::Status s = FinishUnixSocket(addr.path, options_.socket_mode, owner); !s.ok()) {
          return s;
        }
      }
      grpc_addresses_.push_back(addr.ToGrpcUri());
    } else {
      if (*ports[i] == 0) {
        return absl::UnavailableError(absl::StrCat("cannot listen on ", addr.ToGrpcUri()));
      }
      ListenAddress bound = addr;
      bound.port = *ports[i];
      grpc_addresses_.push_back(bound.ToGrpcUri());
    }
  }

  auto metrics = MetricsHttpServer::Start(options_.metrics_listen, exposition_, stats_,
                                          security_->metrics_auth(),
                                          options_.live_page ? &live_page_ : nullptr,
                                          security_->metrics_https());
  if (!metrics.ok()) return metrics.status();
  metrics_server_ = *std::move(metrics);
  // Last: everything that needs root (ports, files, chown) is done.
  if (run_as.has_value()) {
    if (absl::Status s = security_->GiveFilesTo(run_as->uid, run_as->gid); !s.ok()) return s;
    if (absl::Status s = DropPrivileges(*run_as); !s.ok()) return s;
  }
  for (auto& acceptor : acceptors_) {
    acceptor->Start(server_.get(), &peers_, admins, [this](absl::string_view why) {
      stats_.connections_unidentified.fetch_add(1, std::memory_order_relaxed);
      ClientLog().Report("closed a Unix connection whose peer could not be identified", why);
    });
  }
  metrics_server_->SetServingState(ServingState::kServing);
  health_service_.SetServing(true);
  return absl::OkStatus();
}

std::string Daemon::ReadyLine() const {
  return absl::StrCat("torchmond ready grpc=", absl::StrJoin(grpc_addresses_, ","),
                      " metrics=", metrics_server_->address());
}

void Daemon::PublishClosed(const ClosedWindow& window) {
  stats_.windows_closed.fetch_add(1, std::memory_order_relaxed);
  stats_.watch_items_dropped.fetch_add(windows_out_.Publish(window), std::memory_order_relaxed);
}

void Daemon::CloseDueWindows() {
  absl::MutexLock publishing(&publish_mu_);
  std::vector<ClosedWindow> pushed;
  aggregator_.CloseDueWindows([&](const ClosedWindow& w) {
    PublishClosed(w);
    if (pusher_) pushed.push_back(w);
  });
  if (pusher_) pusher_->Publish(std::move(pushed), state_ ? state_->sealed_position() : 0);
}

void Daemon::ScheduleTick() {
  timer_.expires_after(kTickInterval);
  timer_.async_wait([this](const boost::system::error_code& ec) {
    // A tick that had already fired when the stop came must not schedule
    // the next one: cancel() only aborts waits still pending, and io_ would
    // then run for ever.
    if (ec || stopping_) return;
    Tick();
    ScheduleTick();
  });
}

void Daemon::Tick() {
  CloseDueWindows();
  ClientLog().Flush();
  const int64_t now = clock_.NowMs();
  if (now >= next_expiry_ms_) {
    next_expiry_ms_ = now + kExpiryIntervalMs;
    stats_.series_expired.fetch_add(aggregator_.ExpireIdleSeries(), std::memory_order_relaxed);
    events_.ExpireIdle();
    ingest_service_.ExpireIdleClients();
  }
  // Released since the last trim: streams that ended, series that expired.
  const uint64_t released =
      stats_.ingest_streams_total.load(std::memory_order_relaxed) -
      static_cast<uint64_t>(stats_.ingest_streams_active.load(std::memory_order_relaxed)) +
      stats_.series_expired.load(std::memory_order_relaxed);
  if (released != released_seen_) {
    released_seen_ = released;
    trim_due_ms_ = std::max(now + kTrimDelayMs, last_trim_ms_ + kTrimIntervalMs);
  }
  if (trim_due_ms_ != 0 && now >= trim_due_ms_) {
    trim_due_ms_ = 0;
    last_trim_ms_ = now;
    ReleaseFreedMemory();
  }
}

void Daemon::RequestStop() {
  boost::asio::post(io_, [this] {
    stopping_ = true;
    signals_.cancel();
    hangup_.cancel();
    timer_.cancel();
  });
}

void Daemon::WaitForHangup() {
  hangup_.async_wait([this](const boost::system::error_code& ec, int /*signal*/) {
    if (ec || stopping_) return;  // cancelled: stopping
    if (sinks_) {
      Log("received Hangup; reopening the sink files");
      sinks_->Reopen();
    } else {
      Log("received Hangup (the configuration is read only at start; SIGHUP re-reads the "
          "credential files and reopens the sink files)");
    }
    size_t failed = 0;
    for (const std::string& line : security_->Reload(options_.security, &failed)) Log(line);
    stats_.reloads_failed.fetch_add(failed, std::memory_order_relaxed);
    WaitForHangup();
  });
}

void Daemon::Run() {
  signals_.async_wait([this](const boost::system::error_code& ec, int signal) {
    if (!ec) Log(absl::StrCat("received ", strsignal(signal), "; shutting down"));
    stopping_ = true;
    hangup_.cancel();
    timer_.cancel();
  });
  WaitForHangup();
  ScheduleTick();
  io_.run();
  Shutdown();
}

void Daemon::LetWatchersRead(absl::Time cap) {
  if (stats_.watchers_active.load(std::memory_order_relaxed) == 0) return;
  // Once a watch stream ends, gRPC closes the connection; a client that has
  // not yet read what was written before then, and writes to the connection
  // meanwhile (an HTTP/2 ping or window update), sees the call fail
  // UNAVAILABLE "Broken pipe" and loses the unread windows. So the watchers
  // first hand every queued item to gRPC, then the clients get a moment to
  // read them, and only then do the streams end.
  windows_out_.AwaitTaken(cap);
  events_out_.AwaitTaken(cap);
  absl::SleepFor(std::min(kWatcherReadTime, std::max(cap - absl::Now(), absl::ZeroDuration())));
}

void Daemon::Shutdown() {
  // Draining from here on, first of all: health watchers (load balancers)
  // are told NOT_SERVING and /healthz answers 503 while the streams drain.
  // New calls, health checks included, are refused from the next line on.
  // /healthz first: whoever a watcher tells NOT_SERVING then finds 503 too.
  metrics_server_->SetServingState(ServingState::kShuttingDown);
  health_service_.SetServing(false);
  // No connection is handed to gRPC once its server shuts down.
  for (auto& acceptor : acceptors_) acceptor->Stop();
  // Stop accepting calls. Open ingest streams get drain_timeout to end by
  // themselves (clients finishing), then are ended; watchers end once they
  // have written the partial windows. Shutdown returns when every call has
  // ended; only a call stuck past the cap (a watcher that stopped reading)
  // is cancelled.
  const absl::Duration drain = absl::Milliseconds(options_.drain_timeout_ms);
  const absl::Time drain_end = absl::Now() + drain;
  std::thread stopper([this, drain_end] {
    server_->Shutdown(absl::ToChronoTime(drain_end + kFinalWritesCap));
  });
  ingest_service_.AwaitNoStreams(drain_end);
  // Streams still open now get their next batch refused, unacknowledged, so
  // their clients keep it for the next daemon; nothing is applied after the
  // windows are closed below, so no accepted sample misses them.
  ingest_service_.StopApplying();
  CloseDueWindows();
  size_t partial_count = 0;
  bool state_kept = true;
  if (state_ != nullptr) {
    // The open windows stay open, in the state: the next daemon closes
    // each once, whole, on time.
    if (absl::Status s = state_->Close(); !s.ok()) {
      state_kept = false;
      Log(absl::StrCat("state: the stop's snapshot failed (", s.message(),
                       "); the next daemon restores the last one and the journal"));
    }
  } else {
    const std::vector<ClosedWindow> partial = aggregator_.CloseAllWindows();
    partial_count = partial.size();
    for (const ClosedWindow& w : partial) PublishClosed(w);
    if (pusher_) pusher_->Publish(partial);
  }
  // Watchers end once they have written what is queued, health watchers
  // too (they were sent NOT_SERVING when the drain began).
  LetWatchersRead(drain_end + kFinalWritesCap);
  windows_out_.Close();
  events_out_.Close();
  // The sinks write what is queued, the partial windows included, and close.
  if (sinks_) sinks_->Finish();
  // The push endpoints send what they hold, for --push-flush-timeout.
  if (pusher_) pusher_->Finish();
  health_service_.Shutdown();
  stopper.join();
  server_->Wait();
  ClientLog().Flush(/*everything=*/true);
  Log(state_ != nullptr
          ? absl::StrCat("stopped: ", aggregator_.series_count(), " series and ",
                         aggregator_.open_windows(), " open windows",
                         state_kept ? " kept in " : ", not kept in ", options_.state.dir)
          : absl::StrCat("stopped: ", aggregator_.series_count(), " series, ", partial_count,
                         " open windows closed as partial"));
  for (const ListenAddress& addr : options_.listen) {
    if (addr.kind == ListenAddress::Kind::kUnix) unlink(addr.path.c_str());
  }
  security_->RemoveFiles();
}

}  // namespace torchmon::server

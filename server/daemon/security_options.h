// torchmond's security flags: who may connect to the gRPC listeners and the
// /metrics endpoint, and as whom the daemon runs. docs/security.md is the
// user-facing reference; ParseDaemonOptions (options.h) calls in here.
//
// Everything here is pure (no I/O, no environment) and safe to call from any
// thread.
#ifndef TORCHMON_SERVER_DAEMON_SECURITY_OPTIONS_H_
#define TORCHMON_SERVER_DAEMON_SECURITY_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace torchmon::server {

struct DaemonOptions;

// Empty means "not given" for every field.
struct SecurityOptions {
  // --socket-group: group (name or number) of the Unix sockets; makes their
  // default mode 0660.
  std::string socket_group;
  // --tls-cert/--tls-key: PEM certificate chain and private key; TCP
  // listeners then speak TLS only.
  std::string tls_cert_file;
  std::string tls_key_file;
  // --tls-client-ca: PEM CA certificates; TCP clients must then present a
  // certificate signed by one of them.
  std::string tls_client_ca_file;
  // --auth-token-file: tokens, one per line; every gRPC call on every
  // listener must carry one as "authorization: Bearer <token>".
  std::string auth_token_file;
  // --metrics-auth-file: "user:password" lines; scrapes of /metrics must
  // carry one of them as HTTP basic auth.
  std::string metrics_auth_file;
  // --web-config-file: the exporter toolkit's web configuration
  // (server/auth/web_config.h): TLS and bcrypt-hashed basic-auth users for
  // /metrics and the live page.
  std::string web_config_file;
  // --user: user (name or number) to switch to once every listener is
  // bound and every file read, when started as root.
  std::string user;
  // --peer-labels (on unless turned off): torchmond accepts Unix socket
  // connections itself and labels every series and event of a stream with
  // what the kernel says of its client (user; Slurm job and step, Kubernetes
  // pod and container, systemd unit from its cgroup); clients may not send
  // those labels. TCP clients are named by their token or certificate.
  bool peer_labels = true;
  // --admin-group: with peer_labels, the group whose members (besides root
  // and the daemon's own user) see every user's series and events.
  std::string admin_group;

  bool tls() const { return !tls_cert_file.empty(); }
};

// Checks the security flags against each other and against the listeners:
// --tls-cert and --tls-key go together, --tls-client-ca needs them, TLS
// needs a TCP listener, --socket-group needs a Unix one, and a token is
// refused on a TCP listener other hosts can reach in clear text (anyone on
// the way could read it). InvalidArgument naming the flags and the value.
absl::Status ValidateSecurityOptions(const DaemonOptions& options);

// How /metrics is protected once the files are read: --web-config-file's
// content is not known from the flags alone.
struct MetricsProtection {
  bool tls = false;
  bool passwords = false;
  bool verified_clients = false;  // TLS client certificates checked against a CA
};

// Settings that work but expose the daemon, one sentence each, to be logged
// at start: TCP or /metrics reachable from other hosts without protection,
// a socket mode open to every user, running as root without --user.
std::vector<std::string> SecurityWarnings(const DaemonOptions& options, bool running_as_root,
                                          MetricsProtection metrics);
// The same, with /metrics protected by --metrics-auth-file or nothing.
std::vector<std::string> SecurityWarnings(const DaemonOptions& options, bool running_as_root);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_SECURITY_OPTIONS_H_

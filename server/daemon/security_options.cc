#include "server/daemon/security_options.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/daemon/options.h"
#include "server/daemon/unix_socket.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {
namespace {

// The host part of a --metrics-listen HOST:PORT, without IPv6 brackets.
std::string MetricsHost(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

}  // namespace

absl::Status ValidateSecurityOptions(const DaemonOptions& options) {
  const SecurityOptions& s = options.security;
  if (s.tls_cert_file.empty() != s.tls_key_file.empty()) {
    return absl::InvalidArgumentError(
        s.tls_cert_file.empty()
            ? absl::StrCat("--tls-key \"", s.tls_key_file, "\" needs --tls-cert (its certificate)")
            : absl::StrCat("--tls-cert \"", s.tls_cert_file,
                           "\" needs --tls-key (its private key)"));
  }
  if (!s.tls_client_ca_file.empty() && !s.tls()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-client-ca \"", s.tls_client_ca_file,
        "\" needs --tls-cert and --tls-key: client certificates are checked in a TLS handshake"));
  }
  bool has_tcp = false;
  bool has_unix = false;
  for (const ListenAddress& addr : options.listen) {
    if (addr.kind == ListenAddress::Kind::kUnix) {
      has_unix = true;
      continue;
    }
    has_tcp = true;
    if (!s.auth_token_file.empty() && !s.tls() && !protocol::IsLoopbackHost(addr.host)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--auth-token-file with --listen ", addr.ToGrpcUri(),
          ": that address is reachable from other hosts and, without --tls-cert/--tls-key, "
          "the token would cross the network in clear text for anyone on the way to copy; "
          "add TLS or listen on loopback"));
    }
  }
  if (s.tls() && !has_tcp) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-cert \"", s.tls_cert_file,
                     "\" secures TCP listeners and none is configured (add --listen HOST:PORT)"));
  }
  if (!s.admin_group.empty() && !s.peer_labels) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin-group \"", s.admin_group,
        "\" names who sees every user's series, and users are told apart only with "
        "--peer-labels on (remove --peer-labels off)"));
  }
  if (!s.socket_group.empty() && !has_unix) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--socket-group \"", s.socket_group,
        "\" sets the group of Unix sockets and none is configured (add --listen unix:///PATH)"));
  }
  return absl::OkStatus();
}

std::vector<std::string> SecurityWarnings(const DaemonOptions& options, bool running_as_root) {
  MetricsProtection metrics;
  metrics.passwords = !options.security.metrics_auth_file.empty();
  return SecurityWarnings(options, running_as_root, metrics);
}

std::vector<std::string> SecurityWarnings(const DaemonOptions& options, bool running_as_root,
                                          MetricsProtection metrics) {
  const SecurityOptions& s = options.security;
  std::vector<std::string> warnings;
  for (const ListenAddress& addr : options.listen) {
    if (addr.kind == ListenAddress::Kind::kUnix) {
      if ((options.socket_mode & 0007) != 0) {
        warnings.push_back(absl::StrCat(
            "--socket-mode ", ModeText(options.socket_mode), " lets every local user connect to ",
            addr.path,
            s.peer_labels ? " (each one sees and labels only its own series: --peer-labels on)"
            : s.auth_token_file.empty()
                ? " and, without --auth-token-file, read and send every series"
                : ""));
      }
      continue;
    }
    if (protocol::IsLoopbackHost(addr.host)) continue;
    if (!s.tls()) {
      warnings.push_back(absl::StrCat(
          "--listen ", addr.ToGrpcUri(),
          " is reachable from other hosts in clear text and without authentication: anyone who "
          "reaches it can read and send samples (add --tls-cert/--tls-key with --auth-token-file "
          "or --tls-client-ca)"));
    } else if (s.auth_token_file.empty() && s.tls_client_ca_file.empty()) {
      warnings.push_back(absl::StrCat(
          "--listen ", addr.ToGrpcUri(),
          " is reachable from other hosts and accepts every client (add --auth-token-file or "
          "--tls-client-ca)"));
    }
  }
  if (!protocol::IsLoopbackHost(MetricsHost(options.metrics_listen))) {
    const std::string where = absl::StrCat("--metrics-listen ", options.metrics_listen);
    if (!metrics.tls && !metrics.passwords) {
      warnings.push_back(absl::StrCat(
          where,
          " is reachable from other hosts without authentication: anyone who reaches it can "
          "read every series (add --web-config-file with tls_server_config and "
          "basic_auth_users)"));
    } else if (!metrics.tls) {
      warnings.push_back(absl::StrCat(
          where,
          " is reachable from other hosts over plain HTTP: the basic-auth password crosses the "
          "network in clear text (add tls_server_config with --web-config-file)"));
    } else if (!metrics.passwords && !metrics.verified_clients) {
      warnings.push_back(absl::StrCat(
          where,
          " is reachable from other hosts over TLS and accepts every client (add "
          "basic_auth_users, or client_auth_type RequireAndVerifyClientCert)"));
    }
  }
  if (running_as_root && s.user.empty()) {
    warnings.push_back(
        "running as root: pass --user NAME to switch to an unprivileged user once every "
        "listener is bound");
  }
  return warnings;
}

}  // namespace torchmon::server

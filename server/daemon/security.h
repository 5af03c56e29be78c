// The security flags turned into what the servers use: the credentials of
// each gRPC listener and the checker of /metrics scrapes, with the files the
// flags name read once, at start, before privileges are dropped.
#ifndef TORCHMON_SERVER_DAEMON_SECURITY_H_
#define TORCHMON_SERVER_DAEMON_SECURITY_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/security/tls_certificate_provider.h"
#include "server/daemon/options.h"
#include "server/daemon/security_options.h"
#include "server/daemon/watched_tls_files.h"
#include "server/auth/auth.h"
#include "server/exposition/https_context.h"
#include "server/core/daemon_stats.h"
#include "server/core/rate_limited_log.h"

namespace torchmon::server {

// Reads a file holding a secret (token, password, private key), at most
// 1 MiB. FailedPrecondition naming `flag` and the file if it is not a
// regular file, or if users outside its owner and group may read it or
// anyone but its owner may write it (the fix is in the message);
// PermissionDenied/NotFound if it cannot be opened.
absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view flag);

// Reads a file anyone may see (a certificate), at most 1 MiB. Errors name
// `flag` and the file.
absl::StatusOr<std::string> ReadPublicFile(const std::string& path, absl::string_view flag);

// The services whose every handler asks the daemon's token gate first
// (daemon.cc, TokenAuthMetadataProcessor::AdmitCall), where the caller's
// peer is known: the transport leaves their calls to it. Any other service
// (grpc++'s reflection) is checked in the transport.
std::vector<std::string> ServicesCheckingTokens();

// Thread-safe; the tokens and passwords change only by Reload.
class ServerSecurity {
 public:
  // Reads and checks every file `options` names. The error names the flag
  // and the file. `stats` counts refused calls and `client_log`, if not
  // null, logs them (rate-limited); both must outlive this.
  static absl::StatusOr<std::unique_ptr<ServerSecurity>> Load(
      const SecurityOptions& options, DaemonStats& stats, RateLimitedLog* client_log = nullptr);

  // SIGHUP: reads --auth-token-file, --metrics-auth-file, --web-config-file
  // (with the certificate, key and CA it names) and --tls-cert, --tls-key
  // and --tls-client-ca again, checked as at start. Each that passes
  // replaces the one in force for the calls, scrapes and TLS connections
  // that follow (for the gRPC listeners, from gRPC's next poll of the
  // copies, within a second; those under way are not interrupted); one
  // that does not leaves the old in force, whole. A change of what a
  // listener is (a web configuration adding or removing tls_server_config
  // or basic_auth_users, a client CA added or removed) is refused: it needs
  // a restart. Returns a line per file saying which, naming it (never
  // a secret); `failed` counts the files refused.
  std::vector<std::string> Reload(const SecurityOptions& options, size_t* failed);

  // Gives the files the daemon keeps for itself (the gRPC listeners' TLS
  // copies) to the user it is about to become, so that Reload can still
  // write them. Errors name the path.
  absl::Status GiveFilesTo(uid_t uid, gid_t gid);

  // Removes those files: the daemon exits without running destructors.
  // Once every listener is shut down.
  void RemoveFiles() { tls_files_.reset(); }

  // The credentials of the listener at `address`:
  //   TCP with --tls-cert: TLS, requiring a client certificate signed by
  //     --tls-client-ca if given, its material read from the copies Reload
  //     rewrites;
  //   otherwise, with --auth-token-file: gRPC's local credentials (Unix
  //     sockets, loopback TCP), the secure kind the token check needs; they
  //     add no handshake and no encryption, and refuse peers from other
  //     hosts;
  //   otherwise plain.
  // With --auth-token-file every one of them refuses calls without a token.
  std::shared_ptr<grpc::ServerCredentials> CredentialsFor(const ListenAddress& address) const;

  // The check of --auth-token-file, which also names a call's token; null
  // without a token file.
  const TokenAuthMetadataProcessor* token_check() const { return token_processor_.get(); }

  // What scrapes of /metrics must carry; null when no credentials are asked.
  std::shared_ptr<const BasicAuthChecker> metrics_auth() const { return metrics_auth_; }

  // The TLS of /metrics (--web-config-file's tls_server_config); null for
  // plain HTTP.
  std::shared_ptr<HttpsContext> metrics_https() const { return metrics_https_; }

  // How /metrics is protected, for SecurityWarnings.
  MetricsProtection metrics_protection() const { return metrics_protection_; }

 private:
  ServerSecurity() = default;
  // Reload's parts for --web-config-file and --tls-cert: their lines.
  std::string ReloadWebConfig(const std::string& path, size_t* failed);
  std::string ReloadGrpcTls(const SecurityOptions& options, size_t* failed);

  bool tls_ = false;
  bool tls_client_ca_ = false;
  // What the gRPC listeners' TLS reads: copies Reload rewrites, polled.
  std::unique_ptr<WatchedTlsFiles> tls_files_;
  std::shared_ptr<grpc::experimental::FileWatcherCertificateProvider> tls_provider_;
  std::shared_ptr<TokenAuthMetadataProcessor> token_processor_;
  std::shared_ptr<BasicAuthChecker> metrics_auth_;
  std::shared_ptr<HttpsContext> metrics_https_;
  MetricsProtection metrics_protection_;
  bool web_users_ = false;  // metrics_auth_ holds --web-config-file's users
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_SECURITY_H_

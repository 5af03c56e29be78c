// --web-config-file: the Prometheus exporter toolkit's web configuration
// (github.com/prometheus/exporter-toolkit, docs/web-configuration.md), the
// file node_exporter and every exporter built on the toolkit read, so one
// file and one Prometheus scrape_config serve them all:
//
//   tls_server_config:
//     cert_file: server.crt            # PEM chain; relative paths are
//     key_file: server.key             # relative to this file's folder
//     client_auth_type: RequireAndVerifyClientCert
//     client_ca_file: clients-ca.crt
//     min_version: TLS12               # TLS10..TLS13; max_version too
//   basic_auth_users:
//     prometheus: $2y$10$...           # bcrypt (htpasswd -nBC 10 prometheus)
//
// The parser is pure (no I/O): the daemon reads the file and the files it
// names (server/daemon/security.h). It reads the block-style YAML these
// files are written in: nested mappings of scalars, plain or quoted, and
// comments. A key the toolkit knows but torchmond does not implement
// (cipher_suites, client_allowed_sans, http_server_config, ...) is refused
// by name rather than ignored: a security setting silently dropped is worse
// than an error at start. docs/security.md is the user's reference.
#ifndef TORCHMON_SERVER_AUTH_WEB_CONFIG_H_
#define TORCHMON_SERVER_AUTH_WEB_CONFIG_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/auth/bcrypt.h"

namespace torchmon::server {

// tls_server_config.client_auth_type, with the toolkit's names and Go's
// crypto/tls meanings.
enum class ClientAuthType {
  kNoClientCert,                // no certificate asked for
  kRequestClientCert,           // asked for, not required, not verified
  kRequireAnyClientCert,        // required, not verified
  kVerifyClientCertIfGiven,     // not required; verified if sent
  kRequireAndVerifyClientCert,  // required and verified against client_ca_file
};

// A TLS protocol version, as min_version/max_version name it.
enum class TlsVersion { kTls10 = 10, kTls11 = 11, kTls12 = 12, kTls13 = 13 };

struct WebTlsConfig {
  // Paths as given, or joined to the configuration file's folder when
  // relative (the toolkit's rule).
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;  // empty: none
  ClientAuthType client_auth = ClientAuthType::kNoClientCert;
  TlsVersion min_version = TlsVersion::kTls12;  // the toolkit's defaults
  TlsVersion max_version = TlsVersion::kTls13;
};

struct WebConfig {
  std::optional<WebTlsConfig> tls;  // absent: plain HTTP
  // basic_auth_users, in the file's order; empty: no credentials asked.
  std::vector<std::pair<std::string, BcryptHash>> basic_auth_users;
};

// Parses the text of a web configuration file. `origin` names the file in
// messages and `base_dir` is its folder. InvalidArgument naming the line
// and the key for: YAML outside the subset above (flow collections other
// than an empty {}, sequences, anchors, block scalars, tabs in
// indentation), an unknown or unsupported key, a duplicate key, a missing
// cert_file or key_file, an unknown client_auth_type or TLS version,
// min_version above max_version, a client_ca_file with NoClientCert (the
// toolkit's rule) or a verifying client_auth_type without one (Go would
// verify against the system's CAs: rarely meant for client certificates),
// or a password that is not a bcrypt hash (which never appears in the
// message).
absl::StatusOr<WebConfig> ParseWebConfig(absl::string_view text, absl::string_view origin,
                                         absl::string_view base_dir);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_AUTH_WEB_CONFIG_H_

#include "server/daemon/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <optional>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "server/daemon/unix_socket.h"
#include "server/exposition/metrics_http_server.h"
#include "torchmon/v1/torchmon.grpc.pb.h"

namespace torchmon::server {

std::vector<std::string> ServicesCheckingTokens() {
  return {v1::Ingest::service_full_name(), v1::Query::service_full_name(),
          grpc::health::v1::Health::service_full_name()};
}

namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

absl::Status OpenError(const std::string& path, absl::string_view flag) {
  const std::string message = absl::StrCat(flag, " ", path, ": ", std::strerror(errno));
  if (errno == ENOENT) return absl::NotFoundError(message);
  return absl::PermissionDeniedError(message);
}

// Reads the regular file open on `fd` (closed here) whose stat is `st`.
absl::StatusOr<std::string> ReadOpenFile(int fd, const struct stat& st, const std::string& path,
                                         absl::string_view flag) {
  std::string content;
  if (static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(flag, " ", path, " is larger than ", kMaxFileBytes, " bytes"));
  }
  content.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = read(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status error = OpenError(path, flag);
      close(fd);
      return error;
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  content.resize(done);
  return content;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view flag, bool secret) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return OpenError(path, flag);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(flag, " ", path, " is not a regular file"));
  }
  // Checked on the file opened, not on the name: nothing can be swapped in
  // between.
  if (secret && (st.st_mode & (S_IRWXO | S_IWGRP)) != 0) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        flag, " ", path, " has mode ", ModeText(st.st_mode),
        ": a secret must be neither readable by other users nor writable by its group; "
        "chmod 600 it (or 640 with a group only the daemon is in)"));
  }
  return ReadOpenFile(fd, st, path, flag);
}

absl::Status ExpectPem(const std::string& content, absl::string_view marker,
                       const std::string& path, absl::string_view flag) {
  if (!absl::StrContains(content, "-----BEGIN ") || !absl::StrContains(content, marker)) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, " holds no PEM \"", marker, "\" block"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, absl::string_view flag) {
  return ReadFile(path, flag, /*secret=*/true);
}

absl::StatusOr<std::string> ReadPublicFile(const std::string& path, absl::string_view flag) {
  return ReadFile(path, flag, /*secret=*/false);
}

namespace {

absl::StatusOr<std::vector<BearerToken>> LoadTokens(const std::string& path) {
  auto text = ReadSecretFile(path, "--auth-token-file");
  if (!text.ok()) return text.status();
  return ParseTokenFile(*text, absl::StrCat("--auth-token-file ", path));
}

absl::StatusOr<BasicAuthChecker::Credentials> LoadBasicAuth(const std::string& path) {
  auto text = ReadSecretFile(path, "--metrics-auth-file");
  if (!text.ok()) return text.status();
  return ParseBasicAuthFile(*text, absl::StrCat("--metrics-auth-file ", path));
}

// One TLS file to read: its path, and how messages name it ("--tls-cert").
struct TlsFile {
  const std::string& path;
  std::string flag;
};

// Reads a certificate chain, its private key (a secret file) and, unless
// `ca.path` is empty, CA certificates, each checked for its PEM block.
// Errors name the flag and the file. Whether the key belongs to the
// certificate is checked by whoever builds a context from them.
absl::StatusOr<HttpsMaterial> ReadTlsMaterial(const TlsFile& cert, const TlsFile& key,
                                              const TlsFile& ca) {
  HttpsMaterial material;
  auto cert_pem = ReadPublicFile(cert.path, cert.flag);
  if (!cert_pem.ok()) return cert_pem.status();
  if (absl::Status s = ExpectPem(*cert_pem, "CERTIFICATE-----", cert.path, cert.flag); !s.ok()) {
    return s;
  }
  auto key_pem = ReadSecretFile(key.path, key.flag);
  if (!key_pem.ok()) return key_pem.status();
  if (absl::Status s = ExpectPem(*key_pem, "PRIVATE KEY-----", key.path, key.flag); !s.ok()) {
    return s;
  }
  material.cert_chain_pem = *std::move(cert_pem);
  material.key_pem = *std::move(key_pem);
  if (!ca.path.empty()) {
    auto ca_pem = ReadPublicFile(ca.path, ca.flag);
    if (!ca_pem.ok()) return ca_pem.status();
    if (absl::Status s = ExpectPem(*ca_pem, "CERTIFICATE-----", ca.path, ca.flag); !s.ok()) {
      return s;
    }
    material.client_ca_pem = *std::move(ca_pem);
  }
  material.cert_origin = absl::StrCat(cert.flag, " ", cert.path);
  material.key_origin = absl::StrCat(key.flag, " ", key.path);
  material.ca_origin = absl::StrCat(ca.flag, " ", ca.path);
  return material;
}

// A --web-config-file with the files its tls_server_config names.
struct WebConfigFiles {
  WebConfig config;
  std::optional<HttpsMaterial> tls;
};

absl::StatusOr<WebConfigFiles> LoadWebConfig(const std::string& path) {
  constexpr absl::string_view kFlag = "--web-config-file";
  auto text = ReadSecretFile(path, kFlag);
  if (!text.ok()) return text.status();
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  auto config = ParseWebConfig(*text, absl::StrCat(kFlag, " ", path), dir);
  if (!config.ok()) return config.status();
  WebConfigFiles files{*std::move(config), std::nullopt};
  if (!files.config.tls.has_value()) return files;
  const WebTlsConfig& tls = *files.config.tls;
  const std::string flag = absl::StrCat(kFlag, " ", path, ": tls_server_config.");
  auto material = ReadTlsMaterial({tls.cert_file, flag + "cert_file"},
                                  {tls.key_file, flag + "key_file"},
                                  {tls.client_ca_file, flag + "client_ca_file"});
  if (!material.ok()) return material.status();
  material->client_auth = tls.client_auth;
  material->min_version = tls.min_version;
  material->max_version = tls.max_version;
  files.tls = *std::move(material);
  return files;
}

// --tls-cert, --tls-key and --tls-client-ca, read and checked: PEM, modes,
// the key belonging to the certificate.
absl::StatusOr<HttpsMaterial> LoadGrpcTls(const SecurityOptions& options) {
  auto material = ReadTlsMaterial({options.tls_cert_file, "--tls-cert"},
                                  {options.tls_key_file, "--tls-key"},
                                  {options.tls_client_ca_file, "--tls-client-ca"});
  if (!material.ok()) return material.status();
  if (absl::Status s = CheckTlsMaterial(*material); !s.ok()) return s;
  return material;
}

bool VerifiesClients(ClientAuthType type) {
  return type == ClientAuthType::kRequireAndVerifyClientCert;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServerSecurity>> ServerSecurity::Load(
    const SecurityOptions& options, DaemonStats& stats, RateLimitedLog* client_log) {
  std::unique_ptr<ServerSecurity> security(new ServerSecurity());
  if (options.tls()) {
    auto pem = LoadGrpcTls(options);
    if (!pem.ok()) return pem.status();
    const char* tmpdir = std::getenv("TMPDIR");
    auto files = WatchedTlsFiles::Create(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp",
                                         *pem);
    if (!files.ok()) return files.status();
    security->tls_ = true;
    security->tls_client_ca_ = !pem->client_ca_pem.empty();
    security->tls_files_ = *std::move(files);
    // Polled every second; the files change only when Reload writes them.
    security->tls_provider_ = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
        security->tls_files_->key_path(), security->tls_files_->cert_path(),
        security->tls_client_ca_ ? security->tls_files_->ca_path() : "", 1);
  }
  if (!options.auth_token_file.empty()) {
    auto tokens = LoadTokens(options.auth_token_file);
    if (!tokens.ok()) return tokens.status();
    TokenAuthMetadataProcessor::OnRefused on_refused;
    if (client_log != nullptr) {
      on_refused = [client_log](absl::string_view why) {
        client_log->Report("refused a call without an accepted bearer token", why);
      };
    }
    security->token_processor_ = std::make_shared<TokenAuthMetadataProcessor>(
        std::make_shared<const BearerTokenChecker>(*std::move(tokens)), stats.rpcs_unauthenticated,
        stats.rpcs_throttled, std::move(on_refused), ServicesCheckingTokens());
  }
  if (!options.metrics_auth_file.empty()) {
    auto credentials = LoadBasicAuth(options.metrics_auth_file);
    if (!credentials.ok()) return credentials.status();
    security->metrics_auth_ = std::make_shared<BasicAuthChecker>(*std::move(credentials));
    security->metrics_protection_.passwords = true;
  }
  if (!options.web_config_file.empty()) {
    auto web = LoadWebConfig(options.web_config_file);
    if (!web.ok()) return web.status();
    if (!web->config.basic_auth_users.empty()) {
      if (security->metrics_auth_ != nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--web-config-file ", options.web_config_file, " has basic_auth_users and "
            "--metrics-auth-file is given too: keep one list of users (the hashed one)"));
      }
      security->metrics_auth_ =
          std::make_shared<BasicAuthChecker>(std::move(web->config.basic_auth_users));
      security->metrics_protection_.passwords = true;
      security->web_users_ = true;
    }
    if (web->tls.has_value()) {
      auto https = HttpsContext::Create(*web->tls, &stats.metrics_tls_refused);
      if (!https.ok()) return https.status();
      security->metrics_https_ = *std::move(https);
      security->metrics_protection_.tls = true;
      security->metrics_protection_.verified_clients = VerifiesClients(web->tls->client_auth);
    }
  }
  return security;
}


std::vector<std::string> ServerSecurity::Reload(const SecurityOptions& options, size_t* failed) {
  std::vector<std::string> lines;
  *failed = 0;
  if (token_processor_ != nullptr) {
    if (auto tokens = LoadTokens(options.auth_token_file); tokens.ok()) {
      const size_t n = tokens->size();
      token_processor_->Replace(std::make_shared<const BearerTokenChecker>(*std::move(tokens)));
      lines.push_back(absl::StrCat("re-read --auth-token-file ", options.auth_token_file, ": ", n,
                                   n == 1 ? " token" : " tokens", " in force"));
    } else {
      ++*failed;
      lines.push_back(absl::StrCat("error: ", tokens.status().message(),
                                   "; the tokens read before stay in force"));
    }
  }
  if (!options.metrics_auth_file.empty()) {
    if (auto credentials = LoadBasicAuth(options.metrics_auth_file); credentials.ok()) {
      const size_t n = credentials->size();
      metrics_auth_->Replace(*std::move(credentials));
      lines.push_back(absl::StrCat("re-read --metrics-auth-file ", options.metrics_auth_file,
                                   ": ", n, n == 1 ? " user" : " users", " in force"));
    } else {
      ++*failed;
      lines.push_back(absl::StrCat("error: ", credentials.status().message(),
                                   "; the users read before stay in force"));
    }
  }
  if (!options.web_config_file.empty()) {
    lines.push_back(ReloadWebConfig(options.web_config_file, failed));
  }
  if (tls_) lines.push_back(ReloadGrpcTls(options, failed));
  return lines;
}

std::string ServerSecurity::ReloadGrpcTls(const SecurityOptions& options, size_t* failed) {
  const auto refuse = [&](absl::string_view why) {
    ++*failed;
    return absl::StrCat("error: ", why,
                        "; the gRPC listeners' certificate read before stays in force");
  };
  auto pem = LoadGrpcTls(options);
  if (!pem.ok()) return refuse(pem.status().message());
  if (pem->client_ca_pem.empty() == tls_client_ca_) {
    return refuse("--tls-client-ca cannot be added or removed by a reload: restart torchmond");
  }
  if (absl::Status s = tls_files_->Replace(*pem); !s.ok()) return refuse(s.message());
  return absl::StrCat("re-read --tls-cert ", options.tls_cert_file, " and --tls-key ",
                      options.tls_key_file, tls_client_ca_ ? " and --tls-client-ca " : "",
                      tls_client_ca_ ? options.tls_client_ca_file : "",
                      ": in force for the TLS connections that start a second from now");
}

absl::Status ServerSecurity::GiveFilesTo(uid_t uid, gid_t gid) {
  return tls_files_ == nullptr ? absl::OkStatus() : tls_files_->GiveTo(uid, gid);
}

std::string ServerSecurity::ReloadWebConfig(const std::string& path, size_t* failed) {
  const auto refuse = [&](absl::string_view why) {
    ++*failed;
    return absl::StrCat("error: ", why, "; the web configuration read before stays in force");
  };
  auto web = LoadWebConfig(path);
  if (!web.ok()) return refuse(web.status().message());
  const bool has_users = !web->config.basic_auth_users.empty();
  if (has_users != web_users_ || web->tls.has_value() != (metrics_https_ != nullptr)) {
    return refuse(absl::StrCat("--web-config-file ", path,
                               " adds or removes tls_server_config or basic_auth_users, which "
                               "changes what /metrics is: restart torchmond for that"));
  }
  // Both parts are checked before either is put in force.
  if (web->tls.has_value()) {
    if (absl::Status s = metrics_https_->Replace(*web->tls); !s.ok()) return refuse(s.message());
  }
  const size_t users = web->config.basic_auth_users.size();
  if (has_users) metrics_auth_->Replace(std::move(web->config.basic_auth_users));
  return absl::StrCat("re-read --web-config-file ", path, ": ",
                      web->tls.has_value() ? "TLS certificate and client policy, " : "", users,
                      users == 1 ? " user" : " users", " in force");
}

std::shared_ptr<grpc::ServerCredentials> ServerSecurity::CredentialsFor(
    const ListenAddress& address) const {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (address.kind == ListenAddress::Kind::kTcp && tls_) {
    grpc::experimental::TlsServerCredentialsOptions tls(tls_provider_);
    tls.watch_identity_key_cert_pairs();
    if (tls_client_ca_) {
      tls.watch_root_certs();
      tls.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    } else {
      tls.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
    }
    credentials = grpc::experimental::TlsServerCredentials(tls);
  } else if (token_processor_ == nullptr) {
    return grpc::InsecureServerCredentials();
  } else if (address.kind == ListenAddress::Kind::kUnix) {
    credentials = grpc::experimental::LocalServerCredentials(UDS);
  } else {
    // ValidateSecurityOptions refused a token on plain TCP other hosts can
    // reach: this listener is loopback.
    credentials = grpc::experimental::LocalServerCredentials(LOCAL_TCP);
  }
  if (token_processor_ != nullptr) credentials->SetAuthMetadataProcessor(token_processor_);
  return credentials;
}

}  // namespace torchmon::server

#include "server/daemon/security.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace torchmon::server {
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
    char mode[16];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return absl::FailedPreconditionError(absl::StrCat(
        flag, " ", path, " has mode ", mode,
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

}  // namespace

absl::StatusOr<std::unique_ptr<ServerSecurity>> ServerSecurity::Load(
    const SecurityOptions& options, DaemonStats& stats, RateLimitedLog* client_log) {
  std::unique_ptr<ServerSecurity> security(new ServerSecurity());
  if (options.tls()) {
    auto cert = ReadPublicFile(options.tls_cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    if (absl::Status s = ExpectPem(*cert, "CERTIFICATE-----", options.tls_cert_file, "--tls-cert");
        !s.ok()) {
      return s;
    }
    auto key = ReadSecretFile(options.tls_key_file, "--tls-key");
    if (!key.ok()) return key.status();
    if (absl::Status s = ExpectPem(*key, "PRIVATE KEY-----", options.tls_key_file, "--tls-key");
        !s.ok()) {
      return s;
    }
    security->tls_ = true;
    security->tls_options_.pem_key_cert_pairs.push_back({*std::move(key), *std::move(cert)});
    security->tls_options_.client_certificate_request = GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE;
    if (!options.tls_client_ca_file.empty()) {
      auto ca = ReadPublicFile(options.tls_client_ca_file, "--tls-client-ca");
      if (!ca.ok()) return ca.status();
      if (absl::Status s =
              ExpectPem(*ca, "CERTIFICATE-----", options.tls_client_ca_file, "--tls-client-ca");
          !s.ok()) {
        return s;
      }
      security->tls_options_.pem_root_certs = *std::move(ca);
      security->tls_options_.client_certificate_request =
          GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
    }
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
        std::move(on_refused));
  }
  if (!options.metrics_auth_file.empty()) {
    auto credentials = LoadBasicAuth(options.metrics_auth_file);
    if (!credentials.ok()) return credentials.status();
    security->metrics_auth_ = std::make_shared<BasicAuthChecker>(*std::move(credentials));
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
  if (metrics_auth_ != nullptr) {
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
  if (tls_) {
    lines.push_back("the TLS certificate and key are read at start only: restart to change them");
  }
  return lines;
}

std::shared_ptr<grpc::ServerCredentials> ServerSecurity::CredentialsFor(
    const ListenAddress& address) const {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (address.kind == ListenAddress::Kind::kTcp && tls_) {
    credentials = grpc::SslServerCredentials(tls_options_);
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

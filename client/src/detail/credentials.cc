#include "detail/credentials.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/support/client_interceptor.h"
#include "torchmon/channel.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/protocol/socket_path.h"

namespace torchmon::detail {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;

// Adds the bearer token to the metadata of every call. One interceptor
// covers every channel kind, plain ones included, where gRPC's own call
// credentials would only ride on TLS.
class TokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit TokenInterceptor(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

class TokenInterceptorFactory final : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit TokenInterceptorFactory(const std::string& token)
      : header_(std::make_shared<const std::string>(absl::StrCat("Bearer ", token))) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* /*info*/) override {
    return new TokenInterceptor(header_);
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

// Reads a file of at most kMaxFileBytes. `what` names it in errors. With
// `mode`, stores the file's permission bits there.
absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view what,
                                     mode_t* mode = nullptr) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) {
    const std::string message =
        absl::StrCat("cannot read ", what, " ", path, ": ", std::strerror(errno));
    return errno == ENOENT ? absl::NotFoundError(message) : absl::PermissionDeniedError(message);
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    close(fd);
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, " is not a regular file of at most 1 MiB"));
  }
  if (mode != nullptr) *mode = st.st_mode & 07777;
  std::string content(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = read(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  close(fd);
  content.resize(done);
  return content;
}

void FillFromEnvironment(std::string& field, const char* variable) {
  if (!field.empty()) return;
  if (const char* value = std::getenv(variable); value != nullptr) field = value;
}

}  // namespace

ClientSecurity SecurityFromEnvironment(ClientSecurity security) {
  FillFromEnvironment(security.token_file, "TORCHMON_TOKEN_FILE");
  FillFromEnvironment(security.tls_ca_file, "TORCHMON_TLS_CA");
  FillFromEnvironment(security.tls_cert_file, "TORCHMON_TLS_CERT");
  FillFromEnvironment(security.tls_key_file, "TORCHMON_TLS_KEY");
  FillFromEnvironment(security.tls_server_name, "TORCHMON_TLS_SERVER_NAME");
  return security;
}

absl::StatusOr<std::string> ParseClientToken(absl::string_view text, absl::string_view origin) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    for (char c : line) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": a token may only hold printable ASCII characters without spaces"));
      }
    }
    return std::string(line);
  }
  return absl::InvalidArgumentError(absl::StrCat(origin, " holds no token"));
}

TargetInfo ParseTarget(absl::string_view target) {
  TargetInfo info;
  absl::string_view rest = target;
  if (absl::ConsumePrefix(&rest, "unix:")) {
    absl::ConsumePrefix(&rest, "//");
    info.is_unix = true;
    info.unix_path = std::string(rest);
    info.local = true;
    return info;
  }
  // gRPC's other schemes: "dns:[//authority/]host:port", "ipv4:", "ipv6:".
  // A DNS authority is the server that names the host: whatever it says
  // "localhost" is, it is not this machine's word.
  bool dns_authority = false;
  if (absl::ConsumePrefix(&rest, "dns:")) {
    if (absl::ConsumePrefix(&rest, "//")) {
      const size_t slash = std::min(rest.find('/'), rest.size());
      dns_authority = slash > 0;
      rest = rest.substr(slash);
    }
    absl::ConsumePrefix(&rest, "/");
  } else if (!absl::ConsumePrefix(&rest, "ipv4:")) {
    absl::ConsumePrefix(&rest, "ipv6:");
  }
  if (absl::StartsWith(rest, "[")) {
    const size_t close = rest.find(']');
    if (close != absl::string_view::npos) info.host = std::string(rest.substr(1, close - 1));
  } else {
    info.host = std::string(rest.substr(0, rest.rfind(':')));
  }
  // A list ("ipv4:a:1,b:2") counts as local only if it is one address.
  info.local = !dns_authority && !absl::StrContains(rest, ',') && protocol::IsLoopbackHost(info.host);
  return info;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& target,
                                                             const ClientSecurity& security,
                                                             grpc::ChannelArguments args,
                                                             std::vector<std::string>* warnings) {
  const TargetInfo where = ParseTarget(target);
  if (where.is_unix && where.unix_path == protocol::DefaultSocketPath()) {
    // The default path is this user's own (or root's): whoever else could
    // have made its directory is someone to send nothing to.
    const absl::Status trusted =
        protocol::CheckSocketDirectory(where.unix_path, {static_cast<uid_t>(geteuid())});
    if (!trusted.ok() && !absl::IsNotFound(trusted)) return trusted;
  }

  std::string token = security.token;
  if (token.empty() && !security.token_file.empty()) {
    mode_t mode = 0;
    auto text = ReadFile(security.token_file, "token file", &mode);
    if (!text.ok()) return text.status();
    auto parsed = ParseClientToken(*text, absl::StrCat("token file ", security.token_file));
    if (!parsed.ok()) return parsed.status();
    token = *std::move(parsed);
    if ((mode & S_IROTH) != 0) {
      warnings->push_back(absl::StrCat("token file ", security.token_file,
                                       " is readable by every user; chmod 600 it"));
    }
  }

  const bool tls =
      !where.is_unix && (!security.tls_ca_file.empty() || !security.tls_cert_file.empty());
  if (!token.empty() && !tls && !where.local) {
    return absl::FailedPreconditionError(absl::StrCat(
        "refusing to send the bearer token to ", target,
        " in clear text: that host is not this machine and TLS is off (set TORCHMON_TLS_CA to "
        "the CA of the daemon's --tls-cert)"));
  }

  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (tls) {
    grpc::SslCredentialsOptions tls_options;
    if (!security.tls_ca_file.empty()) {
      auto ca = ReadFile(security.tls_ca_file, "TLS CA file");
      if (!ca.ok()) return ca.status();
      tls_options.pem_root_certs = *std::move(ca);
    }
    if (security.tls_cert_file.empty() != security.tls_key_file.empty()) {
      return absl::InvalidArgumentError(
          "a TLS client certificate needs its key and the other way round (TORCHMON_TLS_CERT "
          "and TORCHMON_TLS_KEY)");
    }
    if (!security.tls_cert_file.empty()) {
      auto cert = ReadFile(security.tls_cert_file, "TLS certificate");
      if (!cert.ok()) return cert.status();
      auto key = ReadFile(security.tls_key_file, "TLS key");
      if (!key.ok()) return key.status();
      tls_options.pem_cert_chain = *std::move(cert);
      tls_options.pem_private_key = *std::move(key);
    }
    if (!security.tls_server_name.empty()) args.SetSslTargetNameOverride(security.tls_server_name);
    credentials = grpc::SslCredentials(tls_options);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }

  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  if (!token.empty()) interceptors.push_back(std::make_unique<TokenInterceptorFactory>(token));
  return grpc::experimental::CreateCustomChannelWithInterceptors(target, credentials, args,
                                                                 std::move(interceptors));
}

std::shared_ptr<grpc::Channel> RefusedChannel(const grpc::ChannelArguments& args) {
  // Without credentials gRPC makes a "lame" channel: it never connects and
  // fails every call (grpcpp/create_channel.h).
  return grpc::CreateCustomChannel("refused", nullptr, args);
}

}  // namespace torchmon::detail

namespace torchmon {

absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateDaemonChannel(const ClientOptions& options) {
  const std::string target = options.target.empty() ? protocol::DefaultTarget() : options.target;
  const ClientSecurity security = options.security_from_environment
                                      ? detail::SecurityFromEnvironment(options.security)
                                      : options.security;
  std::vector<std::string> warnings;
  auto channel = detail::CreateChannel(target, security, grpc::ChannelArguments(), &warnings);
  for (const std::string& warning : warnings) {
    std::fprintf(stderr, "torchmon: warning: %s\n", warning.c_str());
  }
  return channel;
}

}  // namespace torchmon

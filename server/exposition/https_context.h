// TLS for /metrics and the live page (--web-config-file's
// tls_server_config): the OpenSSL context the HTTP server (http_server.h)
// makes each connection from, whose certificate, key, client CA and policy
// can be replaced while it serves.
//
// The server takes one SSL_CTX and keeps it. So that SIGHUP can bring a
// renewed certificate or CA without a restart, that context holds no
// certificate: a ClientHello callback moves each new
// connection onto the SSL_CTX of the material in force (SSL_set_SSL_CTX,
// the call SNI uses), with that material's verification and protocol
// versions. A connection keeps the context it started with (OpenSSL counts
// the reference), so Replace never disturbs a scrape under way. Sessions
// are never resumed: a resumed session skips the client certificate check,
// and with it a CA that was replaced.
#ifndef TORCHMON_SERVER_EXPOSITION_HTTPS_CONTEXT_H_
#define TORCHMON_SERVER_EXPOSITION_HTTPS_CONTEXT_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/auth/web_config.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

namespace torchmon::server {

// What one TLS configuration is made of, read from its files: PEM text.
struct HttpsMaterial {
  std::string cert_chain_pem;  // the server's certificate, then its chain
  std::string key_pem;
  std::string client_ca_pem;  // empty: none
  ClientAuthType client_auth = ClientAuthType::kNoClientCert;
  TlsVersion min_version = TlsVersion::kTls12;
  TlsVersion max_version = TlsVersion::kTls13;
  // For messages: the files the PEM came from.
  std::string cert_origin = "certificate";
  std::string key_origin = "key";
  std::string ca_origin = "client CA";
};

// OK if `material` would make a working server context: Create's errors
// otherwise. For TLS material used elsewhere (the gRPC listeners').
absl::Status CheckTlsMaterial(const HttpsMaterial& material);

// Thread-safe.
class HttpsContext {
 public:
  // InvalidArgument naming the origin if a PEM block does not parse, the
  // key does not belong to the certificate, or the CA holds no certificate.
  // Each handshake torchmond ends with a fatal alert (a client certificate
  // refused, no common version) is counted in `refused`, if given; it must
  // outlive this.
  static absl::StatusOr<std::unique_ptr<HttpsContext>> Create(
      const HttpsMaterial& material, std::atomic<uint64_t>* refused = nullptr);

  // Connections that start from now on use `material`; on error (as
  // Create's) nothing changes.
  absl::Status Replace(const HttpsMaterial& material) ABSL_LOCKS_EXCLUDED(mu_);

  // The context to make each connection's SSL from; owned here, valid
  // while this lives.
  SSL_CTX* listening_context() const { return listening_; }

  ~HttpsContext();
  HttpsContext(const HttpsContext&) = delete;
  HttpsContext& operator=(const HttpsContext&) = delete;

 private:
  class Configured;  // one material's SSL_CTX and policy
  friend absl::Status CheckTlsMaterial(const HttpsMaterial& material);
  HttpsContext() = default;
  static int OnClientHello(SSL* ssl, int* alert, void* arg);
  std::shared_ptr<const Configured> current() const ABSL_LOCKS_EXCLUDED(mu_);

  std::atomic<uint64_t>* refused_ = nullptr;
  SSL_CTX* listening_ = nullptr;
  mutable absl::Mutex mu_;
  std::shared_ptr<const Configured> current_ ABSL_GUARDED_BY(mu_);
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_EXPOSITION_HTTPS_CONTEXT_H_

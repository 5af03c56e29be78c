#include "server/exposition/https_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "absl/strings/str_cat.h"

namespace torchmon::server {
namespace {

// OpenSSL's reason for the last failure on this thread, and the queue
// emptied.
std::string OpenSslError() {
  std::string reason;
  while (const unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof(text));
    if (reason.empty()) reason = text;
  }
  return reason.empty() ? "no reason given" : reason;
}

absl::Status Invalid(absl::string_view origin, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, ": ", what, " (", OpenSslError(), ")"));
}

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

int ProtocolOf(TlsVersion version) {
  switch (version) {
    case TlsVersion::kTls10: return TLS1_VERSION;
    case TlsVersion::kTls11: return TLS1_1_VERSION;
    case TlsVersion::kTls12: return TLS1_2_VERSION;
    case TlsVersion::kTls13: return TLS1_3_VERSION;
  }
  return TLS1_2_VERSION;
}

// Counts a handshake torchmond ends with a fatal alert, in the counter its
// SSL_CTX carries (app data; null: none).
void CountRefusal(const SSL* ssl, int where, int alert) {
  if ((where & SSL_CB_WRITE_ALERT) != SSL_CB_WRITE_ALERT || SSL_is_init_finished(ssl)) return;
  if (SSL_alert_type_string(alert)[0] != 'F') return;  // a warning, not an ending
  auto* refused = static_cast<std::atomic<uint64_t>*>(SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl)));
  if (refused != nullptr) refused->fetch_add(1, std::memory_order_relaxed);
}

void CountRefusalsIn(SSL_CTX* ctx, std::atomic<uint64_t>* refused) {
  SSL_CTX_set_app_data(ctx, refused);
  SSL_CTX_set_info_callback(ctx, &CountRefusal);
}

// RequestClientCert and RequireAnyClientCert take whatever certificate
// comes, as Go's crypto/tls does.
int AcceptAnyCertificate(int /*preverified*/, X509_STORE_CTX* /*store*/) { return 1; }

}  // namespace

class HttpsContext::Configured {
 public:
  static absl::StatusOr<std::shared_ptr<const Configured>> Make(
      const HttpsMaterial& material, std::atomic<uint64_t>* refused = nullptr) {
    std::shared_ptr<Configured> c(new Configured());
    c->ctx_ = SSL_CTX_new(TLS_server_method());
    if (c->ctx_ == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslError());
    // The connection's context after the switch: its alerts are counted here.
    CountRefusalsIn(c->ctx_, refused);
    ERR_clear_error();
    Bio chain = MemoryBio(material.cert_chain_pem);
    Certificate leaf(PEM_read_bio_X509_AUX(chain.get(), nullptr, nullptr, nullptr));
    if (leaf == nullptr) return Invalid(material.cert_origin, "no PEM certificate");
    if (SSL_CTX_use_certificate(c->ctx_, leaf.get()) != 1) {
      return Invalid(material.cert_origin, "the certificate is not usable");
    }
    while (X509* next = PEM_read_bio_X509(chain.get(), nullptr, nullptr, nullptr)) {
      if (SSL_CTX_add0_chain_cert(c->ctx_, next) != 1) {
        X509_free(next);
        return Invalid(material.cert_origin, "a chain certificate is not usable");
      }
    }
    ERR_clear_error();  // the end of the chain reads as an error
    Bio key_bio = MemoryBio(material.key_pem);
    EVP_PKEY* key = PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr);
    if (key == nullptr) return Invalid(material.key_origin, "no PEM private key");
    const int used = SSL_CTX_use_PrivateKey(c->ctx_, key);
    EVP_PKEY_free(key);
    if (used != 1 || SSL_CTX_check_private_key(c->ctx_) != 1) {
      return Invalid(material.key_origin,
                     absl::StrCat("the key does not belong to the certificate of ",
                                  material.cert_origin));
    }
    if (!material.client_ca_pem.empty()) {
      Bio ca = MemoryBio(material.client_ca_pem);
      X509_STORE* store = SSL_CTX_get_cert_store(c->ctx_);
      int count = 0;
      while (X509* cert = PEM_read_bio_X509(ca.get(), nullptr, nullptr, nullptr)) {
        // The store for verifying, and the name in the CertificateRequest
        // so a client with several certificates picks the right one.
        const bool ok = X509_STORE_add_cert(store, cert) == 1 &&
                        SSL_CTX_add_client_CA(c->ctx_, cert) == 1;
        X509_free(cert);
        if (!ok) return Invalid(material.ca_origin, "a CA certificate is not usable");
        ++count;
      }
      ERR_clear_error();
      if (count == 0) return Invalid(material.ca_origin, "no PEM certificate");
    }
    switch (material.client_auth) {
      case ClientAuthType::kNoClientCert:
        c->verify_mode_ = SSL_VERIFY_NONE;
        break;
      case ClientAuthType::kRequestClientCert:
        c->verify_mode_ = SSL_VERIFY_PEER;
        c->verify_callback_ = AcceptAnyCertificate;
        break;
      case ClientAuthType::kRequireAnyClientCert:
        c->verify_mode_ = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        c->verify_callback_ = AcceptAnyCertificate;
        break;
      case ClientAuthType::kVerifyClientCertIfGiven:
        c->verify_mode_ = SSL_VERIFY_PEER;
        break;
      case ClientAuthType::kRequireAndVerifyClientCert:
        c->verify_mode_ = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        break;
    }
    c->min_version_ = ProtocolOf(material.min_version);
    c->max_version_ = ProtocolOf(material.max_version);
    return std::shared_ptr<const Configured>(std::move(c));
  }

  ~Configured() { SSL_CTX_free(ctx_); }

  // Moves `ssl`, whose ClientHello is being read, onto this configuration.
  bool Apply(SSL* ssl) const {
    if (SSL_set_SSL_CTX(ssl, ctx_) == nullptr) return false;
    SSL_set_verify(ssl, verify_mode_, verify_callback_);
    return SSL_set_min_proto_version(ssl, min_version_) == 1 &&
           SSL_set_max_proto_version(ssl, max_version_) == 1;
  }

 private:
  Configured() = default;
  SSL_CTX* ctx_ = nullptr;
  int verify_mode_ = SSL_VERIFY_NONE;
  SSL_verify_cb verify_callback_ = nullptr;
  int min_version_ = TLS1_2_VERSION;
  int max_version_ = TLS1_3_VERSION;
};

absl::Status CheckTlsMaterial(const HttpsMaterial& material) {
  return HttpsContext::Configured::Make(material).status();
}

absl::StatusOr<std::unique_ptr<HttpsContext>> HttpsContext::Create(
    const HttpsMaterial& material, std::atomic<uint64_t>* refused) {
  std::unique_ptr<HttpsContext> https(new HttpsContext());
  https->refused_ = refused;
  if (absl::Status s = https->Replace(material); !s.ok()) return s;
  https->listening_ = SSL_CTX_new(TLS_server_method());
  if (https->listening_ == nullptr) return absl::InternalError("SSL_CTX_new: " + OpenSslError());
  // Before the switch: a ClientHello refused outright.
  CountRefusalsIn(https->listening_, refused);
  SSL_CTX_set_session_cache_mode(https->listening_, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_options(https->listening_, SSL_OP_NO_TICKET | SSL_OP_NO_RENEGOTIATION);
  SSL_CTX_set_client_hello_cb(https->listening_, &HttpsContext::OnClientHello, https.get());
  return https;
}

absl::Status HttpsContext::Replace(const HttpsMaterial& material) {
  absl::StatusOr<std::shared_ptr<const Configured>> configured =
      Configured::Make(material, refused_);
  if (!configured.ok()) return configured.status();
  absl::MutexLock lock(&mu_);
  current_ = *std::move(configured);
  return absl::OkStatus();
}

std::shared_ptr<const HttpsContext::Configured> HttpsContext::current() const {
  absl::MutexLock lock(&mu_);
  return current_;
}

int HttpsContext::OnClientHello(SSL* ssl, int* alert, void* arg) {
  const std::shared_ptr<const Configured> configured = static_cast<HttpsContext*>(arg)->current();
  if (!configured->Apply(ssl)) {
    *alert = SSL_AD_INTERNAL_ERROR;
    return SSL_CLIENT_HELLO_ERROR;
  }
  return SSL_CLIENT_HELLO_SUCCESS;
}

HttpsContext::~HttpsContext() { SSL_CTX_free(listening_); }

}  // namespace torchmon::server

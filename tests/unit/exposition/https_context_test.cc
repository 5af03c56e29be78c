// HttpsContext: real TLS handshakes over a socket pair, OpenSSL on both
// ends, the server end being the context CivetWeb would be handed.
#include "server/exposition/https_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "unit/exposition/test_certificates.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
namespace certs = ::torchmon::server::testing;

HttpsMaterial Material(const char* cert, const char* key,
                       ClientAuthType client_auth = ClientAuthType::kNoClientCert,
                       const char* client_ca = "") {
  HttpsMaterial material;
  material.cert_chain_pem = cert;
  material.key_pem = key;
  material.client_ca_pem = client_ca;
  material.client_auth = client_auth;
  return material;
}

// What a client saw of one handshake.
struct Outcome {
  bool client_ok = false;
  bool server_ok = false;
  std::string server_cn;        // the CN of the certificate the server showed
  std::string client_cn_seen;   // what the server saw of the client's, if any
};

std::string CommonName(X509* cert) {
  if (cert == nullptr) return "";
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof(cn));
  return cn;
}

void UsePem(SSL_CTX* ctx, const char* cert, const char* key) {
  BIO* c = BIO_new_mem_buf(cert, -1);
  X509* x = PEM_read_bio_X509(c, nullptr, nullptr, nullptr);
  BIO_free(c);
  BIO* k = BIO_new_mem_buf(key, -1);
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(k, nullptr, nullptr, nullptr);
  BIO_free(k);
  ASSERT_EQ(SSL_CTX_use_certificate(ctx, x), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey(ctx, pkey), 1);
  X509_free(x);
  EVP_PKEY_free(pkey);
}

// One handshake of a client trusting test-ca (presenting `cert`/`key` if
// given, speaking at most `max_version`) with `https`.
Outcome Handshake(const HttpsContext& https, const char* cert = nullptr,
                  const char* key = nullptr, int max_version = TLS1_3_VERSION) {
  // A side that gives up closes its end; the other's next write must fail,
  // not kill the test.
  signal(SIGPIPE, SIG_IGN);
  int fds[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  Outcome outcome;
  std::thread server([&] {
    SSL* ssl = SSL_new(https.listening_context());
    SSL_set_fd(ssl, fds[0]);
    outcome.server_ok = SSL_accept(ssl) == 1;
    if (outcome.server_ok) {
      X509* peer = SSL_get1_peer_certificate(ssl);
      outcome.client_cn_seen = CommonName(peer);
      X509_free(peer);
      char byte;
      SSL_read(ssl, &byte, 1);  // the client's byte
      SSL_shutdown(ssl);
    }
    SSL_free(ssl);
    close(fds[0]);
  });
  SSL_CTX* ctx = SSL_CTX_new(TLS_client_method());
  SSL_CTX_set_max_proto_version(ctx, max_version);
  BIO* ca = BIO_new_mem_buf(certs::kTestCaCert, -1);
  X509* ca_cert = PEM_read_bio_X509(ca, nullptr, nullptr, nullptr);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca_cert);
  X509_free(ca_cert);
  BIO_free(ca);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (cert != nullptr) UsePem(ctx, cert, key);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fds[1]);
  SSL_set1_host(ssl, "localhost");
  outcome.client_ok = SSL_connect(ssl) == 1;
  if (outcome.client_ok) {
    X509* shown = SSL_get1_peer_certificate(ssl);
    outcome.server_cn = CommonName(shown);
    X509_free(shown);
    // TLS 1.3 sends the verdict on the client's certificate after the
    // client's handshake is done: a read sees it.
    SSL_write(ssl, "x", 1);
    char byte;
    if (SSL_read(ssl, &byte, 1) <= 0 && SSL_get_error(ssl, 0) == SSL_ERROR_SSL) {
      outcome.client_ok = false;
    }
  }
  SSL_shutdown(ssl);
  SSL_free(ssl);
  SSL_CTX_free(ctx);
  shutdown(fds[1], SHUT_RDWR);
  server.join();
  close(fds[1]);
  ERR_clear_error();
  return outcome;
}

TEST(HttpsContextTest, ServesTheCertificateOfItsMaterial) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey));
  ASSERT_TRUE(https.ok()) << https.status();
  const Outcome outcome = Handshake(**https);
  EXPECT_TRUE(outcome.client_ok);
  EXPECT_TRUE(outcome.server_ok);
  EXPECT_EQ(outcome.server_cn, "server-one");
  EXPECT_EQ(outcome.client_cn_seen, "");
}

TEST(HttpsContextTest, AReplacedCertificateIsShownToTheNextConnection) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey));
  ASSERT_TRUE(https.ok()) << https.status();
  ASSERT_TRUE((*https)->Replace(Material(certs::kServerTwoCert, certs::kServerTwoKey)).ok());
  EXPECT_EQ(Handshake(**https).server_cn, "server-two");
}

TEST(HttpsContextTest, ABadReplacementChangesNothing) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey));
  ASSERT_TRUE(https.ok()) << https.status();
  HttpsMaterial mismatched = Material(certs::kServerTwoCert, certs::kServerOneKey);
  mismatched.key_origin = "server.key";
  mismatched.cert_origin = "server.pem";
  const absl::Status status = (*https)->Replace(mismatched);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("server.key: the key does not belong to the "
                                          "certificate of server.pem"));
  HttpsMaterial garbage = Material("not a certificate", certs::kServerTwoKey);
  garbage.cert_origin = "cert_file x.pem";
  EXPECT_THAT((*https)->Replace(garbage).message(), HasSubstr("cert_file x.pem: no PEM"));
  EXPECT_EQ(Handshake(**https).server_cn, "server-one");
}

TEST(HttpsContextTest, RequireAndVerifyAdmitsOnlyCertificatesTheCaSigned) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey,
                                             ClientAuthType::kRequireAndVerifyClientCert,
                                             certs::kTestCaCert));
  ASSERT_TRUE(https.ok()) << https.status();
  const Outcome signed_client = Handshake(**https, certs::kClientCert, certs::kClientKey);
  EXPECT_TRUE(signed_client.client_ok);
  EXPECT_TRUE(signed_client.server_ok);
  EXPECT_EQ(signed_client.client_cn_seen, "client");
  const Outcome stranger = Handshake(**https, certs::kStrangerCert, certs::kStrangerKey);
  EXPECT_FALSE(stranger.server_ok);
  EXPECT_FALSE(stranger.client_ok);
  const Outcome anonymous = Handshake(**https);
  EXPECT_FALSE(anonymous.server_ok);
  EXPECT_FALSE(anonymous.client_ok);
}

TEST(HttpsContextTest, VerifyIfGivenAdmitsAnonymousClientsButNoStranger) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey,
                                             ClientAuthType::kVerifyClientCertIfGiven,
                                             certs::kTestCaCert));
  ASSERT_TRUE(https.ok()) << https.status();
  EXPECT_TRUE(Handshake(**https).server_ok);
  EXPECT_TRUE(Handshake(**https, certs::kClientCert, certs::kClientKey).server_ok);
  EXPECT_FALSE(Handshake(**https, certs::kStrangerCert, certs::kStrangerKey).server_ok);
}

TEST(HttpsContextTest, RequireAnyTakesAnyCertificateButNone) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey,
                                             ClientAuthType::kRequireAnyClientCert));
  ASSERT_TRUE(https.ok()) << https.status();
  const Outcome stranger = Handshake(**https, certs::kStrangerCert, certs::kStrangerKey);
  EXPECT_TRUE(stranger.server_ok);
  EXPECT_EQ(stranger.client_cn_seen, "stranger");
  EXPECT_FALSE(Handshake(**https).server_ok);
}

TEST(HttpsContextTest, AReplacedClientCaAppliesToTheNextConnection) {
  auto https = HttpsContext::Create(Material(certs::kServerOneCert, certs::kServerOneKey,
                                             ClientAuthType::kRequireAndVerifyClientCert,
                                             certs::kTestCaCert));
  ASSERT_TRUE(https.ok()) << https.status();
  ASSERT_TRUE(Handshake(**https, certs::kClientCert, certs::kClientKey).server_ok);
  ASSERT_TRUE((*https)
                  ->Replace(Material(certs::kServerOneCert, certs::kServerOneKey,
                                     ClientAuthType::kRequireAndVerifyClientCert,
                                     certs::kOtherCaCert))
                  .ok());
  EXPECT_FALSE(Handshake(**https, certs::kClientCert, certs::kClientKey).server_ok);
  EXPECT_TRUE(Handshake(**https, certs::kStrangerCert, certs::kStrangerKey).server_ok);
}

TEST(HttpsContextTest, TheMinimumVersionIsEnforced) {
  HttpsMaterial material = Material(certs::kServerOneCert, certs::kServerOneKey);
  material.min_version = TlsVersion::kTls13;
  auto https = HttpsContext::Create(material);
  ASSERT_TRUE(https.ok()) << https.status();
  EXPECT_FALSE(Handshake(**https, nullptr, nullptr, TLS1_2_VERSION).server_ok);
  EXPECT_TRUE(Handshake(**https, nullptr, nullptr, TLS1_3_VERSION).server_ok);
}

}  // namespace
}  // namespace torchmon::server

// HttpsContext: real TLS handshakes over a socket pair, OpenSSL on both
// ends, the server end being the context the HTTP server is handed.
// Certificates from the test PKI (tests/support/test_pki.h), made at test
// time: nothing committed, nothing that expires.
#include "server/exposition/https_context.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_launch.h"
#include "tests/support/test_pki.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The PEM text of a test PKI's files.
struct Pem {
  explicit Pem(const ::torchmon::testing::TestPki& pki)
      : ca(Read(pki.ca_cert)),
        server_cert(Read(pki.server_cert)),
        server_key(Read(pki.server_key)),
        client_cert(Read(pki.client_cert)),
        client_key(Read(pki.client_key)),
        other_ca(Read(pki.other_ca_cert)),
        stranger_cert(Read(pki.other_client_cert)),
        stranger_key(Read(pki.other_client_key)) {}
  std::string ca, server_cert, server_key, client_cert, client_key;
  std::string other_ca, stranger_cert, stranger_key;
};

// Two PKIs, each with its own CA: the second's server certificate is
// "another certificate" for the first's.
class HttpsContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& [dir, pem] : {std::pair{&dir_, &pem_}, std::pair{&second_dir_, &second_}}) {
      auto pki = ::torchmon::testing::MakeTestPki(dir->path());
      ASSERT_TRUE(pki.ok()) << pki.status();
      *pem = std::make_unique<Pem>(*pki);
    }
  }
  const Pem& pem() const { return *pem_; }
  const Pem& second() const { return *second_; }

 private:
  ::torchmon::testing::TempDir dir_{"torchmon-https"}, second_dir_{"torchmon-https"};
  std::unique_ptr<Pem> pem_, second_;
};

HttpsMaterial Material(const std::string& cert, const std::string& key,
                       ClientAuthType client_auth = ClientAuthType::kNoClientCert,
                       const std::string& client_ca = "") {
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
  std::string server_cert;       // PEM of the certificate the server showed
  std::string client_cert_seen;  // PEM of what the server saw of the client's
};

std::string PemOf(X509* cert) {
  if (cert == nullptr) return "";
  BIO* out = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(out, cert);
  char* data = nullptr;
  const long size = BIO_get_mem_data(out, &data);
  std::string pem(data, static_cast<size_t>(size));
  BIO_free(out);
  return pem;
}

X509* ParseCertificate(const std::string& pem) {
  BIO* in = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  X509* cert = PEM_read_bio_X509(in, nullptr, nullptr, nullptr);
  BIO_free(in);
  return cert;
}

// True if the PEM texts hold the same certificate.
bool SameCertificate(const std::string& a, const std::string& b) {
  X509* x = ParseCertificate(a);
  X509* y = ParseCertificate(b);
  const bool same = x != nullptr && y != nullptr && X509_cmp(x, y) == 0;
  X509_free(x);
  X509_free(y);
  return same;
}

void UsePem(SSL_CTX* ctx, const std::string& cert, const std::string& key) {
  X509* x = ParseCertificate(cert);
  BIO* k = BIO_new_mem_buf(key.data(), static_cast<int>(key.size()));
  EVP_PKEY* pkey = PEM_read_bio_PrivateKey(k, nullptr, nullptr, nullptr);
  BIO_free(k);
  ASSERT_EQ(SSL_CTX_use_certificate(ctx, x), 1);
  ASSERT_EQ(SSL_CTX_use_PrivateKey(ctx, pkey), 1);
  X509_free(x);
  EVP_PKEY_free(pkey);
}

// One handshake with `https` of a client trusting `trusted` (a CA's PEM),
// presenting `cert`/`key` if given, speaking at most `max_version`.
Outcome Handshake(const HttpsContext& https, const std::string& trusted,
                  const std::string& cert = "", const std::string& key = "",
                  int max_version = TLS1_3_VERSION) {
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
      outcome.client_cert_seen = PemOf(peer);
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
  X509* ca_cert = ParseCertificate(trusted);
  X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca_cert);
  X509_free(ca_cert);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
  if (!cert.empty()) UsePem(ctx, cert, key);
  SSL* ssl = SSL_new(ctx);
  SSL_set_fd(ssl, fds[1]);
  SSL_set1_host(ssl, "localhost");
  outcome.client_ok = SSL_connect(ssl) == 1;
  if (outcome.client_ok) {
    X509* shown = SSL_get1_peer_certificate(ssl);
    outcome.server_cert = PemOf(shown);
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

TEST_F(HttpsContextTest, ServesTheCertificateOfItsMaterial) {
  auto https = HttpsContext::Create(Material(pem().server_cert, pem().server_key));
  ASSERT_TRUE(https.ok()) << https.status();
  const Outcome outcome = Handshake(**https, pem().ca);
  EXPECT_TRUE(outcome.client_ok);
  EXPECT_TRUE(outcome.server_ok);
  EXPECT_TRUE(SameCertificate(outcome.server_cert, pem().server_cert));
  EXPECT_EQ(outcome.client_cert_seen, "");
}

TEST_F(HttpsContextTest, AReplacedCertificateIsShownToTheNextConnection) {
  auto https = HttpsContext::Create(Material(pem().server_cert, pem().server_key));
  ASSERT_TRUE(https.ok()) << https.status();
  ASSERT_TRUE((*https)->Replace(Material(second().server_cert, second().server_key)).ok());
  const Outcome outcome = Handshake(**https, second().ca);
  EXPECT_TRUE(outcome.client_ok);
  EXPECT_TRUE(SameCertificate(outcome.server_cert, second().server_cert));
  // A client that trusts only the first CA no longer gets through.
  EXPECT_FALSE(Handshake(**https, pem().ca).client_ok);
}

TEST_F(HttpsContextTest, ABadReplacementChangesNothing) {
  auto https = HttpsContext::Create(Material(pem().server_cert, pem().server_key));
  ASSERT_TRUE(https.ok()) << https.status();
  HttpsMaterial mismatched = Material(second().server_cert, pem().server_key);
  mismatched.key_origin = "server.key";
  mismatched.cert_origin = "server.pem";
  const absl::Status status = (*https)->Replace(mismatched);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("server.key: the key does not belong to the "
                                          "certificate of server.pem"));
  HttpsMaterial garbage = Material("not a certificate", second().server_key);
  garbage.cert_origin = "cert_file x.pem";
  EXPECT_THAT((*https)->Replace(garbage).message(), HasSubstr("cert_file x.pem: no PEM"));
  EXPECT_TRUE(SameCertificate(Handshake(**https, pem().ca).server_cert, pem().server_cert));
  EXPECT_TRUE(CheckTlsMaterial(Material(pem().server_cert, pem().server_key)).ok());
  EXPECT_FALSE(CheckTlsMaterial(mismatched).ok());
}

TEST_F(HttpsContextTest, RequireAndVerifyAdmitsOnlyCertificatesTheCaSigned) {
  std::atomic<uint64_t> refused{0};
  auto https =
      HttpsContext::Create(Material(pem().server_cert, pem().server_key,
                                    ClientAuthType::kRequireAndVerifyClientCert, pem().ca),
                           &refused);
  ASSERT_TRUE(https.ok()) << https.status();
  const Outcome signed_client = Handshake(**https, pem().ca, pem().client_cert, pem().client_key);
  EXPECT_TRUE(signed_client.client_ok);
  EXPECT_TRUE(signed_client.server_ok);
  EXPECT_TRUE(SameCertificate(signed_client.client_cert_seen, pem().client_cert));
  EXPECT_EQ(refused.load(), 0u);
  const Outcome stranger = Handshake(**https, pem().ca, pem().stranger_cert, pem().stranger_key);
  EXPECT_FALSE(stranger.server_ok);
  EXPECT_FALSE(stranger.client_ok);
  EXPECT_EQ(refused.load(), 1u);
  const Outcome anonymous = Handshake(**https, pem().ca);
  EXPECT_FALSE(anonymous.server_ok);
  EXPECT_FALSE(anonymous.client_ok);
  EXPECT_EQ(refused.load(), 2u);
}

TEST_F(HttpsContextTest, VerifyIfGivenAdmitsAnonymousClientsButNoStranger) {
  auto https = HttpsContext::Create(Material(pem().server_cert, pem().server_key,
                                             ClientAuthType::kVerifyClientCertIfGiven, pem().ca));
  ASSERT_TRUE(https.ok()) << https.status();
  EXPECT_TRUE(Handshake(**https, pem().ca).server_ok);
  EXPECT_TRUE(Handshake(**https, pem().ca, pem().client_cert, pem().client_key).server_ok);
  EXPECT_FALSE(Handshake(**https, pem().ca, pem().stranger_cert, pem().stranger_key).server_ok);
}

TEST_F(HttpsContextTest, RequireAnyTakesAnyCertificateButNone) {
  auto https = HttpsContext::Create(Material(pem().server_cert, pem().server_key,
                                             ClientAuthType::kRequireAnyClientCert));
  ASSERT_TRUE(https.ok()) << https.status();
  const Outcome stranger = Handshake(**https, pem().ca, pem().stranger_cert, pem().stranger_key);
  EXPECT_TRUE(stranger.server_ok);
  EXPECT_TRUE(SameCertificate(stranger.client_cert_seen, pem().stranger_cert));
  EXPECT_FALSE(Handshake(**https, pem().ca).server_ok);
}

TEST_F(HttpsContextTest, AReplacedClientCaAppliesToTheNextConnection) {
  const auto material = [&](const std::string& ca) {
    return Material(pem().server_cert, pem().server_key,
                    ClientAuthType::kRequireAndVerifyClientCert, ca);
  };
  auto https = HttpsContext::Create(material(pem().ca));
  ASSERT_TRUE(https.ok()) << https.status();
  ASSERT_TRUE(Handshake(**https, pem().ca, pem().client_cert, pem().client_key).server_ok);
  ASSERT_TRUE((*https)->Replace(material(pem().other_ca)).ok());
  EXPECT_FALSE(Handshake(**https, pem().ca, pem().client_cert, pem().client_key).server_ok);
  EXPECT_TRUE(Handshake(**https, pem().ca, pem().stranger_cert, pem().stranger_key).server_ok);
}

TEST_F(HttpsContextTest, TheMinimumVersionIsEnforcedAndARefusalCounted) {
  HttpsMaterial material = Material(pem().server_cert, pem().server_key);
  material.min_version = TlsVersion::kTls13;
  std::atomic<uint64_t> refused{0};
  auto https = HttpsContext::Create(material, &refused);
  ASSERT_TRUE(https.ok()) << https.status();
  EXPECT_FALSE(Handshake(**https, pem().ca, "", "", TLS1_2_VERSION).server_ok);
  EXPECT_EQ(refused.load(), 1u);
  EXPECT_TRUE(Handshake(**https, pem().ca, "", "", TLS1_3_VERSION).server_ok);
  EXPECT_EQ(refused.load(), 1u);
}

}  // namespace
}  // namespace torchmon::server

#include "tests/support/test_pki.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/support/child_process.h"

namespace torchmon::testing {
namespace {

// Extensions of each kind of certificate; "req -x509 -CA" (OpenSSL 3) signs
// with them directly, with no CSR or serial file in between.
constexpr char kConfig[] = R"([req]
distinguished_name = dn
prompt = no
[dn]
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
[client_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
)";

absl::StatusOr<std::string> FindOpenssl() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir, "/openssl");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(
      "the openssl command is not installed (deploy/dev/install-deps.sh --test installs it)");
}

}  // namespace

absl::StatusOr<TestPki> MakeTestPki(const std::string& dir) {
  auto openssl = FindOpenssl();
  if (!openssl.ok()) return openssl.status();
  const std::string config = dir + "/openssl.cnf";
  {
    std::ofstream out(config);
    out << kConfig;
    if (!out) return absl::InternalError(absl::StrCat("cannot write ", config));
  }
  // One certificate: a fresh P-256 key, valid for two days.
  auto make = [&](const std::string& name, const std::string& subject,
                  const std::string& extensions, const std::string& issuer) -> absl::Status {
    std::vector<std::string> argv = {*openssl,
                                     "req",
                                     "-x509",
                                     "-config",
                                     config,
                                     "-extensions",
                                     extensions,
                                     "-newkey",
                                     "ec",
                                     "-pkeyopt",
                                     "ec_paramgen_curve:prime256v1",
                                     "-nodes",
                                     "-days",
                                     "2",
                                     "-subj",
                                     "/CN=" + subject,
                                     "-keyout",
                                     dir + "/" + name + ".key",
                                     "-out",
                                     dir + "/" + name + ".pem"};
    if (!issuer.empty()) {
      argv.insert(argv.end(),
                  {"-CA", dir + "/" + issuer + ".pem", "-CAkey", dir + "/" + issuer + ".key"});
    }
    auto result = RunCommand(argv, std::chrono::seconds(20));
    if (!result.ok()) return result.status();
    if (result->exit_code != 0) {
      return absl::InternalError(absl::StrCat("openssl failed making ", name, ": ", result->err));
    }
    // The daemon refuses keys other users can read.
    if (chmod((dir + "/" + name + ".key").c_str(), 0600) != 0) {
      return absl::InternalError(absl::StrCat("cannot chmod ", name, ".key"));
    }
    return absl::OkStatus();
  };
  struct Spec {
    const char* name;
    const char* subject;
    const char* extensions;
    const char* issuer;
  };
  constexpr Spec kSpecs[] = {{"ca", "torchmon-test-ca", "ca_ext", ""},
                             {"server", "localhost", "server_ext", "ca"},
                             {"client", "trainer", "client_ext", "ca"},
                             {"other-ca", "other-test-ca", "ca_ext", ""},
                             {"other-client", "intruder", "client_ext", "other-ca"}};
  for (const Spec& spec : kSpecs) {
    if (absl::Status s = make(spec.name, spec.subject, spec.extensions, spec.issuer); !s.ok()) {
      return s;
    }
  }
  TestPki pki;
  pki.ca_cert = dir + "/ca.pem";
  pki.server_cert = dir + "/server.pem";
  pki.server_key = dir + "/server.key";
  pki.client_cert = dir + "/client.pem";
  pki.client_key = dir + "/client.key";
  pki.other_ca_cert = dir + "/other-ca.pem";
  pki.other_client_cert = dir + "/other-client.pem";
  pki.other_client_key = dir + "/other-client.key";
  return pki;
}

}  // namespace torchmon::testing

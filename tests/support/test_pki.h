// Test support: a throw-away public-key infrastructure made with the openssl
// command at test time (nothing committed, nothing that expires between
// runs): a CA, a server certificate for localhost/127.0.0.1 signed by it, a
// client certificate signed by it, and a second CA with a client
// certificate of its own, for "signed by someone else". Keys are 0600.
#ifndef TORCHMON_TESTS_SUPPORT_TEST_PKI_H_
#define TORCHMON_TESTS_SUPPORT_TEST_PKI_H_

#include <string>

#include "absl/status/statusor.h"

namespace torchmon::testing {

struct TestPki {
  std::string ca_cert;
  std::string server_cert, server_key;
  std::string client_cert, client_key;
  std::string other_ca_cert;
  std::string other_client_cert, other_client_key;
};

// Writes every file into `dir` (which must exist). Takes ~0.1 s. The error
// says what failed, e.g. that openssl is not installed
// (deploy/dev/install-deps.sh --test installs it).
absl::StatusOr<TestPki> MakeTestPki(const std::string& dir);

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_TEST_PKI_H_

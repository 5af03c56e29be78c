#include "server/auth/web_config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;

// A cost-4 hash of "secret", made by libxcrypt (Python's crypt module).
constexpr char kHash[] = "$2b$04$zuGHkdPzwb9KCcf8rLNc5eFPSsX10hv.UMzE2ki0Zd/edgTbfr3.a";

absl::StatusOr<WebConfig> Parse(const std::string& text) {
  return ParseWebConfig(text, "web.yml", "/etc/torchmon");
}

std::string ErrorOf(const std::string& text) {
  absl::StatusOr<WebConfig> config = Parse(text);
  EXPECT_FALSE(config.ok()) << text;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

TEST(WebConfigTest, TheToolkitsDocumentedExampleIsRead) {
  absl::StatusOr<WebConfig> config = Parse(std::string(R"(---
# Comments, quoting and relative paths as exporters' users write them.
tls_server_config:
  cert_file: server.crt   # relative: to the file's folder
  key_file: "/secrets/server.key"
  client_auth_type: 'RequireAndVerifyClientCert'
  client_ca_file: ca.crt
  min_version: TLS13

basic_auth_users:
  prometheus: )") + kHash + "\n  \"grafana agent\": '" + kHash + "'\n");
  ASSERT_TRUE(config.ok()) << config.status();
  ASSERT_TRUE(config->tls.has_value());
  EXPECT_EQ(config->tls->cert_file, "/etc/torchmon/server.crt");
  EXPECT_EQ(config->tls->key_file, "/secrets/server.key");
  EXPECT_EQ(config->tls->client_ca_file, "/etc/torchmon/ca.crt");
  EXPECT_EQ(config->tls->client_auth, ClientAuthType::kRequireAndVerifyClientCert);
  EXPECT_EQ(config->tls->min_version, TlsVersion::kTls13);
  EXPECT_EQ(config->tls->max_version, TlsVersion::kTls13);
  ASSERT_EQ(config->basic_auth_users.size(), 2u);
  EXPECT_EQ(config->basic_auth_users[0].first, "prometheus");
  EXPECT_EQ(config->basic_auth_users[1].first, "grafana agent");
  EXPECT_TRUE(BcryptMatches(config->basic_auth_users[1].second, "secret"));
  EXPECT_FALSE(BcryptMatches(config->basic_auth_users[1].second, "Secret"));
}

TEST(WebConfigTest, AnEmptyFileOrEmptySectionsMeanPlainHttpWithoutUsers) {
  for (const char* text : {"", "# nothing\n", "tls_server_config:\nbasic_auth_users: {}\n",
                           "http_server_config: {}\n"}) {
    absl::StatusOr<WebConfig> config = Parse(text);
    ASSERT_TRUE(config.ok()) << text << ": " << config.status();
    EXPECT_FALSE(config->tls.has_value()) << text;
    EXPECT_TRUE(config->basic_auth_users.empty()) << text;
  }
}

TEST(WebConfigTest, TheToolkitsDefaultsApply) {
  absl::StatusOr<WebConfig> config = Parse("tls_server_config:\n  cert_file: a\n  key_file: b\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls->client_auth, ClientAuthType::kNoClientCert);
  EXPECT_EQ(config->tls->min_version, TlsVersion::kTls12);
  EXPECT_EQ(config->tls->max_version, TlsVersion::kTls13);
}

TEST(WebConfigTest, EveryClientAuthTypeOfTheToolkitIsKnown) {
  const std::pair<const char*, ClientAuthType> types[] = {
      {"NoClientCert", ClientAuthType::kNoClientCert},
      {"RequestClientCert", ClientAuthType::kRequestClientCert},
      {"RequireAnyClientCert", ClientAuthType::kRequireAnyClientCert},
      {"RequireClientCert", ClientAuthType::kRequireAnyClientCert},
      {"VerifyClientCertIfGiven", ClientAuthType::kVerifyClientCertIfGiven},
      {"RequireAndVerifyClientCert", ClientAuthType::kRequireAndVerifyClientCert}};
  for (const auto& [name, type] : types) {
    const std::string ca = std::string(name) == "NoClientCert" ? "" : "  client_ca_file: ca\n";
    absl::StatusOr<WebConfig> config = Parse(absl::StrCat(
        "tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: ", name, "\n", ca));
    ASSERT_TRUE(config.ok()) << name << ": " << config.status();
    EXPECT_EQ(config->tls->client_auth, type) << name;
  }
}

TEST(WebConfigTest, ErrorsNameTheLineAndTheKey) {
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: x\n"),
              HasSubstr("web.yml line 4: tls_server_config.cipher_suites is not supported"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: "
                      "Always\n"),
              HasSubstr("line 4: unknown client_auth_type \"Always\""));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n"),
              HasSubstr("unknown TLS version \"SSL3\""));
  EXPECT_THAT(ErrorOf("tls_config:\n  cert_file: a\n"), HasSubstr("line 1: unknown key \"tls_config\""));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n"),
              HasSubstr("needs both cert_file and key_file"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  cert_file: b\n"),
              HasSubstr("line 3: \"cert_file\" given twice"));
  EXPECT_THAT(ErrorOf("http_server_config:\n  http2: false\n"),
              HasSubstr("http_server_config is not supported"));
}

TEST(WebConfigTest, InconsistentTlsSettingsAreRefused) {
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_ca_file: c\n"),
              HasSubstr("client_ca_file is given but client_auth_type is NoClientCert"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: "
                      "RequireAndVerifyClientCert\n"),
              HasSubstr("no client_ca_file"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: TLS13\n"
                      "  max_version: TLS12\n"),
              HasSubstr("min_version is above max_version"));
}

TEST(WebConfigTest, APasswordThatIsNotABcryptHashIsRefusedWithoutEchoingIt) {
  const std::string message = ErrorOf("basic_auth_users:\n  alice: hunter2-plain\n");
  EXPECT_THAT(message, HasSubstr("line 2: basic_auth_users.alice"));
  EXPECT_THAT(message, HasSubstr("htpasswd -nBC 10 alice"));
  EXPECT_THAT(message, ::testing::Not(HasSubstr("hunter2")));
  EXPECT_THAT(ErrorOf(absl::StrCat("basic_auth_users:\n  \"a:b\": ", kHash, "\n")),
              HasSubstr("holds a ':'"));
}

TEST(WebConfigTest, YamlBeyondTheSubsetIsRefusedRatherThanMisread) {
  EXPECT_THAT(ErrorOf("tls_server_config:\n\tcert_file: a\n"), HasSubstr("line 2: a tab"));
  EXPECT_THAT(ErrorOf("basic_auth_users: {alice: x}\n"), HasSubstr("flow collections"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: |\n    a\n"), HasSubstr("block scalars"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  - cert_file: a\n"), HasSubstr("line 2: a YAML sequence"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n  cert_file: \"a\n"),
              HasSubstr("without its closing quote"));
  EXPECT_THAT(ErrorOf("tls_server_config:\n    cert_file: a\n  key_file: b\n"),
              HasSubstr("line 3: unexpected indentation"));
  EXPECT_THAT(ErrorOf("tls_server_config: yes\n"), HasSubstr("a mapping was expected"));
  EXPECT_THAT(ErrorOf("a: b\n---\nc: d\n"), HasSubstr("a second YAML document"));
}

TEST(WebConfigTest, AHashInsideQuotesOrAfterTextIsNotAComment) {
  absl::StatusOr<WebConfig> config =
      Parse("tls_server_config:\n  cert_file: 'a #1.crt'  # the first\n  key_file: k#2\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls->cert_file, "/etc/torchmon/a #1.crt");
  EXPECT_EQ(config->tls->key_file, "/etc/torchmon/k#2");
}

// What exporter-toolkit's users write, read as Go's YAML reads it.
TEST(WebConfigTest, ABomTabsAfterColonsAndEveryQuotingAreRead) {
  absl::StatusOr<WebConfig> config =
      Parse("\xEF\xBB\xBFtls_server_config:\n"
            "  cert_file:\t'it''s # here.crt'   # a comment\n"
            "  key_file: \"k \\\"#2\\\".key\"\t# another\n"
            "  client_auth_type:\t\"RequireAndVerifyClientCert\"\n"
            "  client_ca_file: ca.pem\n"
            "basic_auth_users:\n"
            "  'prometheus':\t" + std::string(kHash) + "\n"
            "  \"grafana\": '" + std::string(kHash) + "'\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls->cert_file, "/etc/torchmon/it's # here.crt");
  EXPECT_EQ(config->tls->key_file, "/etc/torchmon/k \"#2\".key");
  EXPECT_EQ(config->tls->client_auth, ClientAuthType::kRequireAndVerifyClientCert);
  ASSERT_EQ(config->basic_auth_users.size(), 2u);
  EXPECT_EQ(config->basic_auth_users[0].first, "prometheus");
  EXPECT_EQ(config->basic_auth_users[1].first, "grafana");
  // CRLF line ends read the same.
  absl::StatusOr<WebConfig> crlf = Parse("basic_auth_users:\r\n  prometheus: " +
                                         std::string(kHash) + "\r\n");
  ASSERT_TRUE(crlf.ok()) << crlf.status();
  EXPECT_EQ(crlf->basic_auth_users.size(), 1u);
}

TEST(WebConfigTest, AColonInsideAPlainValueIsPartOfIt) {
  absl::StatusOr<WebConfig> config =
      Parse("tls_server_config:\n  cert_file: c:d.crt\n  key_file: /k:2\n");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tls->cert_file, "/etc/torchmon/c:d.crt");
  EXPECT_EQ(config->tls->key_file, "/k:2");
}

TEST(WebConfigTest, AHashOverTheCostTorchmondChecksIsRefusedNamingTheUserAndLine) {
  // A cost-15 hash: the limit is 14 (kMaxServedBcryptCost).
  const std::string text = std::string("basic_auth_users:\n  prometheus: ") + kHash + "\n" +
                           "  slow: $2b$15$zuGHkdPzwb9KCcf8rLNc5eFPSsX10hv.UMzE2ki0Zd/edgTbfr3.a\n";
  const std::string error = ErrorOf(text);
  EXPECT_THAT(error, HasSubstr("web.yml line 3: basic_auth_users.slow: bcrypt cost 15 is over 14"));
  EXPECT_THAT(error, HasSubstr("htpasswd -nBC 12 slow"));
}

}  // namespace
}  // namespace torchmon::server

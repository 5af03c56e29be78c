#include "server/push/push_options.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;

TEST(HttpUrlTest, SplitsSchemeHostPortAndPath) {
  auto u = ParseHttpUrl("http://mimir.example:8080/api/v1/push?tenant=a");
  ASSERT_TRUE(u.ok()) << u.status();
  EXPECT_FALSE(u->tls);
  EXPECT_EQ(u->host, "mimir.example");
  EXPECT_EQ(u->port, 8080);
  EXPECT_EQ(u->path, "/api/v1/push?tenant=a");
  auto v6 = ParseHttpUrl("https://[::1]/write");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_TRUE(v6->tls);
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 443);
  EXPECT_EQ(v6->text, "https://[::1]:443/write");
  auto bare = ParseHttpUrl("http://collector");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->path, "/");
  EXPECT_EQ(bare->port, 80);
}

TEST(HttpUrlTest, RefusesWhatIsNotAnHttpUrlSayingWhy) {
  EXPECT_THAT(ParseHttpUrl("ftp://x/").status().message(), HasSubstr("not an http:// or https://"));
  EXPECT_THAT(ParseHttpUrl("http://:9090/").status().message(), HasSubstr("no host"));
  EXPECT_THAT(ParseHttpUrl("http://h:0/").status().message(), HasSubstr("port"));
  EXPECT_THAT(ParseHttpUrl("http://h:99999/").status().message(), HasSubstr("port"));
  EXPECT_THAT(ParseHttpUrl("http://::1:80/").status().message(), HasSubstr("brackets"));
  EXPECT_THAT(ParseHttpUrl("https://user:pw@h/").status().message(),
              HasSubstr("credentials"));
}

TEST(PushEndpointTest, OptionsAfterTheUrlSetCredentialsAndTls) {
  auto e = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url",
                             "https://mimir:443/api/v1/push  bearer_token_file=/etc/t "
                             "ca_file=/etc/ca.pem cert_file=/c key_file=/k server_name=m timeout=3s");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->bearer_token_file, "/etc/t");
  EXPECT_EQ(e->ca_file, "/etc/ca.pem");
  EXPECT_EQ(e->cert_file, "/c");
  EXPECT_EQ(e->key_file, "/k");
  EXPECT_EQ(e->server_name, "m");
  EXPECT_EQ(e->timeout_ms, 3000);
}

TEST(PushEndpointTest, AnOtlpUrlWithoutAPathGetsTheMetricsPath) {
  auto e = ParsePushEndpoint(PushProtocol::kOtlp, "--otlp-endpoint", "http://collector:4318");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->url.path, "/v1/metrics");
  EXPECT_EQ(e->url.text, "http://collector:4318/v1/metrics");
  auto vm = ParsePushEndpoint(PushProtocol::kOtlp, "--otlp-endpoint",
                              "http://vm:8428/opentelemetry/v1/metrics");
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(vm->url.path, "/opentelemetry/v1/metrics");
  auto rw = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url", "http://p:9090");
  ASSERT_TRUE(rw.ok());
  EXPECT_EQ(rw->url.path, "/");
}

TEST(PushEndpointTest, RefusesOptionsThatDoNotGoTogetherNamingTheFlag) {
  auto refused = [](const std::string& text) {
    auto e = ParsePushEndpoint(PushProtocol::kRemoteWrite, "--remote-write-url", text);
    EXPECT_FALSE(e.ok()) << text;
    return std::string(e.status().message());
  };
  EXPECT_THAT(refused("http://h/ colour=blue"), HasSubstr("unknown option \"colour\""));
  EXPECT_THAT(refused("http://h/ ca_file"), HasSubstr("is not KEY=VALUE"));
  EXPECT_THAT(refused("https://h/ bearer_token_file=/t basic_auth_username=u basic_auth_password_file=/p"),
              HasSubstr("not both"));
  EXPECT_THAT(refused("https://h/ basic_auth_username=u"), HasSubstr("go together"));
  EXPECT_THAT(refused("https://h/ cert_file=/c"), HasSubstr("go together"));
  EXPECT_THAT(refused("http://h/ ca_file=/ca"), HasSubstr("need an https:// URL"));
  EXPECT_THAT(refused("http://h/ timeout=fast"), HasSubstr("timeout \"fast\""));
  EXPECT_THAT(refused(""), HasSubstr("--remote-write-url is empty"));
  EXPECT_THAT(refused("h:9090"), HasSubstr("--remote-write-url \"h:9090\" is not an http://"));
}

}  // namespace
}  // namespace torchmon::server

// torchmond's command line.
#include "server/daemon/options.h"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "server/daemon/build_info.h"
#include "gtest/gtest.h"
#include "torchmon/protocol/protocol.h"
#include "parse_daemon_flags.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;

TEST(DaemonOptionsTest, DefaultsWithoutFlags) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_THAT(o->listen, SizeIs(1));
  EXPECT_EQ(o->listen[0].kind, ListenAddress::Kind::kUnix);
  EXPECT_EQ(o->listen[0].path, protocol::DefaultSocketPath());
  EXPECT_EQ(o->metrics_listen, "127.0.0.1:9464");
  EXPECT_EQ(o->aggregator.grace_ms, 2'000);
  EXPECT_EQ(o->aggregator.series_ttl_ms, 600'000);
  EXPECT_EQ(o->aggregator.max_future_skew_ms, 60'000);
  EXPECT_EQ(o->aggregator.history_windows, 120u);  // docs/semantics.md, --help
  EXPECT_EQ(o->max_events, 10'000u);
  EXPECT_EQ(o->socket_mode, 0600u);
  EXPECT_EQ(o->drain_timeout_ms, 1'000);
  EXPECT_EQ(o->aggregator.max_series, 1'000'000u);  // docs/reliability.md, --help
  EXPECT_EQ(o->ingest.limits.max_series_per_stream, 100'000u);
  EXPECT_EQ(o->ingest.max_streams, 4096);
  EXPECT_EQ(o->max_message_bytes, 16 << 20);
  EXPECT_FALSE(o->help);
  EXPECT_FALSE(o->version);
}

TEST(DaemonOptionsTest, UsageStatesTheDefaultsTheParserApplies) {
  auto o = Parse({});
  ASSERT_TRUE(o.ok());
  const std::string usage = DaemonUsage();
  EXPECT_THAT(usage, HasSubstr(absl::StrCat("Closed windows kept per series for queries. Default: ",
                                            o->aggregator.history_windows, "\n")));
  EXPECT_THAT(usage, HasSubstr("samples before it closes. Default: 2s\n"));
  EXPECT_THAT(usage, HasSubstr("long without samples. Default: 10m\n"));
  EXPECT_THAT(usage, HasSubstr("are counted as skewed. Default: 60s\n"));
  EXPECT_THAT(usage, HasSubstr("event log. Default: 10000\n"));
  EXPECT_THAT(usage, HasSubstr("Default: 127.0.0.1:9464\n"));
  EXPECT_THAT(usage, HasSubstr(absl::StrCat("counted. Default: ", o->aggregator.max_series, "\n")));
  EXPECT_THAT(usage, HasSubstr(absl::StrCat("budget). Default: ", o->ingest.limits.max_series_per_stream, "\n")));
  EXPECT_THAT(usage, HasSubstr(absl::StrCat("at once. Default: ", o->ingest.max_streams, "\n")));
  EXPECT_THAT(usage, HasSubstr(absl::StrCat("accepted. Default: ", o->max_message_bytes, " (16 MiB)\n")));
  EXPECT_THAT(usage, HasSubstr(absl::StrCat("Default: unix://", protocol::DefaultSocketPath())));
}

TEST(DaemonOptionsTest, EveryFlagTheHelpListsIsOneTheParserKnows) {
  // --help is written from the parser's table: each "--flag VALUE" it shows
  // is parsed (a bad value may be refused, never as an unknown flag).
  const std::string usage = DaemonUsage();
  int flags = 0;
  for (size_t at = usage.find("\n  -"); at != std::string::npos; at = usage.find("\n  -", at + 1)) {
    const size_t end = usage.find_first_of(" \n", at + 3);
    const std::string flag = usage.substr(at + 3, end - at - 3);
    if (flag == "-h,") continue;
    ++flags;
    // "--flag VALUE": one space, then the value's name; a switch has none.
    const bool takes_value = usage[end] == ' ' && usage[end + 1] != ' ';
    const auto o = takes_value ? Parse({flag, "x"}) : Parse({flag});
    if (!o.ok()) {
      EXPECT_THAT(o.status().message(), Not(HasSubstr("unknown flag"))) << flag;
    }
  }
  EXPECT_GE(flags, 25);
}

TEST(DaemonOptionsTest, ParsesTheLimitFlags) {
  auto o = Parse({"--max-series", "500", "--max-series-per-client=50", "--max-streams", "8",
                  "--max-message-size", "65536", "--series-ttl", "2m"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->aggregator.max_series, 500u);
  EXPECT_EQ(o->ingest.limits.max_series_per_stream, 50u);
  EXPECT_EQ(o->ingest.max_streams, 8);
  EXPECT_EQ(o->max_message_bytes, 65536);
  // Re-sent batches are recognised for as long as series are kept.
  EXPECT_EQ(o->ingest.client_memory_ms, 120'000);
}

TEST(DaemonOptionsTest, MessageSizeOutsideItsBoundsIsRefusedNamingTheFlag) {
  EXPECT_THAT(ErrorOf({"--max-message-size", "100"}),
              HasSubstr("--max-message-size 100 is outside [4096, 1073741824] bytes"));
  EXPECT_THAT(ErrorOf({"--max-streams", "0"}), HasSubstr("--max-streams \"0\" is not a positive integer"));
}

TEST(DaemonOptionsTest, ParsesEveryFlag) {
  auto o = Parse({"--listen", "unix:///tmp/t.sock", "--listen=:0", "--metrics-listen",
                  "0.0.0.0:9000", "--grace", "500ms", "--series-ttl=5m", "--history", "10",
                  "--max-skew", "2s", "--max-events", "5", "--socket-mode", "0660",
                  "--drain-timeout", "3s", "--version", "-h"});
  ASSERT_TRUE(o.ok()) << o.status();
  ASSERT_THAT(o->listen, SizeIs(2));
  EXPECT_EQ(o->listen[0].kind, ListenAddress::Kind::kUnix);
  EXPECT_EQ(o->listen[0].path, "/tmp/t.sock");
  EXPECT_EQ(o->listen[1].kind, ListenAddress::Kind::kTcp);
  EXPECT_EQ(o->metrics_listen, "0.0.0.0:9000");
  EXPECT_EQ(o->aggregator.grace_ms, 500);
  EXPECT_EQ(o->aggregator.series_ttl_ms, 300'000);
  EXPECT_EQ(o->aggregator.history_windows, 10u);
  EXPECT_EQ(o->aggregator.max_future_skew_ms, 2'000);
  EXPECT_EQ(o->max_events, 5u);
  EXPECT_EQ(o->socket_mode, 0660u);
  EXPECT_EQ(o->drain_timeout_ms, 3'000);
  EXPECT_TRUE(o->version);
  EXPECT_TRUE(o->help);
}

TEST(DaemonOptionsTest, VerboseIsOffUnlessGiven) {
  auto plain = Parse({"--version"});
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->verbose);
  auto verbose = Parse({"--version", "--verbose"});
  ASSERT_TRUE(verbose.ok()) << verbose.status();
  EXPECT_TRUE(verbose->version);
  EXPECT_TRUE(verbose->verbose);
}

// What `torchmond --version --verbose` prints is what the linked libraries
// report of themselves, not a list written at build time.
TEST(VerboseVersionTest, NamesEachLinkedLibraryWithTheVersionItReports) {
  const std::string text = VerboseVersion();
  EXPECT_THAT(text, ::testing::StartsWith(absl::StrCat("torchmond ", TORCHMON_VERSION, "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\ngRPC: ", grpc::Version(), "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nzlib: ", zlibVersion(), "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nOpenSSL: ", OpenSSL_version(OPENSSL_VERSION), "\n")));
  EXPECT_THAT(text, HasSubstr(absl::StrCat("\nlibcurl: ", curl_version_info(CURLVERSION_NOW)->version,
                                           "\n")));
  EXPECT_THAT(text, HasSubstr("\nprotobuf: 3."));
  EXPECT_THAT(text, HasSubstr("\nC++ runtime: "));
  // The test build links the system's libraries; the portable build lists
  // the Debian source packages it bundles instead (tests/release).
  EXPECT_THAT(text, HasSubstr("\nlinked: the system's shared libraries\n"));
}

TEST(DaemonOptionsTest, LongHelpSetsHelp) {
  auto o = Parse({"--help"});
  ASSERT_TRUE(o.ok());
  EXPECT_TRUE(o->help);
}

TEST(DaemonOptionsTest, UnknownFlagIsRefusedNamingIt) {
  EXPECT_THAT(ErrorOf({"--grace", "1s", "--bogus=3"}), HasSubstr("\"--bogus=3\""));
}

TEST(DaemonOptionsTest, DurationWithoutUnitIsRefusedNamingTheFlag) {
  const std::string error = ErrorOf({"--grace", "60"});
  EXPECT_THAT(error, HasSubstr("--grace"));
  EXPECT_THAT(error, HasSubstr("\"60\""));
}

TEST(DaemonOptionsTest, FlagWithoutValueIsRefused) {
  EXPECT_THAT(ErrorOf({"--max-skew"}), HasSubstr("--max-skew needs a value"));
}

TEST(DaemonOptionsTest, CountsMustBePositiveIntegers) {
  EXPECT_THAT(ErrorOf({"--history", "0"}), HasSubstr("--history"));
  EXPECT_THAT(ErrorOf({"--max-events", "ten"}), HasSubstr("\"ten\""));
}

TEST(DaemonOptionsTest, SeriesTtlBelowOneSecondIsRefused) {
  EXPECT_THAT(ErrorOf({"--series-ttl", "999ms"}), HasSubstr("--series-ttl"));
  EXPECT_TRUE(Parse({"--series-ttl", "1s"}).ok());
}

TEST(DaemonOptionsTest, SocketModeMustBeOctal) {
  EXPECT_THAT(ErrorOf({"--socket-mode", "0800"}), HasSubstr("\"0800\""));
  EXPECT_THAT(ErrorOf({"--socket-mode", "01777"}), HasSubstr("\"01777\""));
  auto o = Parse({"--socket-mode", "600"});
  ASSERT_TRUE(o.ok());
  EXPECT_EQ(o->socket_mode, 0600u);
}

TEST(DaemonOptionsTest, MetricsListenNeedsHostAndPort) {
  EXPECT_THAT(ErrorOf({"--metrics-listen", "localhost"}), HasSubstr("\"localhost\""));
}

TEST(DaemonOptionsTest, MetricsListenPortOnlyBindsLoopback) {
  auto o = Parse({"--metrics-listen", ":9464"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->metrics_listen, "127.0.0.1:9464");
}

TEST(ParseListenAddressTest, PortOnlyBindsLoopback) {
  auto a = ParseListenAddress(":0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->kind, ListenAddress::Kind::kTcp);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 0);
  EXPECT_EQ(a->ToGrpcUri(), "127.0.0.1:0");
}

TEST(ParseListenAddressTest, HostAndPortAreKept) {
  auto a = ParseListenAddress("0.0.0.0:50051");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "0.0.0.0");
  EXPECT_EQ(a->port, 50051);
  EXPECT_EQ(a->ToGrpcUri(), "0.0.0.0:50051");
}

TEST(ParseListenAddressTest, BracketedIpv6HostIsUnbracketedAndRebracketedForGrpc) {
  auto a = ParseListenAddress("[::1]:7000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->ToGrpcUri(), "[::1]:7000");
}

TEST(ParseListenAddressTest, UnixAddressTakesAnAbsolutePath) {
  auto a = ParseListenAddress("unix:///run/torchmon/d.sock");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->kind, ListenAddress::Kind::kUnix);
  EXPECT_EQ(a->path, "/run/torchmon/d.sock");
  EXPECT_EQ(a->ToGrpcUri(), "unix:///run/torchmon/d.sock");
  auto single_slash = ParseListenAddress("unix:/tmp/x.sock");
  ASSERT_TRUE(single_slash.ok());
  EXPECT_EQ(single_slash->path, "/tmp/x.sock");
}

TEST(ParseListenAddressTest, RelativeUnixPathIsRefused) {
  for (const char* text : {"unix:relative.sock", "unix://relative.sock", "unix:"}) {
    auto a = ParseListenAddress(text);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("absolute")) << text;
  }
}

TEST(ParseListenAddressTest, RefusesBadPorts) {
  EXPECT_FALSE(ParseListenAddress("localhost").ok());
  EXPECT_FALSE(ParseListenAddress("localhost:65536").ok());
  EXPECT_FALSE(ParseListenAddress("localhost:-1").ok());
  EXPECT_FALSE(ParseListenAddress("localhost:http").ok());
}

TEST(DaemonOptionsTest, InvalidListenAddressIsRefusedNamingIt) {
  EXPECT_THAT(ErrorOf({"--listen", "unix:rel"}), HasSubstr("\"unix:rel\""));
}

}  // namespace
}  // namespace torchmon::server

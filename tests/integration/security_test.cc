// Security integration tests (docs/security.md): the real torchmond with its
// security flags, over a temp Unix socket and loopback TCP, reached by the
// real client library, torchmonctl's channel code and raw HTTP. Certificates
// are made with openssl at test time. Every wait is a bounded poll.
#include <grp.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <iostream>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/channel.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/test_pki.h"
#include "torchmon/client.h"

namespace torchmon::testing {
namespace {

using ::testing::HasSubstr;

int CountSubstr(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

constexpr char kToken[] = "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f";
constexpr char kOtherToken[] = "0000000000000000ffffffffffffffff";
// An unprivileged user and group that exist on Debian.
constexpr uid_t kNobody = 65534;

void WriteFile(const std::string& path, const std::string& content, mode_t mode) {
  {
    std::ofstream out(path, std::ios::trunc);
    out << content;
  }
  ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
}

class SecurityTest : public DaemonFixture {
 protected:
  std::string token_file() const { return dir_.path() + "/token"; }
  std::string other_token_file() const { return dir_.path() + "/other-token"; }

  void SetUp() override {
    WriteFile(token_file(), absl::StrCat("# the daemon's token\n", kToken, "\n"), 0600);
    WriteFile(other_token_file(), absl::StrCat(kOtherToken, "\n"), 0600);
  }

  void StartWithToken(std::vector<std::string> more = {}) {
    std::vector<std::string> flags = FastWindows();
    flags.insert(flags.end(), {"--auth-token-file", token_file()});
    flags.insert(flags.end(), more.begin(), more.end());
    StartDaemon(flags);
  }

  static ClientSecurity WithTokenFile(const std::string& file) {
    ClientSecurity security;
    security.token_file = file;
    return security;
  }

  ClientOptions SecureOptions(const std::string& target, ClientSecurity security) const {
    ClientOptions o;
    o.target = target;
    o.labels = {{"rank", "0"}};
    o.labels_from_environment = false;
    o.security = std::move(security);
    o.security_from_environment = false;
    o.log_to_stderr = false;
    return o;
  }

  // ListSeries over `target` with `security`; the call's status.
  grpc::Status ListSeries(const std::string& target, const ClientSecurity& security,
                          v1::ListSeriesResponse* response = nullptr) {
    auto stub = SecureQueryStub(target, security);
    EXPECT_TRUE(stub.ok()) << stub.status();
    if (!stub.ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "no stub");
    v1::ListSeriesRequest request;
    v1::ListSeriesResponse ignored;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    return (*stub)->ListSeries(&context, request, response != nullptr ? response : &ignored);
  }

  // Every error the client has reported within `timeout` once one of them
  // contains `needle`, or all it reported if none did.
  static std::vector<std::string> WaitForError(Client& client, const std::string& needle,
                                               std::chrono::milliseconds timeout) {
    std::vector<std::string> errors;
    WaitFor(
        [&] {
          for (std::string& e : client.TakeErrors()) errors.push_back(std::move(e));
          for (const std::string& e : errors) {
            if (absl::StrContains(e, needle)) return true;
          }
          return false;
        },
        timeout);
    return errors;
  }

  size_t SeriesCount() {
    v1::ListSeriesResponse response;
    EXPECT_TRUE(ListSeries(daemon_->unix_target(), WithTokenFile(token_file()), &response).ok());
    return static_cast<size_t>(response.series_size());
  }
};

// --- bearer token ---

TEST_F(SecurityTest, IngestWithoutTokenIsRefusedAndTheClientSaysWhy) {
  StartWithToken();
  Client client(SecureOptions(daemon_->unix_target(), {}));
  Stat stat(client, "train.loss", {Aggregation::MEAN}, std::chrono::milliseconds(kWindowMs));
  stat.add(1.0);
  EXPECT_FALSE(client.Flush(std::chrono::seconds(2)).ok());
  const std::vector<std::string> errors =
      WaitForError(client, "UNAUTHENTICATED", std::chrono::seconds(10));
  EXPECT_THAT(::testing::PrintToString(errors), HasSubstr("carried none"));
  EXPECT_EQ(SeriesCount(), 0u);
  EXPECT_GE(Scraped(Scrape(), "torchmon_daemon_rpcs_unauthenticated_total", {}), 1.0);
}

TEST_F(SecurityTest, IngestWithAWrongTokenIsRefused) {
  StartWithToken();
  Client client(SecureOptions(daemon_->unix_target(), WithTokenFile(other_token_file())));
  Stat stat(client, "train.loss", {Aggregation::MEAN}, std::chrono::milliseconds(kWindowMs));
  stat.add(1.0);
  EXPECT_FALSE(client.Flush(std::chrono::seconds(2)).ok());
  const std::vector<std::string> errors =
      WaitForError(client, "UNAUTHENTICATED", std::chrono::seconds(10));
  EXPECT_THAT(::testing::PrintToString(errors), HasSubstr("refused the bearer token"));
  EXPECT_EQ(SeriesCount(), 0u);
}

TEST_F(SecurityTest, IngestWithTheRightTokenIsAccepted) {
  StartWithToken();
  Client client(SecureOptions(daemon_->unix_target(), WithTokenFile(token_file())));
  Stat stat(client, "train.loss", {Aggregation::MEAN}, std::chrono::milliseconds(kWindowMs));
  stat.add(1.0);
  ASSERT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
  EXPECT_TRUE(client.TakeErrors().empty());
  EXPECT_EQ(SeriesCount(), 1u);
}

TEST_F(SecurityTest, TokenGivenDirectlyWinsOverTheFile) {
  StartWithToken();
  ClientSecurity security = WithTokenFile(other_token_file());
  security.token = kToken;
  EXPECT_TRUE(ListSeries(daemon_->unix_target(), security).ok());
}

TEST_F(SecurityTest, QueryWithoutTokenIsRefusedOnEveryListener) {
  StartWithToken();
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    const grpc::Status status = ListSeries(target, {});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << target;
    EXPECT_THAT(status.error_message(), HasSubstr("requires a bearer token")) << target;
  }
}

TEST_F(SecurityTest, QueryWithAWrongTokenIsRefusedOnEveryListener) {
  StartWithToken();
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    const grpc::Status status = ListSeries(target, WithTokenFile(other_token_file()));
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << target;
    EXPECT_THAT(status.error_message(), HasSubstr("refused the bearer token")) << target;
    EXPECT_THAT(status.error_message(), ::testing::Not(HasSubstr(kOtherToken)));
  }
}

TEST_F(SecurityTest, QueryWithTheRightTokenIsServedOnEveryListener) {
  StartWithToken();
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    const grpc::Status status = ListSeries(target, WithTokenFile(token_file()));
    EXPECT_TRUE(status.ok()) << target << ": " << status.error_message();
  }
}

TEST_F(SecurityTest, AnyTokenOfTheFileIsAcceptedSoTokensCanBeRotated) {
  WriteFile(token_file(), absl::StrCat(kToken, "\n", kOtherToken, "\n"), 0600);
  StartWithToken();
  EXPECT_TRUE(ListSeries(daemon_->unix_target(), WithTokenFile(other_token_file())).ok());
}

TEST_F(SecurityTest, TokenFileOthersCanReadIsRefusedAtStart) {
  ASSERT_EQ(chmod(token_file().c_str(), 0644), 0);
  auto d = DaemonProcess::Start(dir_, {"--auth-token-file", token_file()});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("--auth-token-file"));
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("mode 0644"));
}

TEST_F(SecurityTest, ClientRefusesToSendTheTokenInClearTextToAnotherHost) {
  ClientOptions options = SecureOptions("192.0.2.1:7070", WithTokenFile(token_file()));
  Client client(options);
  const std::vector<std::string> errors = client.TakeErrors();
  EXPECT_THAT(::testing::PrintToString(errors), HasSubstr("refusing to send the bearer token"));
}

// --- TLS ---

class TlsTest : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    auto pki = MakeTestPki(dir_.path());
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *std::move(pki);
  }

  std::vector<std::string> TlsFlags(bool require_client_certificate) const {
    std::vector<std::string> flags = {"--tls-cert", pki_.server_cert, "--tls-key", pki_.server_key};
    if (require_client_certificate) flags.insert(flags.end(), {"--tls-client-ca", pki_.ca_cert});
    return flags;
  }

  ClientSecurity ClientTls(const std::string& ca, const std::string& cert = "",
                           const std::string& key = "") const {
    ClientSecurity security;
    security.tls_ca_file = ca;
    security.tls_cert_file = cert;
    security.tls_key_file = key;
    return security;
  }

  TestPki pki_;
};

TEST_F(TlsTest, ClientWithTheRightCertificateIsServed) {
  StartDaemon(TlsFlags(true));
  const grpc::Status status =
      ListSeries(daemon_->tcp_target(), ClientTls(pki_.ca_cert, pki_.client_cert, pki_.client_key));
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST_F(TlsTest, ClientWithoutACertificateIsRefused) {
  StartDaemon(TlsFlags(true));
  const grpc::Status status = ListSeries(daemon_->tcp_target(), ClientTls(pki_.ca_cert));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, ClientWithACertificateFromAnotherCaIsRefused) {
  StartDaemon(TlsFlags(true));
  const grpc::Status status =
      ListSeries(daemon_->tcp_target(),
                 ClientTls(pki_.ca_cert, pki_.other_client_cert, pki_.other_client_key));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, PlaintextClientIsRefusedByATlsListener) {
  StartDaemon(TlsFlags(false));
  const grpc::Status status = ListSeries(daemon_->tcp_target(), {});
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, ClientRefusesADaemonWhoseCertificateItsCaDidNotSign) {
  StartDaemon(TlsFlags(false));
  const grpc::Status status = ListSeries(daemon_->tcp_target(), ClientTls(pki_.other_ca_cert));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
}

TEST_F(TlsTest, IngestOverTlsWithAClientCertificateIsAccepted) {
  StartDaemon(TlsFlags(true));
  Client client(SecureOptions(daemon_->tcp_target(),
                              ClientTls(pki_.ca_cert, pki_.client_cert, pki_.client_key)));
  Stat stat(client, "train.loss", {Aggregation::MEAN}, std::chrono::milliseconds(kWindowMs));
  stat.add(1.0);
  EXPECT_TRUE(client.Flush(std::chrono::seconds(10)).ok());
  EXPECT_EQ(OnlySeries("train.loss").counters().accepted(), 1u);
}

TEST_F(TlsTest, TokenIsRequiredOverTlsToo) {
  std::vector<std::string> flags = TlsFlags(false);
  flags.insert(flags.end(), {"--auth-token-file", token_file()});
  StartDaemon(flags);
  EXPECT_EQ(ListSeries(daemon_->tcp_target(), ClientTls(pki_.ca_cert)).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  ClientSecurity with_token = ClientTls(pki_.ca_cert);
  with_token.token_file = token_file();
  EXPECT_TRUE(ListSeries(daemon_->tcp_target(), with_token).ok());
}

// A loop of bad clients must not flood the daemon's log: each kind of
// mistake is logged once, then counted and summed up (once a minute, and at
// shutdown). 3 × 100 bad clients: without the rate limit, gRPC alone writes
// a line per refused handshake (~150 bytes each).
TEST_F(TlsTest, ALoopOfBadClientsCostsTheLogALineOrTwoPerKind) {
  std::vector<std::string> flags = TlsFlags(false);
  flags.insert(flags.end(), {"--auth-token-file", token_file()});
  StartDaemon(flags);
  constexpr int kAttempts = 100;
  // The right token, and batches the daemon refuses parts of: samples for
  // a stat the stream never defined. First: a token accepted before is
  // never slowed by the bad clients below, of the same user.
  auto channel = SecureChannel(daemon_->unix_target(), WithTokenFile(token_file()));
  ASSERT_TRUE(channel.ok()) << channel.status();
  auto ingest = v1::Ingest::NewStub(*channel);
  for (int i = 0; i < kAttempts; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    auto stream = ingest->Stream(&context);
    v1::IngestBatch batch;
    batch.set_sequence(1);
    v1::SampleBlock* block = batch.add_samples();
    block->set_stat_id(7);
    block->set_base_time_us(1);
    block->add_values(1.0);
    ASSERT_TRUE(stream->Write(batch));
    v1::IngestAck ack;
    ASSERT_TRUE(stream->Read(&ack));
    EXPECT_EQ(ack.errors_size(), 1);
    stream->WritesDone();
    stream->Finish().IgnoreError();
  }
  int checked = 0;
  for (int i = 0; i < kAttempts; ++i) {
    // Plain text to the TLS listener.
    EXPECT_EQ(ListSeries(daemon_->tcp_target(), {}).error_code(), grpc::StatusCode::UNAVAILABLE);
    // Another token: checked 5 times in a row, then turned away unchecked
    // (docs/security.md, "Throttling").
    const grpc::StatusCode code =
        ListSeries(daemon_->unix_target(), WithTokenFile(other_token_file())).error_code();
    EXPECT_THAT(code, ::testing::AnyOf(grpc::StatusCode::UNAUTHENTICATED,
                                       grpc::StatusCode::UNAVAILABLE));
    if (code == grpc::StatusCode::UNAUTHENTICATED) ++checked;
  }
  EXPECT_GE(checked, 6);
  EXPECT_LT(checked, kAttempts);
  ASSERT_TRUE(daemon_->Stop(SIGTERM, std::chrono::seconds(20)).ok());
  const std::string log = daemon_->Stderr();
  std::cout << "daemon stderr after " << 3 * kAttempts << " bad clients (" << log.size()
            << " bytes):\n" << log;
  // Each kind once at once, once summed up at shutdown, and the start and
  // stop lines: a bound that a line per attempt breaks many times over.
  EXPECT_LT(log.size(), 3000u);
  for (const char* kind : {"refused a TLS handshake: ",
                           "refused a call without an accepted bearer token: ",
                           "refused parts of an ingest batch: "}) {
    EXPECT_EQ(CountSubstr(log, kind), 2) << kind;
  }
  // Those turned away unchecked are counted, not logged.
  EXPECT_THAT(log, HasSubstr(absl::StrCat("refused a call without an accepted bearer token: ",
                                          checked - 1, " more in the last")));
  EXPECT_THAT(log, HasSubstr(absl::StrCat("refused parts of an ingest batch: ", kAttempts - 1,
                                          " more in the last")));
}

TEST_F(TlsTest, UnixSocketStaysPlainBesideATlsListener) {
  StartDaemon(TlsFlags(true));
  EXPECT_TRUE(ListSeries(daemon_->unix_target(), {}).ok());
}

// --- /metrics ---

class MetricsAuthTest : public SecurityTest {
 protected:
  void SetUp() override {
    SecurityTest::SetUp();
    WriteFile(auth_file(), "# scrapers\nprometheus:s3cret:with:colons\n", 0600);
  }
  std::string auth_file() const { return dir_.path() + "/metrics-auth"; }

  absl::StatusOr<HttpResponse> Get(const std::vector<std::string>& headers) {
    return HttpGetWithHeaders(daemon_->metrics_address(), "/metrics", headers);
  }
  static std::string Basic(const std::string& user_password) {
    return absl::StrCat("Authorization: Basic ", absl::Base64Escape(user_password));
  }
};

TEST_F(MetricsAuthTest, ScrapeWithoutCredentialsIsRefusedWithAChallenge) {
  StartDaemon({"--metrics-auth-file", auth_file()});
  auto response = Get({});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 401);
  EXPECT_THAT(response->head, HasSubstr("WWW-Authenticate: Basic realm=\"torchmond\""));
  EXPECT_THAT(response->body, ::testing::Not(HasSubstr("torchmon_daemon")));
}

TEST_F(MetricsAuthTest, ScrapeWithWrongCredentialsIsRefused) {
  // Each on a daemon of its own: a second failure in a row would be
  // throttled (the next test).
  for (const std::string& header : {Basic("prometheus:wrong"), Basic("someone:s3cret:with:colons"),
                                    std::string("Authorization: Basic not-base64!"),
                                    absl::StrCat("Authorization: Bearer ", kToken)}) {
    daemon_.reset();
    StartDaemon({"--metrics-auth-file", auth_file()});
    auto response = Get({header});
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(response->status, 401) << header;
  }
}

TEST_F(MetricsAuthTest, AnAddressThatFailedIsTurnedAwayUncheckedForAWhile) {
  StartDaemon({"--metrics-auth-file", auth_file()});
  const auto start = std::chrono::steady_clock::now();
  auto failed = Get({Basic("prometheus:wrong")});
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_EQ(failed->status, 401);
  // Until the backoff (1 s after one failure) has passed, nothing from this
  // address is checked: not a guess, not even the right password.
  for (const std::string& header :
       {Basic("prometheus:guess"), Basic("prometheus:s3cret:with:colons")}) {
    auto response = Get({header});
    ASSERT_TRUE(response.ok()) << response.status();
    if (std::chrono::steady_clock::now() - start > std::chrono::milliseconds(900)) {
      GTEST_SKIP() << "this machine took most of the 1 s backoff for two requests";
    }
    EXPECT_EQ(response->status, 429) << header;
    EXPECT_THAT(response->head, HasSubstr("Retry-After: 1"));
    EXPECT_THAT(response->body, HasSubstr("too many failed attempts from 127.0.0.1; retry in 1 s"));
  }
  // A request without credentials is no guess: it gets the challenge.
  auto challenge = Get({});
  ASSERT_TRUE(challenge.ok());
  EXPECT_EQ(challenge->status, 401);
}

TEST_F(MetricsAuthTest, ScrapeWithTheRightCredentialsIsServedAndRefusalsAreCounted) {
  StartDaemon({"--metrics-auth-file", auth_file()});
  ASSERT_TRUE(Get({}).ok());
  auto response = Get({Basic("prometheus:s3cret:with:colons")});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(ScrapeValue(response->body, "torchmon_daemon_scrapes_unauthorized_total", {}).value(),
            1.0);
}

// --- Unix socket ---

using UnixSocketTest = SecurityTest;

TEST_F(UnixSocketTest, SocketIsNeverOpenToOthersEvenUnderAPermissiveUmask) {
  // Watch the directory and look at the socket the moment it appears: the
  // daemon inherits umask 0, under which a plain bind would make it 0777.
  const int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(inotify_add_watch(watch, dir_.path().c_str(), IN_CREATE), 0);
  std::atomic<bool> stop{false};
  std::vector<mode_t> seen;
  std::thread watcher([&] {
    const std::string socket = dir_.path() + "/torchmond.sock";
    while (!stop.load()) {
      pollfd p{watch, POLLIN, 0};
      if (poll(&p, 1, 10) <= 0) continue;
      char events[4096];
      while (read(watch, events, sizeof(events)) > 0) {
      }
      struct stat st;
      if (lstat(socket.c_str(), &st) == 0) seen.push_back(st.st_mode & 0777);
    }
  });
  const mode_t previous = umask(0);
  StartDaemon();
  umask(previous);
  stop.store(true);
  watcher.join();
  close(watch);
  ASSERT_FALSE(seen.empty());
  for (mode_t mode : seen) EXPECT_EQ(mode & 0077, 0u) << std::oct << mode;
  struct stat st;
  ASSERT_EQ(stat(daemon_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(UnixSocketTest, SocketGroupIsAppliedWithAGroupMode) {
  const gid_t group = geteuid() == 0 ? kNobody : getegid();
  StartDaemon({"--socket-group", absl::StrCat(group)});
  struct stat st;
  ASSERT_EQ(stat(daemon_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, group);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
}

TEST_F(UnixSocketTest, MissingSocketDirectoryIsCreatedPrivate) {
  const std::string dir = dir_.path() + "/fresh";
  StartDaemon({"--listen", "unix://" + dir + "/d.sock"});
  struct stat st;
  ASSERT_EQ(stat(dir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
}

TEST_F(UnixSocketTest, SocketDirectoryOthersCanWriteIsRefused) {
  const std::string dir = dir_.path() + "/open";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  auto d = DaemonProcess::Start(dir_, {"--listen", "unix://" + dir + "/d.sock"});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("is writable by other users"));
}

TEST_F(UnixSocketTest, SocketDirectoryOwnedByAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a directory to another user";
  // As another user would have pre-created /tmp/torchmon-<uid>.
  const std::string dir = dir_.path() + "/squatted";
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.c_str(), kNobody, kNobody), 0);
  auto d = DaemonProcess::Start(dir_, {"--listen", "unix://" + dir + "/d.sock"});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("owned by uid 65534"));
}

// --- privileges ---

// "Uid:" or "Gid:" line of /proc/<pid>/status: real, effective, saved, fs.
std::string ProcStatusLine(pid_t pid, const std::string& key) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, key)) return line;
  }
  return "";
}

TEST_F(SecurityTest, UserFlagDropsPrivilegesOnceListening) {
  if (geteuid() != 0) GTEST_SKIP() << "--user switches users, which needs root";
  StartDaemon({"--user", "nobody"});
  EXPECT_EQ(ProcStatusLine(daemon_->pid(), "Uid:"), "Uid:\t65534\t65534\t65534\t65534");
  EXPECT_EQ(ProcStatusLine(daemon_->pid(), "Gid:"), "Gid:\t65534\t65534\t65534\t65534");
  // Its socket belongs to it, and it still serves.
  struct stat st;
  ASSERT_EQ(stat(daemon_->socket_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kNobody);
  EXPECT_TRUE(ListSeries(daemon_->unix_target(), {}).ok());
  EXPECT_TRUE(HttpGet(daemon_->metrics_address(), "/metrics").ok());
}

TEST_F(SecurityTest, UnknownUserIsRefusedAtStart) {
  auto d = DaemonProcess::Start(dir_, {"--user", "no-such-user-torchmon"});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("no such user"));
}

TEST_F(SecurityTest, RunningAsRootWithoutUserIsWarnedAbout) {
  if (geteuid() != 0) GTEST_SKIP() << "the warning is for root";
  StartDaemon();
  EXPECT_THAT(daemon_->Stderr(), HasSubstr("warning: running as root"));
}

}  // namespace
}  // namespace torchmon::testing

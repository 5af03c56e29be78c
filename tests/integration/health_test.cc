// The services generic gRPC tools rely on (grpc.health.v1, server reflection)
// and the HTTP /healthz probe endpoint, against the real torchmond: statuses
// per service, what a watcher sees when SIGTERM arrives, and that both gRPC
// services sit behind the same token and TLS as Ingest and Query
// (docs/grpc-tooling.md, docs/security.md). The health client is generated
// from proto/grpc/health, the reflection client from tests/support/proto;
// every wait is bounded by a deadline or a poll.
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "tests/support/daemon_fixture.h"
#include "tests/support/test_pki.h"
#include "torchmon/client.h"

namespace torchmon::testing {
namespace {

using ::grpc::health::v1::Health;
using ::grpc::health::v1::HealthCheckRequest;
using ::grpc::health::v1::HealthCheckResponse;
using ::grpc::reflection::v1alpha::ServerReflection;
using ::grpc::reflection::v1alpha::ServerReflectionRequest;
using ::grpc::reflection::v1alpha::ServerReflectionResponse;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsSupersetOf;

constexpr char kToken[] = "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f";
const char* const kTorchmonServices[] = {"", "torchmon.v1.Ingest", "torchmon.v1.Query"};

std::chrono::system_clock::time_point In(std::chrono::seconds s) {
  return std::chrono::system_clock::now() + s;
}

class HealthTest : public DaemonFixture {
 protected:
  std::string token_file() const { return dir_.path() + "/token"; }

  void SetUp() override {
    std::ofstream(token_file()) << kToken << "\n";
    ASSERT_EQ(chmod(token_file().c_str(), 0600), 0);
  }

  static ClientSecurity WithToken() {
    ClientSecurity security;
    security.token = kToken;
    return security;
  }

  // A channel as a torchmon client makes it: TLS and token from `security`.
  static std::shared_ptr<grpc::Channel> Channel(const std::string& target,
                                                const ClientSecurity& security = {}) {
    auto channel = SecureChannel(target, security);
    EXPECT_TRUE(channel.ok()) << channel.status();
    return channel.ok() ? *channel
                        : grpc::CreateChannel("refused", grpc::InsecureChannelCredentials());
  }

  static grpc::Status Check(const std::shared_ptr<grpc::Channel>& channel,
                            const std::string& service, HealthCheckResponse* response) {
    HealthCheckRequest request;
    request.set_service(service);
    grpc::ClientContext context;
    context.set_deadline(In(std::chrono::seconds(5)));
    return Health::NewStub(channel)->Check(&context, request, response);
  }

  // A health check of the daemon without the token, at `target`, is refused
  // saying why.
  static void ExpectHealthRefusedWithoutTheToken(const std::string& target) {
    HealthCheckResponse response;
    const grpc::Status health = Check(Channel(target), "", &response);
    EXPECT_EQ(health.error_code(), grpc::StatusCode::UNAUTHENTICATED) << target;
    EXPECT_THAT(health.error_message(), HasSubstr("requires a bearer token")) << target;
  }

  // One reflection request on its own stream; the call's status.
  static grpc::Status Reflect(const std::shared_ptr<grpc::Channel>& channel,
                              const ServerReflectionRequest& request,
                              ServerReflectionResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(In(std::chrono::seconds(5)));
    auto stream = ServerReflection::NewStub(channel)->ServerReflectionInfo(&context);
    stream->Write(request);
    stream->WritesDone();
    const bool got = stream->Read(response);
    const grpc::Status status = stream->Finish();
    if (status.ok() && !got) return grpc::Status(grpc::StatusCode::INTERNAL, "no response");
    return status;
  }

  static grpc::Status ListServices(const std::shared_ptr<grpc::Channel>& channel,
                                   std::vector<std::string>* names) {
    ServerReflectionRequest request;
    request.set_list_services("");
    ServerReflectionResponse response;
    const grpc::Status status = Reflect(channel, request, &response);
    for (const auto& service : response.list_services_response().service()) {
      names->push_back(service.name());
    }
    return status;
  }

  absl::StatusOr<HttpResponse> GetHealthz(const std::vector<std::string>& headers = {}) {
    return HttpGetWithHeaders(daemon_->metrics_address(), "/healthz", headers);
  }
};

// --- grpc.health.v1 ---

TEST_F(HealthTest, DaemonAndEachServiceAreServingOnEveryListener) {
  StartDaemon();
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    for (const char* service : kTorchmonServices) {
      HealthCheckResponse response;
      const grpc::Status status = Check(Channel(target), service, &response);
      ASSERT_TRUE(status.ok()) << target << " \"" << service << "\": " << status.error_message();
      EXPECT_EQ(response.status(), HealthCheckResponse::SERVING)
          << target << " \"" << service << "\"";
    }
  }
}

TEST_F(HealthTest, UnknownServiceIsNotFound) {
  StartDaemon();
  HealthCheckResponse response;
  const grpc::Status status =
      Check(Channel(daemon_->unix_target()), "torchmon.v1.NoSuchService", &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("\"torchmon.v1.NoSuchService\""));
  EXPECT_THAT(status.error_message(), HasSubstr("torchmon.v1.Query"));
}

TEST_F(HealthTest, WatchOfAnUnknownServiceAnswersServiceUnknown) {
  StartDaemon();
  grpc::ClientContext context;
  context.set_deadline(In(std::chrono::seconds(10)));
  HealthCheckRequest request;
  request.set_service("torchmon.v1.NoSuchService");
  auto watch = Health::NewStub(Channel(daemon_->unix_target()))->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(watch->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  context.TryCancel();
  EXPECT_EQ(watch->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

// A daemon with an ingest stream open, asked to drain it for up to a minute:
// its shutdown lasts as long as the test keeps the client alive.
class DrainingDaemonTest : public HealthTest {
 protected:
  void SetUp() override {
    HealthTest::SetUp();
    StartDrainingDaemon();
  }

  void StartDrainingDaemon() {
    StartDaemon({"--grace", "500ms", "--drain-timeout", "60s"});
    client_ = std::make_unique<Client>(Options());
    stat_ = std::make_unique<Stat>(*client_, "draining", std::vector<StatAggregation>{Aggregation::SUM},
                                   std::chrono::seconds(10));
    stat_->add(1.0);
    ASSERT_TRUE(client_->Flush(std::chrono::seconds(5)).ok());
  }

  // Ends the ingest stream, so that the drain ends; then the daemon must
  // exit 0, long before the minute of --drain-timeout.
  void EndDrainAndExpectExit() {
    stat_.reset();
    client_.reset();
    auto status = daemon_->Stop(SIGTERM, std::chrono::seconds(10));
    ASSERT_TRUE(status.ok()) << status.status() << "\n" << daemon_->Stderr();
    ASSERT_TRUE(WIFEXITED(*status)) << daemon_->Stderr();
    EXPECT_EQ(WEXITSTATUS(*status), 0) << daemon_->Stderr();
  }

  std::unique_ptr<Client> client_;
  std::unique_ptr<Stat> stat_;
};

// How one drain ended for the watchers of WatchSeesNotServing... below.
struct WatchEnds {
  std::vector<std::string> extras;  // what a watch was sent after NOT_SERVING
  std::vector<grpc::Status> ends;
};

TEST_F(DrainingDaemonTest, WatchSeesNotServingWhenSigtermArrivesAndEndsWithTheDrain) {
  // One drain, watched on every service; what the watches saw at their end.
  auto drain = [&]() -> WatchEnds {
    auto stub = Health::NewStub(Channel(daemon_->unix_target()));
    std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
    std::vector<std::unique_ptr<grpc::ClientReader<HealthCheckResponse>>> watches;
    for (const char* service : kTorchmonServices) {
      contexts.push_back(std::make_unique<grpc::ClientContext>());
      contexts.back()->set_deadline(In(std::chrono::seconds(30)));
      HealthCheckRequest request;
      request.set_service(service);
      watches.push_back(stub->Watch(contexts.back().get(), request));
      HealthCheckResponse first;
      EXPECT_TRUE(watches.back()->Read(&first)) << service;
      EXPECT_EQ(first.status(), HealthCheckResponse::SERVING) << service;
    }

    daemon_->Signal(SIGTERM);
    // While the ingest stream still drains, every watcher has been told.
    for (size_t i = 0; i < watches.size(); ++i) {
      HealthCheckResponse next;
      EXPECT_TRUE(watches[i]->Read(&next)) << kTorchmonServices[i];
      EXPECT_EQ(next.status(), HealthCheckResponse::NOT_SERVING) << kTorchmonServices[i];
    }
    auto healthz = GetHealthz();
    EXPECT_TRUE(healthz.ok()) << healthz.status();
    if (healthz.ok()) {
      EXPECT_EQ(healthz->status, 503);
    }

    // The watches end with the drain, without holding the shutdown back
    // (--drain-timeout is a minute), and nothing more was sent on them. They
    // are read while the daemon ends them, as a load balancer's watch is: a
    // synchronous client polls its connection only inside Read and Finish,
    // and one that first called them after the daemon had exited answered
    // what was still unread on a connection the daemon had closed, and saw
    // "Broken pipe" instead of the end (now and then; always when the
    // daemon lingered before exiting).
    WatchEnds seen{std::vector<std::string>(watches.size()),
                   std::vector<grpc::Status>(watches.size())};
    // Once the watches have ended, the client lets go of their connection,
    // as a client does whose calls are over. Kept, it held the daemon's exit
    // past the test's 10 s (three loops here, beside a CI run, met it at
    // their 19th, 20th and 51st run): the daemon's last calls had ended, but
    // gRPC waits for the ack of its GOAWAY's ping before it lets the
    // connection go, and this synchronous client, with no call left, no
    // longer reads the connection (ss: 51 bytes unread on the client's
    // side, the daemon in Server::Shutdown).
    std::thread reader([&] {
      for (size_t i = 0; i < watches.size(); ++i) {
        HealthCheckResponse extra;
        if (watches[i]->Read(&extra)) {
          seen.extras[i] = HealthCheckResponse::ServingStatus_Name(extra.status());
        }
        seen.ends[i] = watches[i]->Finish();
      }
      watches.clear();
      contexts.clear();
      stub.reset();
    });
    EndDrainAndExpectExit();
    reader.join();
    return seen;
  };

  // The daemon ends every watch OK, then gRPC closes the connection at once
  // (its last call ended, its final GOAWAY sent). A client whose transport
  // writes meanwhile (GRPC_TRACE=http shows the client's streams made
  // writable, flow-control updates, when a Read begins) gets EPIPE before it
  // has parsed the trailers it was sent, and every call still open on the
  // connection ends UNAVAILABLE "Broken pipe": the client's race with the
  // close, not the daemon's doing. CI's TSan suite met it now and then; 210
  // runs here under load did not. So a drain with a watch that ended so is
  // watched again, three drains at most: a daemon that does not end the
  // watches OK fails every one.
  constexpr int kAttempts = 3;
  for (int attempt = 1;; ++attempt) {
    if (attempt > 1) {
      StartDrainingDaemon();
      if (HasFatalFailure()) return;
    }
    const WatchEnds seen = drain();
    if (HasFailure()) return;
    bool raced = false;
    for (const grpc::Status& end : seen.ends) {
      raced |= end.error_code() == grpc::StatusCode::UNAVAILABLE &&
               absl::StrContains(end.error_message(), "Broken pipe");
    }
    if (raced && attempt < kAttempts) {
      std::cerr << "attempt " << attempt << ": a watch ended UNAVAILABLE \"Broken pipe\", the "
                << "client's race with the connection's close; draining again\n";
      continue;
    }
    for (size_t i = 0; i < seen.ends.size(); ++i) {
      EXPECT_EQ(seen.extras[i], "") << kTorchmonServices[i];
      EXPECT_TRUE(seen.ends[i].ok())
          << kTorchmonServices[i] << ": " << seen.ends[i].error_message();
    }
    return;
  }
}

TEST_F(DrainingDaemonTest, HealthzAnswers503WhileTheDaemonDrains) {
  auto before = GetHealthz();
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->status, 200);

  daemon_->Signal(SIGTERM);
  // The signal is handled asynchronously: poll until the answer changes.
  absl::StatusOr<HttpResponse> during = before;
  WaitFor(
      [&] {
        during = GetHealthz();
        return !during.ok() || during->status != 200;
      },
      std::chrono::seconds(10));
  ASSERT_TRUE(during.ok()) << during.status();
  EXPECT_EQ(during->status, 503);
  EXPECT_EQ(during->body, "shutting down\n");
  // Still draining: the series was not closed yet, the client still streams.
  EXPECT_THAT(daemon_->Stderr(), ::testing::Not(HasSubstr("stopped:")));
  EndDrainAndExpectExit();
}

// --- /healthz ---

TEST_F(HealthTest, HealthzAnswersOkWhileServing) {
  StartDaemon();
  auto response = GetHealthz();
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->body, "ok\n");
  EXPECT_THAT(response->head, HasSubstr("Content-Type: text/plain"));
}

TEST_F(HealthTest, HealthzNeedsNoCredentialsWhenMetricsAuthIsOn) {
  const std::string auth_file = dir_.path() + "/metrics-auth";
  std::ofstream(auth_file) << "prometheus:s3cret\n";
  ASSERT_EQ(chmod(auth_file.c_str(), 0600), 0);
  StartDaemon({"--metrics-auth-file", auth_file});

  auto metrics = HttpGetWithHeaders(daemon_->metrics_address(), "/metrics", {});
  ASSERT_TRUE(metrics.ok()) << metrics.status();
  EXPECT_EQ(metrics->status, 401);
  auto healthz = GetHealthz();
  ASSERT_TRUE(healthz.ok()) << healthz.status();
  EXPECT_EQ(healthz->status, 200);
  EXPECT_EQ(healthz->body, "ok\n");
  // Only the scrape was refused; the probe is neither refused nor counted.
  auto scrape = HttpGetWithHeaders(
      daemon_->metrics_address(), "/metrics",
      {absl::StrCat("Authorization: Basic ", absl::Base64Escape("prometheus:s3cret"))});
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  ASSERT_EQ(scrape->status, 200);
  EXPECT_EQ(ScrapeValue(scrape->body, "torchmon_daemon_scrapes_unauthorized_total", {}).value(),
            1.0);
}

TEST_F(HealthTest, PathsBelowHealthzAreNotFound) {
  StartDaemon();
  auto response = HttpGetWithHeaders(daemon_->metrics_address(), "/healthz/extra", {});
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->status, 404);
}

// --- server reflection ---

TEST_F(HealthTest, ReflectionListsEveryServiceOnEveryListener) {
  StartDaemon();
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    std::vector<std::string> names;
    const grpc::Status status = ListServices(Channel(target), &names);
    ASSERT_TRUE(status.ok()) << target << ": " << status.error_message();
    EXPECT_THAT(names, IsSupersetOf({"torchmon.v1.Ingest", "torchmon.v1.Query",
                                     "grpc.health.v1.Health",
                                     "grpc.reflection.v1alpha.ServerReflection"}))
        << target;
  }
}

TEST_F(HealthTest, ReflectionDescribesTheQueryService) {
  StartDaemon();
  ServerReflectionRequest request;
  request.set_file_containing_symbol("torchmon.v1.Query");
  ServerReflectionResponse response;
  const grpc::Status status = Reflect(Channel(daemon_->unix_target()), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_TRUE(response.has_file_descriptor_response()) << response.DebugString();
  std::vector<std::string> methods;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    for (const auto& service : file.service()) {
      if (file.package() + "." + service.name() != "torchmon.v1.Query") continue;
      for (const auto& method : service.method()) methods.push_back(method.name());
    }
  }
  EXPECT_THAT(methods, IsSupersetOf({"ListSeries", "GetWindows", "WatchWindows"}));
}

TEST_F(HealthTest, ReflectionOfAnUnknownSymbolAnswersAnError) {
  StartDaemon();
  ServerReflectionRequest request;
  request.set_file_containing_symbol("torchmon.v1.NoSuchThing");
  ServerReflectionResponse response;
  ASSERT_TRUE(Reflect(Channel(daemon_->unix_target()), request, &response).ok());
  ASSERT_TRUE(response.has_error_response()) << response.DebugString();
  EXPECT_EQ(response.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
}

// --- behind the token and TLS ---

// With --peer-labels off gRPC accepts the Unix socket's connections, with
// the credentials its token check in the transport needs.
TEST_F(HealthTest, HealthAndReflectionWithoutTheTokenAreRefusedOnEveryListener) {
  StartDaemon({"--auth-token-file", token_file(), "--peer-labels", "off"});
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    ExpectHealthRefusedWithoutTheToken(target);
    std::vector<std::string> names;
    const grpc::Status reflection = ListServices(Channel(target), &names);
    EXPECT_EQ(reflection.error_code(), grpc::StatusCode::UNAUTHENTICATED) << target;
    EXPECT_TRUE(names.empty()) << target;
  }
  EXPECT_EQ(Scraped(Scrape(), "torchmon_daemon_rpcs_unauthenticated_total", {}), 4.0);
}

// With --peer-labels on (the default) torchmond accepts the Unix socket's
// connections itself and gRPC serves them without transport security: the
// health service's handlers check the token, as torchmond's own services
// do; grpc++'s reflection (the schema, public in the .proto) answers there
// unchecked, and is refused on TCP (docs/security.md, "Bearer token").
TEST_F(HealthTest, OnASocketTorchmondAcceptsHealthIsRefusedWithoutTheTokenAndReflectionIsNot) {
  StartDaemon({"--auth-token-file", token_file()});
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    ExpectHealthRefusedWithoutTheToken(target);
  }
  std::vector<std::string> names;
  EXPECT_EQ(ListServices(Channel(daemon_->tcp_target()), &names).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(names.empty());
  ASSERT_TRUE(ListServices(Channel(daemon_->unix_target()), &names).ok());
  EXPECT_THAT(names, ::testing::Contains("torchmon.v1.Query"));
  EXPECT_EQ(Scraped(Scrape(), "torchmon_daemon_rpcs_unauthenticated_total", {}), 3.0);
}

TEST_F(HealthTest, HealthAndReflectionWithTheTokenAreServedOnEveryListener) {
  StartDaemon({"--auth-token-file", token_file()});
  for (const std::string& target : {daemon_->unix_target(), daemon_->tcp_target()}) {
    HealthCheckResponse response;
    const grpc::Status health = Check(Channel(target, WithToken()), "torchmon.v1.Query", &response);
    ASSERT_TRUE(health.ok()) << target << ": " << health.error_message();
    EXPECT_EQ(response.status(), HealthCheckResponse::SERVING) << target;
    std::vector<std::string> names;
    const grpc::Status reflection = ListServices(Channel(target, WithToken()), &names);
    ASSERT_TRUE(reflection.ok()) << target << ": " << reflection.error_message();
    EXPECT_THAT(names, Contains("grpc.health.v1.Health")) << target;
  }
}

TEST_F(HealthTest, HealthAndReflectionAreServedOverTlsOnly) {
  auto pki = MakeTestPki(dir_.path());
  ASSERT_TRUE(pki.ok()) << pki.status();
  StartDaemon({"--tls-cert", pki->server_cert, "--tls-key", pki->server_key, "--auth-token-file",
               token_file()});
  ClientSecurity tls = WithToken();
  tls.tls_ca_file = pki->ca_cert;

  HealthCheckResponse response;
  const grpc::Status health = Check(Channel(daemon_->tcp_target(), tls), "", &response);
  ASSERT_TRUE(health.ok()) << health.error_message();
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  std::vector<std::string> names;
  const grpc::Status reflection = ListServices(Channel(daemon_->tcp_target(), tls), &names);
  ASSERT_TRUE(reflection.ok()) << reflection.error_message();
  EXPECT_THAT(names, Contains("torchmon.v1.Query"));

  // Plain text to the TLS listener never reaches either service.
  auto plain = grpc::CreateChannel(daemon_->tcp_target(), grpc::InsecureChannelCredentials());
  EXPECT_EQ(Check(plain, "", &response).error_code(), grpc::StatusCode::UNAVAILABLE);
  std::vector<std::string> none;
  EXPECT_EQ(ListServices(plain, &none).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_TRUE(none.empty());
}

}  // namespace
}  // namespace torchmon::testing

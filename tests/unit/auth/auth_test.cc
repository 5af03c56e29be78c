// Bearer tokens and basic auth: parsing the files, checking what a call or
// a scrape carries.
#include "server/auth/auth.h"

#include <atomic>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace torchmon::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

constexpr char kToken[] = "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f";
constexpr char kOtherToken[] = "0123456789abcdef0123456789abcdef";

TEST(ConstantTimeEqualsTest, ComparesWholeStrings) {
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("secret", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secreT"));
  EXPECT_FALSE(ConstantTimeEquals("secret", "secret2"));
  EXPECT_FALSE(ConstantTimeEquals("secret2", "secret"));
  EXPECT_FALSE(ConstantTimeEquals("", "x"));
  EXPECT_FALSE(ConstantTimeEquals(std::string("a\0b", 3), std::string("a\0c", 3)));
}

std::vector<BearerToken> Unnamed(std::vector<std::string> tokens) {
  std::vector<BearerToken> out;
  for (std::string& token : tokens) out.push_back({"", std::move(token)});
  return out;
}

std::vector<std::pair<std::string, std::string>> Pairs(const std::vector<BearerToken>& tokens) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const BearerToken& t : tokens) out.emplace_back(t.name, t.token);
  return out;
}

TEST(ParseTokenFileTest, TakesEveryLineButEmptyOnesAndComments) {
  auto tokens =
      ParseTokenFile(absl::StrCat("# rotated 2024-05\n\n  ", kToken, "  \n", kOtherToken), "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(Pairs(*tokens), ElementsAre(Pair("", kToken), Pair("", kOtherToken)));
}

TEST(ParseTokenFileTest, ALineMayNameWhoHoldsItsToken) {
  auto tokens = ParseTokenFile(
      absl::StrCat("alice ", kToken, "\n\tci-bot@gpu-01 \t", kOtherToken, "\n", kToken), "f");
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_THAT(Pairs(*tokens), ElementsAre(Pair("alice", kToken), Pair("ci-bot@gpu-01", kOtherToken),
                                          Pair("", kToken)));
  for (const std::string& name :
       {std::string("al/ice"), std::string("al:ice"), std::string(65, 'a')}) {
    auto bad = ParseTokenFile(absl::StrCat(name, " ", kToken), "f");
    ASSERT_FALSE(bad.ok()) << name;
    EXPECT_THAT(std::string(bad.status().message()),
                HasSubstr("line 1: \"NAME TOKEN\" needs a NAME"));
  }
}

TEST(BearerTokenCheckerTest, TellsTheNameOfTheTokenGiven) {
  BearerTokenChecker checker({{"alice", kToken}, {"", kOtherToken}});
  auto alice = checker.Check(true, absl::StrCat("Bearer ", kToken));
  ASSERT_TRUE(alice.ok()) << alice.status();
  EXPECT_EQ(*alice, "alice");
  auto unnamed = checker.Check(true, absl::StrCat("Bearer ", kOtherToken));
  ASSERT_TRUE(unnamed.ok()) << unnamed.status();
  EXPECT_EQ(*unnamed, "");
}

TEST(ParseTokenFileTest, RefusesAFileWithoutToken) {
  auto tokens = ParseTokenFile("# nothing yet\n\n", "--auth-token-file /etc/t");
  ASSERT_FALSE(tokens.ok());
  EXPECT_THAT(std::string(tokens.status().message()), HasSubstr("/etc/t holds no token"));
}

TEST(ParseTokenFileTest, RefusesAShortTokenNamingTheLineNotTheToken) {
  auto tokens = ParseTokenFile(absl::StrCat(kToken, "\nhunter2\n"), "f");
  ASSERT_FALSE(tokens.ok());
  const std::string message(tokens.status().message());
  EXPECT_THAT(message, HasSubstr("line 2"));
  EXPECT_THAT(message, HasSubstr("openssl rand -hex 32"));
  EXPECT_THAT(message, Not(HasSubstr("hunter2")));
}

TEST(ParseTokenFileTest, RefusesSpacesAndControlCharactersInAToken) {
  EXPECT_FALSE(ParseTokenFile("name 0123456789 abcdef0123456789", "f").ok());
  EXPECT_FALSE(ParseTokenFile("0123456789 abcdef", "f").ok());  // a name, a short token
  EXPECT_FALSE(ParseTokenFile("0123456789\x01"
                              "abcdef0123456789",
                              "f")
                   .ok());
}

TEST(BearerTokenCheckerTest, AcceptsAnyOfItsTokens) {
  BearerTokenChecker checker(Unnamed({kToken, kOtherToken}));
  EXPECT_TRUE(checker.Check(true, absl::StrCat("Bearer ", kToken)).ok());
  EXPECT_TRUE(checker.Check(true, absl::StrCat("Bearer ", kOtherToken)).ok());
}

TEST(BearerTokenCheckerTest, SchemeIsCaseInsensitive) {
  BearerTokenChecker checker(Unnamed({kToken}));
  EXPECT_TRUE(checker.Check(true, absl::StrCat("bearer ", kToken)).ok());
  EXPECT_TRUE(checker.Check(true, absl::StrCat("BEARER ", kToken)).ok());
}

TEST(BearerTokenCheckerTest, MissingTokenIsUnauthenticatedAndSaysHowToGiveOne) {
  const absl::Status status = BearerTokenChecker(Unnamed({kToken})).Check(false, "").status();
  EXPECT_TRUE(absl::IsUnauthenticated(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("carried none"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("TORCHMON_TOKEN_FILE"));
}

TEST(BearerTokenCheckerTest, WrongTokenIsUnauthenticatedWithoutEchoingIt) {
  const absl::Status status =
      BearerTokenChecker(Unnamed({kToken})).Check(true, absl::StrCat("Bearer ", kOtherToken)).status();
  EXPECT_TRUE(absl::IsUnauthenticated(status));
  EXPECT_THAT(std::string(status.message()), HasSubstr("refused the bearer token"));
  EXPECT_THAT(std::string(status.message()), Not(HasSubstr(kOtherToken)));
}

TEST(BearerTokenCheckerTest, PrefixOrExtensionOfATokenIsRefused) {
  BearerTokenChecker checker(Unnamed({kToken}));
  const std::string token = kToken;
  EXPECT_FALSE(checker.Check(true, "Bearer " + token.substr(0, token.size() - 1)).ok());
  EXPECT_FALSE(checker.Check(true, "Bearer " + token + "0").ok());
  EXPECT_FALSE(checker.Check(true, "Bearer ").ok());
}

TEST(BearerTokenCheckerTest, OtherSchemesAreRefused) {
  BearerTokenChecker checker(Unnamed({kToken}));
  EXPECT_FALSE(checker.Check(true, kToken).ok());
  EXPECT_FALSE(checker.Check(true, absl::StrCat("Basic ", kToken)).ok());
  EXPECT_FALSE(checker.Check(true, absl::StrCat("Bearer", kToken)).ok());
}

TEST(TokenAuthMetadataProcessorTest, RefusalsAreCountedAndTheTokenLeftForTheNameLookUp) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(Unnamed({kToken})), refused, throttled);
  const std::string good = absl::StrCat("Bearer ", kToken);
  grpc::AuthMetadataProcessor::InputMetadata with_token = {
      {grpc::string_ref("authorization"), grpc::string_ref(good)}};
  grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
  EXPECT_TRUE(processor.Process(with_token, nullptr, &consumed, &response).ok());
  EXPECT_THAT(consumed, IsEmpty());
  EXPECT_EQ(processor.TokenNameOf(good), "");
  EXPECT_EQ(refused.load(), 0u);

  grpc::AuthMetadataProcessor::InputMetadata without;
  const grpc::Status status = processor.Process(without, nullptr, &consumed, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(refused.load(), 1u);
}

TEST(TokenAuthMetadataProcessorTest, ReplacedTokensApplyToTheNextCall) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(Unnamed({kToken})), refused, throttled);
  const std::string old_token = absl::StrCat("Bearer ", kToken);
  const std::string new_token = absl::StrCat("Bearer ", kOtherToken);
  grpc::AuthMetadataProcessor::InputMetadata with_old = {
      {grpc::string_ref("authorization"), grpc::string_ref(old_token)}};
  grpc::AuthMetadataProcessor::InputMetadata with_new = {
      {grpc::string_ref("authorization"), grpc::string_ref(new_token)}};
  grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
  EXPECT_TRUE(processor.Process(with_old, nullptr, &consumed, &response).ok());
  EXPECT_FALSE(processor.Process(with_new, nullptr, &consumed, &response).ok());
  processor.Replace(std::make_shared<const BearerTokenChecker>(Unnamed({kOtherToken})));
  EXPECT_TRUE(processor.Process(with_new, nullptr, &consumed, &response).ok());
  EXPECT_FALSE(processor.Process(with_old, nullptr, &consumed, &response).ok());
  EXPECT_EQ(refused.load(), 2u);
  EXPECT_EQ(processor.TokenNameOf(new_token), "");
  EXPECT_EQ(processor.TokenNameOf(old_token), std::nullopt);
}

TEST(TokenAuthMetadataProcessorTest, TheNameOfACallsTokenIsFoundAgain) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(std::vector<BearerToken>{{"alice", kToken}}),
      refused, throttled);
  EXPECT_EQ(processor.TokenNameOf(absl::StrCat("Bearer ", kToken)), "alice");
  EXPECT_EQ(processor.TokenNameOf(absl::StrCat("Bearer ", kOtherToken)), std::nullopt);
  EXPECT_EQ(refused.load(), 0u);  // a look-up, not a refusal
}

// The tokens' backoff from the first failure on, for tests of its steps.
constexpr FailureThrottle::Options kNoFailureTolerated = {absl::Seconds(1), absl::Seconds(60), 16,
                                                          0};

// The transport leaves the calls of the services whose handlers check
// (AdmitCall) to them, whatever they carry, and checks every other one.
TEST(TokenAuthMetadataProcessorTest, TheTransportLeavesTheCallsOfHandlerCheckedServicesToThem) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(Unnamed({kToken})), refused, throttled, nullptr,
      {"torchmon.v1.Ingest", "grpc.health.v1.Health"});
  grpc::AuthMetadataProcessor::OutputMetadata consumed, response;
  for (const char* path : {"/torchmon.v1.Ingest/Stream", "/grpc.health.v1.Health/Check"}) {
    grpc::AuthMetadataProcessor::InputMetadata call = {
        {grpc::string_ref(":path"), grpc::string_ref(path)}};
    EXPECT_TRUE(processor.Process(call, nullptr, &consumed, &response).ok()) << path;
  }
  // Another service, a service whose name only starts like one, no path.
  for (const char* path : {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                           "/torchmon.v1.IngestX/Stream", "/torchmon.v1.Ingest", ""}) {
    grpc::AuthMetadataProcessor::InputMetadata call = {
        {grpc::string_ref(":path"), grpc::string_ref(path)}};
    EXPECT_EQ(processor.Process(call, nullptr, &consumed, &response).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << path;
  }
  EXPECT_EQ(refused.load(), 4u);
  EXPECT_EQ(throttled.load(), 0u);
}

// A peer that keeps failing (here from its first failure: no failure
// tolerated) is turned away unchecked for 1 s, 2 s, 4 s...
// (UNAVAILABLE, counted apart); another peer is not; a token accepted
// before goes through even from the throttled peer, a token not yet seen
// does not; a success forgets the peer.
TEST(TokenAuthMetadataProcessorTest, APeerThatKeepsFailingIsSlowedAndNoOtherIs) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  std::vector<std::string> logged;
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(
          std::vector<BearerToken>{{"alice", kToken}, {"bob", kOtherToken}}),
      refused, throttled, [&](absl::string_view why) { logged.emplace_back(why); },
      {"torchmon.v1.Ingest"}, kNoFailureTolerated);
  const std::string alice = absl::StrCat("Bearer ", kToken);
  const std::string bob = absl::StrCat("Bearer ", kOtherToken);
  const std::string wrong = absl::StrCat("Bearer ", std::string(32, 'x'));
  const absl::Time t0 = absl::FromUnixSeconds(1000);

  EXPECT_TRUE(processor.AdmitCall("ipv4:10.0.0.1", alice, t0).ok());
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", wrong, t0).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(refused.load(), 1u);
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_THAT(logged[0], HasSubstr("ipv4:10.0.0.9"));
  EXPECT_THAT(logged[0], Not(HasSubstr(std::string(32, 'x'))));

  // Within the first second: unchecked, even a good token never accepted.
  const grpc::Status waiting = processor.AdmitCall("ipv4:10.0.0.9", bob, t0 + absl::Milliseconds(500));
  EXPECT_EQ(waiting.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(waiting.error_message(), HasSubstr("ipv4:10.0.0.9"));
  EXPECT_THAT(waiting.error_message(), HasSubstr("500ms"));
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", std::nullopt, t0 + absl::Milliseconds(600))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(throttled.load(), 2u);
  EXPECT_EQ(refused.load(), 1u);  // turned away, not checked
  // ...but alice's token, accepted before, goes through.
  EXPECT_TRUE(processor.AdmitCall("ipv4:10.0.0.9", alice, t0 + absl::Milliseconds(700)).ok());
  // Another peer is not slowed.
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.2", wrong, t0 + absl::Milliseconds(700)).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  // After 1 s: checked again; a second failure means 2 s.
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", wrong, t0 + absl::Seconds(1)).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", wrong, t0 + absl::Milliseconds(2900)).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // At 3 s, bob's good token is checked, accepted, and forgives the peer.
  EXPECT_TRUE(processor.AdmitCall("ipv4:10.0.0.9", bob, t0 + absl::Seconds(3)).ok());
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", wrong, t0 + absl::Seconds(3)).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(refused.load(), 4u);
  EXPECT_EQ(throttled.load(), 3u);
}

// A token accepted before, outside a backoff too, does not forgive the
// peer's failures; a token accepted for the first time does.
TEST(TokenAuthMetadataProcessorTest, OnlyATokenAcceptedForTheFirstTimeForgivesThePeer) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(
          std::vector<BearerToken>{{"alice", kToken}, {"bob", kOtherToken}}),
      refused, throttled, nullptr, {}, kNoFailureTolerated);
  const std::string alice = absl::StrCat("Bearer ", kToken);
  const std::string bob = absl::StrCat("Bearer ", kOtherToken);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  ASSERT_TRUE(processor.AdmitCall("ipv4:10.0.0.9", alice, t0).ok());
  ASSERT_EQ(processor.AdmitCall("ipv4:10.0.0.9", std::nullopt, t0).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const absl::Time later = t0 + absl::Seconds(5);
  ASSERT_TRUE(processor.AdmitCall("ipv4:10.0.0.9", alice, later).ok());
  ASSERT_EQ(processor.AdmitCall("ipv4:10.0.0.9", std::nullopt, later).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  // The second failure in a row: 2 s.
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", std::nullopt, later + absl::Milliseconds(1500))
                .error_code(),
            grpc::StatusCode::UNAVAILABLE);
  // bob's token, new, is checked once the wait is over, and forgives.
  ASSERT_TRUE(processor.AdmitCall("ipv4:10.0.0.9", bob, later + absl::Seconds(2)).ok());
  EXPECT_EQ(processor.AdmitCall("ipv4:10.0.0.9", std::nullopt, later + absl::Seconds(2))
                .error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
}

TEST(TokenAuthMetadataProcessorTest, ByDefaultFiveFailuresInARowAreChecked) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(Unnamed({kToken})), refused, throttled);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(processor.AdmitCall("uid:1000", std::nullopt, t0).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  // The client fixed its token file.
  EXPECT_TRUE(processor.AdmitCall("uid:1000", absl::StrCat("Bearer ", kToken), t0).ok());
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(processor.AdmitCall("uid:1000", std::nullopt, t0).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(processor.AdmitCall("uid:1000", std::nullopt, t0).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(refused.load(), 11u);
  EXPECT_EQ(throttled.load(), 1u);
}

TEST(TokenAuthMetadataProcessorTest, APeerIsItsAddressWithoutThePort) {
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("ipv4:10.0.0.7:41234"), "ipv4:10.0.0.7");
  // IPv6 by /64: one host has all of it.
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("ipv6:[::1]:41234"), "ipv6:::/64");
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("ipv6:%5B::1%5D:5"), "ipv6:::/64");
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("ipv6:[2001:db8:1:2::7]:443"),
            TokenAuthMetadataProcessor::ThrottleKeyOf("ipv6:[2001:db8:1:2:ffff::1]:80"));
  EXPECT_NE(TokenAuthMetadataProcessor::ThrottleKeyOf("ipv6:[2001:db8:1:2::7]:443"),
            TokenAuthMetadataProcessor::ThrottleKeyOf("ipv6:[2001:db8:1:3::7]:443"));
  // Peers that cannot be told apart are not throttled.
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("unix:"), "");
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("unix:/run/torchmon.sock"), "");
  EXPECT_EQ(TokenAuthMetadataProcessor::ThrottleKeyOf("fd:12"), "");
}

TEST(TokenAuthMetadataProcessorTest, APeerThatCannotBeToldApartIsCheckedEveryTime) {
  std::atomic<uint64_t> refused{0}, throttled{0};
  TokenAuthMetadataProcessor processor(
      std::make_shared<const BearerTokenChecker>(Unnamed({kToken})), refused, throttled);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(processor.AdmitCall("", "Bearer wrong-wrong-wrong-wrong", t0).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(processor.AdmitCall("", absl::StrCat("Bearer ", kToken), t0).ok());
  EXPECT_EQ(refused.load(), 5u);
  EXPECT_EQ(throttled.load(), 0u);
}

TEST(ParseBasicAuthFileTest, SplitsAtTheFirstColon) {
  auto credentials = ParseBasicAuthFile("# scrapers\nprometheus:s3cret:x\n\nvm:other\n", "f");
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  EXPECT_THAT(*credentials, ElementsAre(Pair("prometheus", "s3cret:x"), Pair("vm", "other")));
}

TEST(ParseBasicAuthFileTest, RefusesMalformedLinesNamingTheLineNotThePassword) {
  for (const char* text : {"prometheus\n", ":s3cret\n", "prometheus:\n"}) {
    auto credentials = ParseBasicAuthFile(absl::StrCat("# x\n", text), "f");
    ASSERT_FALSE(credentials.ok()) << text;
    EXPECT_THAT(std::string(credentials.status().message()), HasSubstr("line 2"));
    EXPECT_THAT(std::string(credentials.status().message()), Not(HasSubstr("s3cret")));
  }
  EXPECT_FALSE(ParseBasicAuthFile("\n# only comments\n", "f").ok());
}

using Credentials = std::vector<std::pair<std::string, std::string>>;

std::string Basic(const std::string& user_password) {
  return absl::StrCat("Basic ", absl::Base64Escape(user_password));
}

TEST(BasicAuthCheckerTest, AcceptsOnlyAKnownUserWithItsPassword) {
  BasicAuthChecker checker(Credentials{{"prometheus", "s3cret:x"}, {"vm", "other"}});
  EXPECT_TRUE(checker.Accepts(Basic("prometheus:s3cret:x")));
  EXPECT_TRUE(checker.Accepts(Basic("vm:other")));
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:other")));
  EXPECT_FALSE(checker.Accepts(Basic("vm:s3cret:x")));
  EXPECT_FALSE(checker.Accepts(Basic("nobody:other")));
  EXPECT_FALSE(checker.Accepts(Basic("prometheus")));
  EXPECT_FALSE(checker.Accepts(Basic("")));
}

TEST(BasicAuthCheckerTest, RefusesOtherSchemesAndBadEncodings) {
  BasicAuthChecker checker(Credentials{{"prometheus", "pw"}});
  EXPECT_TRUE(checker.Accepts("basic " + absl::Base64Escape("prometheus:pw")));
  EXPECT_FALSE(checker.Accepts("Bearer " + absl::Base64Escape("prometheus:pw")));
  EXPECT_FALSE(checker.Accepts("Basic !!not base64!!"));
  EXPECT_FALSE(checker.Accepts(""));
}

// bcrypt hashes (cost 4) made by libxcrypt: of "secret" and of "other pw".
constexpr char kSecretHash[] = "$2b$04$zuGHkdPzwb9KCcf8rLNc5eFPSsX10hv.UMzE2ki0Zd/edgTbfr3.a";
constexpr char kOtherHash[] = "$2b$04$Eo0JjWOeV9BS9XeH9SxKCuVK2JCCxRcbj2G9jYOv1EkNRYP8..Z8y";

BasicAuthChecker::HashedCredentials Hashed(
    std::initializer_list<std::pair<const char*, const char*>> users) {
  BasicAuthChecker::HashedCredentials out;
  for (const auto& [user, hash] : users) {
    absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(hash);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    out.emplace_back(user, *parsed);
  }
  return out;
}

TEST(BasicAuthCheckerTest, HashedUsersAreCheckedWithBcrypt) {
  BasicAuthChecker checker(Hashed({{"prometheus", kSecretHash}, {"vm", kOtherHash}}));
  EXPECT_TRUE(checker.Accepts(Basic("prometheus:secret")));
  EXPECT_TRUE(checker.Accepts(Basic("vm:other pw")));
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:other pw")));
  EXPECT_FALSE(checker.Accepts(Basic("vm:secret")));
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:Secret")));
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:")));
  // An unknown user is refused though its password matches the hash it is
  // checked against (the first user's).
  EXPECT_FALSE(checker.Accepts(Basic("nobody:secret")));
  // The hash itself is not a password.
  EXPECT_FALSE(checker.Accepts(Basic(std::string("prometheus:") + kSecretHash)));
}

TEST(BasicAuthCheckerTest, ARememberedPasswordAdmitsOnlyItselfAndGoesWithAReplace) {
  BasicAuthChecker checker(Hashed({{"prometheus", kSecretHash}}));
  ASSERT_TRUE(checker.Accepts(Basic("prometheus:secret")));
  ASSERT_TRUE(checker.Accepts(Basic("prometheus:secret")));  // from the cache
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:secret2")));
  EXPECT_FALSE(checker.Accepts(Basic("nobody:secret")));
  checker.Replace(Hashed({{"prometheus", kOtherHash}}));
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:secret")));
  EXPECT_TRUE(checker.Accepts(Basic("prometheus:other pw")));
  // Back to plain passwords: the hashes are gone.
  checker.Replace(Credentials{{"prometheus", "plain"}});
  EXPECT_FALSE(checker.Accepts(Basic("prometheus:other pw")));
  EXPECT_TRUE(checker.Accepts(Basic("prometheus:plain")));
}

TEST(BasicAuthCheckerTest, AThrottledAddressIsTurnedAwayUncheckedButForCredentialsAcceptedBefore) {
  using Kind = BasicAuthChecker::Admission::Kind;
  BasicAuthChecker checker(Credentials{{"prometheus", "pw"}, {"grafana", "pw2"}});
  const absl::Time now = absl::FromUnixSeconds(1000);
  ASSERT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:pw"), now).kind, Kind::kAccepted);
  ASSERT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:guess"), now).kind, Kind::kRefused);
  // In the backoff: a guess, even a right one never accepted before, is
  // not checked; the scraper's known credentials still pass.
  const BasicAuthChecker::Admission guess =
      checker.Admit("10.0.0.1", Basic("prometheus:guess2"), now + absl::Milliseconds(10));
  EXPECT_EQ(guess.kind, Kind::kWait);
  EXPECT_GT(guess.wait, absl::ZeroDuration());
  EXPECT_EQ(checker.Admit("10.0.0.1", Basic("grafana:pw2"), now + absl::Milliseconds(20)).kind,
            Kind::kWait);
  EXPECT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:pw"), now + absl::Milliseconds(30)).kind,
            Kind::kAccepted);
  // ... and did not end the backoff for the guesser.
  EXPECT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:guess3"), now + absl::Milliseconds(40))
                .kind,
            Kind::kWait);
  // A reload forgets what was accepted.
  checker.Replace(Credentials{{"prometheus", "pw"}});
  EXPECT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:pw"), now + absl::Milliseconds(50)).kind,
            Kind::kWait);
  EXPECT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:pw"), now + absl::Seconds(2)).kind,
            Kind::kAccepted);
}

// A scraper's known credentials, outside a backoff too, do not forgive the
// client failing beside it: its next failure doubles the wait.
TEST(BasicAuthCheckerTest, CredentialsAcceptedBeforeForgiveNoFailure) {
  using Kind = BasicAuthChecker::Admission::Kind;
  BasicAuthChecker checker(Credentials{{"prometheus", "pw"}});
  const absl::Time now = absl::FromUnixSeconds(1000);
  ASSERT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:pw"), now).kind, Kind::kAccepted);
  ASSERT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:guess"), now).kind, Kind::kRefused);
  const absl::Time later = now + absl::Seconds(5);  // the 1 s backoff is over
  ASSERT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:pw"), later).kind, Kind::kAccepted);
  ASSERT_EQ(checker.Admit("10.0.0.1", Basic("prometheus:guess2"), later).kind, Kind::kRefused);
  const BasicAuthChecker::Admission next =
      checker.Admit("10.0.0.1", Basic("prometheus:guess3"), later + absl::Milliseconds(500));
  EXPECT_EQ(next.kind, Kind::kWait);
  EXPECT_EQ(next.wait, absl::Milliseconds(1500));  // the second failure's 2 s
}

// A host is routed a /64: guesses from every address of it are one peer's;
// another /64 is another peer.
TEST(BasicAuthCheckerTest, IPv6AddressesOfOneSlash64AreThrottledAsOne) {
  using Kind = BasicAuthChecker::Admission::Kind;
  BasicAuthChecker checker(Credentials{{"prometheus", "pw"}});
  const absl::Time now = absl::FromUnixSeconds(1000);
  ASSERT_EQ(checker.Admit("2001:db8:1:2::10", Basic("prometheus:guess"), now).kind,
            Kind::kRefused);
  EXPECT_EQ(checker.Admit("2001:db8:1:2:dead:beef:0:1", Basic("prometheus:guess2"),
                          now + absl::Milliseconds(10))
                .kind,
            Kind::kWait);
  EXPECT_EQ(checker.Admit("2001:db8:1:3::10", Basic("prometheus:guess3"),
                          now + absl::Milliseconds(20))
                .kind,
            Kind::kRefused);
  // IPv4 addresses stay one each, mapped or not.
  ASSERT_EQ(checker.Admit("192.0.2.1", Basic("prometheus:guess"), now).kind, Kind::kRefused);
  EXPECT_EQ(checker.Admit("::ffff:192.0.2.1", Basic("prometheus:guess"), now).kind, Kind::kWait);
  EXPECT_EQ(checker.Admit("192.0.2.2", Basic("prometheus:guess"), now).kind, Kind::kRefused);
}

TEST(AddressBucketTest, IPv4IsTheAddressAndIPv6ItsSlash64) {
  EXPECT_EQ(AddressBucket("192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(AddressBucket("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::/64");
  EXPECT_EQ(AddressBucket("2001:db8:1:2::1"), AddressBucket("2001:db8:1:2:ffff::9"));
  EXPECT_NE(AddressBucket("2001:db8:1:2::1"), AddressBucket("2001:db8:1:3::1"));
  EXPECT_EQ(AddressBucket("::ffff:192.0.2.7"), "192.0.2.7");
  EXPECT_EQ(AddressBucket("::1"), "::/64");
  EXPECT_EQ(AddressBucket("not an address"), "not an address");
}

}  // namespace
}  // namespace torchmon::server

// Page tokens (server/query/page_token.h): what a token carries comes back
// as it went out, and a token is refused for any request but its own.
#include "server/query/page_token.h"

#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using Kind = PageToken::Kind;

std::shared_ptr<const SeriesKey> Key(std::string stat, Labels labels) {
  return std::make_shared<const SeriesKey>(SeriesKey{std::move(stat), LabelSet(std::move(labels))});
}

TEST(PageTokenTest, AWindowTokenCarriesItsSeriesStartAndDefinition) {
  PageToken token;
  token.kind = Kind::kWindows;
  token.fingerprint = 0x0123456789abcdefull;
  token.series = Key("train.loss", {{"job", "j \"x\""}, {"rank", "3"}});  // sorted, as keys are
  token.after_start_ms = 1'795'796'422'500;
  token.after_definition = 7;
  const std::string text = EncodePageToken(token);
  // URL-safe: no '+', '/' or padding a client would have to escape.
  EXPECT_EQ(text.find_first_of("+/="), std::string::npos) << text;

  auto decoded = DecodePageToken(text, Kind::kWindows, token.fingerprint);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->kind, Kind::kWindows);
  EXPECT_EQ(*decoded->series, *token.series);
  EXPECT_EQ(decoded->after_start_ms, token.after_start_ms);
  EXPECT_EQ(decoded->after_definition, 7u);
}

TEST(PageTokenTest, NegativeStartsAndEmptyLabelsSurvive) {
  PageToken token;
  token.kind = Kind::kSeries;
  token.fingerprint = 1;
  token.series = Key("s", {});
  token.after_start_ms = -5;
  auto decoded = DecodePageToken(EncodePageToken(token), Kind::kSeries, 1);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->series->stat, "s");
  EXPECT_TRUE(decoded->series->labels.empty());
  EXPECT_EQ(decoded->after_start_ms, -5);
}

TEST(PageTokenTest, AnEventTokenCarriesItsSequenceAndWhatTheLimitAllows) {
  PageToken token;
  token.kind = Kind::kEvents;
  token.fingerprint = 42;
  token.after_sequence = 1'000'001;
  token.remaining = 9;
  auto decoded = DecodePageToken(EncodePageToken(token), Kind::kEvents, 42);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->after_sequence, 1'000'001u);
  EXPECT_EQ(decoded->remaining, 9u);
  EXPECT_EQ(decoded->series, nullptr);
}

TEST(PageTokenTest, ATokenIsRefusedForAnotherKindOrRequestAndSaysWhich) {
  PageToken token;
  token.kind = Kind::kWindows;
  token.fingerprint = 5;
  token.series = Key("s", {{"a", "b"}});
  const std::string text = EncodePageToken(token);

  auto other_kind = DecodePageToken(text, Kind::kSeries, 5);
  ASSERT_FALSE(other_kind.ok());
  EXPECT_EQ(other_kind.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other_kind.status().message(), HasSubstr("belongs to another kind of query"));

  auto other_request = DecodePageToken(text, Kind::kWindows, 6);
  ASSERT_FALSE(other_request.ok());
  EXPECT_THAT(other_request.status().message(), HasSubstr("belongs to another request"));
}

TEST(PageTokenTest, AnythingElseIsNotOneThisDaemonIssued) {
  PageToken token;
  token.kind = Kind::kEvents;
  token.fingerprint = 5;
  const std::string good = EncodePageToken(token);
  std::string raw;
  ASSERT_TRUE(absl::WebSafeBase64Unescape(good, &raw));

  std::string other_magic = raw;
  other_magic[3] = '2';
  std::string longer = raw + "x";
  for (const std::string& text :
       {std::string("not a token"), std::string(""), absl::WebSafeBase64Escape(raw.substr(0, 20)),
        absl::WebSafeBase64Escape(other_magic), absl::WebSafeBase64Escape(longer)}) {
    auto decoded = DecodePageToken(text, Kind::kEvents, 5);
    ASSERT_FALSE(decoded.ok()) << text;
    EXPECT_THAT(decoded.status().message(), HasSubstr("is not one this daemon issued")) << text;
    EXPECT_THAT(decoded.status().message(), HasSubstr("send the next_page_token"));
  }

  // A window token whose definition field does not fit a definition number.
  PageToken window;
  window.kind = Kind::kWindows;
  window.fingerprint = 5;
  window.series = Key("s", {});
  ASSERT_TRUE(absl::WebSafeBase64Unescape(EncodePageToken(window), &raw));
  raw[4 + 1 + 8 + 8 + 4] = 1;  // bit 32 of the second field
  auto decoded = DecodePageToken(absl::WebSafeBase64Escape(raw), Kind::kWindows, 5);
  ASSERT_FALSE(decoded.ok());
  EXPECT_THAT(decoded.status().message(), HasSubstr("is not one this daemon issued"));
}

TEST(RequestFingerprintTest, PagingFieldsAreLeftOutAndEverythingElseCounts) {
  v1::GetWindowsRequest a;
  a.mutable_selector()->set_stat("train.*");
  v1::LabelMatcher* rank = a.mutable_selector()->add_labels();
  rank->set_key("rank");
  rank->set_value("0");
  a.set_start_ms(100);
  v1::GetWindowsRequest b = a;
  b.set_page_size(7);
  b.set_page_token("whatever");
  EXPECT_EQ(RequestFingerprint(a), RequestFingerprint(b));

  v1::GetWindowsRequest other_bound = a;
  other_bound.set_start_ms(101);
  v1::GetWindowsRequest other_selector = a;
  other_selector.mutable_selector()->mutable_labels(0)->set_value("1");
  EXPECT_NE(RequestFingerprint(a), RequestFingerprint(other_bound));
  EXPECT_NE(RequestFingerprint(a), RequestFingerprint(other_selector));

  // Same bytes, another message type: another request.
  v1::ListSeriesRequest series;
  series.mutable_selector()->set_stat("train.*");
  v1::GetWindowsRequest windows;
  windows.mutable_selector()->set_stat("train.*");
  EXPECT_NE(RequestFingerprint(series), RequestFingerprint(windows));
}

}  // namespace
}  // namespace torchmon::server

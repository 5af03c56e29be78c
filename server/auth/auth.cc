#include "server/auth/auth.h"

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::server {
namespace {

// The lines of a credentials file that carry something: stripped, neither
// empty nor comments, each with its 1-based line number for messages.
std::vector<std::pair<int, absl::string_view>> ContentLines(absl::string_view text) {
  std::vector<std::pair<int, absl::string_view>> out;
  int number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    out.emplace_back(number, line);
  }
  return out;
}

// Strips "<scheme> " from `value`, the scheme compared case-insensitively
// (RFC 9110 §11.1). False if `value` does not start with it.
bool ConsumeScheme(absl::string_view scheme, absl::string_view* value) {
  if (value->size() <= scheme.size() ||
      !absl::EqualsIgnoreCase(value->substr(0, scheme.size()), scheme) ||
      (*value)[scheme.size()] != ' ') {
    return false;
  }
  value->remove_prefix(scheme.size() + 1);
  *value = absl::StripLeadingAsciiWhitespace(*value);
  return true;
}

}  // namespace

bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  // Every byte of the longer string is looked at, whatever differs first;
  // the branch on the index depends on the lengths only.
  const size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    const unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

absl::StatusOr<std::vector<std::string>> ParseTokenFile(absl::string_view text,
                                                        absl::string_view origin) {
  std::vector<std::string> tokens;
  for (const auto& [number, line] : ContentLines(text)) {
    if (line.size() < kMinTokenLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, " line ", number, ": the token is shorter than ", kMinTokenLength,
                       " characters; generate one with: openssl rand -hex 32"));
    }
    for (char c : line) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(
            absl::StrCat(origin, " line ", number,
                         ": a token may only hold printable ASCII characters without spaces"));
      }
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, " holds no token (one per line; empty lines and '#' comments are skipped)"));
  }
  return tokens;
}

absl::Status BearerTokenChecker::Check(bool present, absl::string_view authorization) const {
  if (!present) {
    return absl::UnauthenticatedError(
        "torchmond requires a bearer token on every call and this one carried none; give the "
        "client the daemon's token (TORCHMON_TOKEN_FILE, torchmonctl --token-file)");
  }
  absl::string_view token = authorization;
  if (!ConsumeScheme("Bearer", &token)) {
    return absl::UnauthenticatedError(
        "torchmond requires \"authorization: Bearer <token>\" metadata; this call carried "
        "another kind of authorization");
  }
  bool accepted = false;
  for (const std::string& candidate : tokens_) accepted |= ConstantTimeEquals(token, candidate);
  if (!accepted) {
    return absl::UnauthenticatedError(
        "torchmond refused the bearer token of this call: it is not one of the daemon's "
        "--auth-token-file tokens");
  }
  return absl::OkStatus();
}

grpc::Status TokenAuthMetadataProcessor::Process(const InputMetadata& auth_metadata,
                                                 grpc::AuthContext* /*context*/,
                                                 OutputMetadata* consumed_auth_metadata,
                                                 OutputMetadata* /*response_metadata*/) {
  const auto it = auth_metadata.find("authorization");
  const bool present = it != auth_metadata.end();
  const absl::string_view value =
      present ? absl::string_view(it->second.data(), it->second.size()) : absl::string_view();
  const absl::Status status = checker_->Check(present, value);
  if (!status.ok()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    if (on_refused_) on_refused_(status.message());
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(status.message()));
  }
  // Handlers have no use for the token; keep it out of their reach.
  consumed_auth_metadata->emplace("authorization", std::string(value));
  return grpc::Status::OK;
}

absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseBasicAuthFile(
    absl::string_view text, absl::string_view origin) {
  std::vector<std::pair<std::string, std::string>> credentials;
  for (const auto& [number, line] : ContentLines(text)) {
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0 || colon + 1 == line.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, " line ", number, " is not user:password (both non-empty)"));
    }
    credentials.emplace_back(std::string(line.substr(0, colon)),
                             std::string(line.substr(colon + 1)));
  }
  if (credentials.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, " holds no user:password line (empty lines and '#' comments are skipped)"));
  }
  return credentials;
}

bool BasicAuthChecker::Accepts(absl::string_view authorization) const {
  absl::string_view encoded = authorization;
  if (!ConsumeScheme("Basic", &encoded)) return false;
  std::string decoded;
  if (!absl::Base64Unescape(absl::StripTrailingAsciiWhitespace(encoded), &decoded)) return false;
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return false;
  const absl::string_view user = absl::string_view(decoded).substr(0, colon);
  const absl::string_view password = absl::string_view(decoded).substr(colon + 1);
  bool accepted = false;
  for (const auto& [u, p] : credentials_) {
    // Both compared whatever the user's outcome: no early answer for a
    // known user name.
    const bool user_ok = ConstantTimeEquals(user, u);
    const bool password_ok = ConstantTimeEquals(password, p);
    accepted |= user_ok && password_ok;
  }
  return accepted;
}

}  // namespace torchmon::server

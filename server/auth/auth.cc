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

bool IsValidTokenName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxTokenNameLength) return false;
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' &&
        c != '@' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::vector<BearerToken>> ParseTokenFile(absl::string_view text,
                                                        absl::string_view origin) {
  std::vector<BearerToken> tokens;
  for (const auto& [number, line] : ContentLines(text)) {
    BearerToken entry;
    absl::string_view token = line;
    if (const size_t space = line.find_first_of(" \t"); space != absl::string_view::npos) {
      const absl::string_view name = line.substr(0, space);
      if (!IsValidTokenName(name)) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, " line ", number, ": \"NAME TOKEN\" needs a NAME of at most ",
            kMaxTokenNameLength, " letters, digits, '.', '_', '@' or '-'"));
      }
      entry.name = std::string(name);
      token = absl::StripLeadingAsciiWhitespace(line.substr(space));
    }
    if (token.size() < kMinTokenLength) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, " line ", number, ": the token is shorter than ", kMinTokenLength,
                       " characters; generate one with: openssl rand -hex 32"));
    }
    for (char c : token) {
      if (c < 0x21 || c > 0x7e) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, " line ", number,
            ": a token may only hold printable ASCII characters without spaces (a line is a "
            "token, or a name and a token)"));
      }
    }
    entry.token = std::string(token);
    tokens.push_back(std::move(entry));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        origin, " holds no token (one per line, alone or after a name; empty lines and '#' "
                "comments are skipped)"));
  }
  return tokens;
}

absl::StatusOr<std::string> BearerTokenChecker::Check(bool present,
                                                      absl::string_view authorization) const {
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
  // Every token is compared, whichever matched.
  const BearerToken* accepted = nullptr;
  for (const BearerToken& candidate : tokens_) {
    if (ConstantTimeEquals(token, candidate.token) && accepted == nullptr) accepted = &candidate;
  }
  if (accepted == nullptr) {
    return absl::UnauthenticatedError(
        "torchmond refused the bearer token of this call: it is not one of the daemon's "
        "--auth-token-file tokens");
  }
  return accepted->name;
}

std::shared_ptr<const BearerTokenChecker> TokenAuthMetadataProcessor::checker() const {
  absl::MutexLock lock(&mu_);
  return checker_;
}

void TokenAuthMetadataProcessor::Replace(std::shared_ptr<const BearerTokenChecker> checker) {
  absl::MutexLock lock(&mu_);
  checker_ = std::move(checker);
}

grpc::Status TokenAuthMetadataProcessor::Process(const InputMetadata& auth_metadata,
                                                 grpc::AuthContext* /*context*/,
                                                 OutputMetadata* /*consumed_auth_metadata*/,
                                                 OutputMetadata* /*response_metadata*/) {
  const auto it = auth_metadata.find("authorization");
  const bool present = it != auth_metadata.end();
  const absl::string_view value =
      present ? absl::string_view(it->second.data(), it->second.size()) : absl::string_view();
  const absl::StatusOr<std::string> name = checker()->Check(present, value);
  if (!name.ok()) {
    refused_.fetch_add(1, std::memory_order_relaxed);
    if (on_refused_) on_refused_(name.status().message());
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(name.status().message()));
  }
  return grpc::Status::OK;
}

std::optional<std::string> TokenAuthMetadataProcessor::TokenNameOf(
    absl::string_view authorization) const {
  absl::StatusOr<std::string> name = checker()->Check(true, authorization);
  if (!name.ok()) return std::nullopt;
  return *std::move(name);
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
  std::shared_ptr<const Credentials> credentials;
  {
    absl::MutexLock lock(&mu_);
    credentials = credentials_;
  }
  bool accepted = false;
  for (const auto& [u, p] : *credentials) {
    // Both compared whatever the user's outcome: no early answer for a
    // known user name.
    const bool user_ok = ConstantTimeEquals(user, u);
    const bool password_ok = ConstantTimeEquals(password, p);
    accepted |= user_ok && password_ok;
  }
  return accepted;
}

BasicAuthChecker::Admission BasicAuthChecker::Admit(absl::string_view peer,
                                                    absl::string_view authorization,
                                                    absl::Time now) const {
  if (const absl::Duration wait = throttle_.Wait(peer, now); wait > absl::ZeroDuration()) {
    return {Admission::Kind::kWait, wait};
  }
  if (Accepts(authorization)) {
    throttle_.Succeeded(peer);
    return {Admission::Kind::kAccepted, absl::ZeroDuration()};
  }
  throttle_.Failed(peer, now);
  return {Admission::Kind::kRefused, absl::ZeroDuration()};
}

void BasicAuthChecker::Replace(Credentials credentials) {
  auto replacement = std::make_shared<const Credentials>(std::move(credentials));
  absl::MutexLock lock(&mu_);
  credentials_ = std::move(replacement);
}

}  // namespace torchmon::server

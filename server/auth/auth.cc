#include "server/auth/auth.h"

#include <openssl/evp.h>

#include <algorithm>

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

BearerTokenChecker::BearerTokenChecker(std::vector<BearerToken> tokens)
    : tokens_(std::move(tokens)), accepted_(std::make_unique<std::atomic<bool>[]>(tokens_.size())) {}

absl::StatusOr<std::string> BearerTokenChecker::Check(bool present,
                                                      absl::string_view authorization) const {
  if (!present) {
    return absl::UnauthenticatedError(
        "torchmond requires a bearer token on every call and this one carried none; give the "
        "client the daemon's token (TORCHMON_TOKEN_FILE, torchmonctl --token-file)");
  }
  if (!ConsumeScheme("Bearer", &authorization)) {
    return absl::UnauthenticatedError(
        "torchmond requires \"authorization: Bearer <token>\" metadata; this call carried "
        "another kind of authorization");
  }
  const std::optional<size_t> index = Find(authorization);
  if (!index.has_value()) {
    return absl::UnauthenticatedError(
        "torchmond refused the bearer token of this call: it is not one of the daemon's "
        "--auth-token-file tokens");
  }
  accepted_[*index].store(true, std::memory_order_relaxed);
  return tokens_[*index].name;
}

std::optional<size_t> BearerTokenChecker::Find(absl::string_view token) const {
  // Every token is compared, whichever matched.
  std::optional<size_t> found;
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (ConstantTimeEquals(token, tokens_[i].token) && !found.has_value()) found = i;
  }
  return found;
}

bool BearerTokenChecker::Remembers(absl::string_view authorization) const {
  if (!ConsumeScheme("Bearer", &authorization)) return false;
  const std::optional<size_t> index = Find(authorization);
  return index.has_value() && accepted_[*index].load(std::memory_order_relaxed);
}

TokenAuthMetadataProcessor::TokenAuthMetadataProcessor(
    std::shared_ptr<const BearerTokenChecker> checker, std::atomic<uint64_t>& refused,
    std::atomic<uint64_t>& throttled, OnRefused on_refused,
    std::vector<std::string> checked_by_handlers, FailureThrottle::Options throttle)
    : checker_(std::move(checker)),
      refused_(refused),
      throttled_(throttled),
      on_refused_(std::move(on_refused)),
      checked_by_handlers_(std::move(checked_by_handlers)),
      throttle_(throttle) {}

std::shared_ptr<const BearerTokenChecker> TokenAuthMetadataProcessor::checker() const {
  absl::MutexLock lock(&mu_);
  return checker_;
}

void TokenAuthMetadataProcessor::Replace(std::shared_ptr<const BearerTokenChecker> checker) {
  absl::MutexLock lock(&mu_);
  checker_ = std::move(checker);
}

bool TokenAuthMetadataProcessor::CheckedByHandlers(absl::string_view path) const {
  // "/<service>/<method>"
  if (!absl::ConsumePrefix(&path, "/")) return false;
  const size_t slash = path.find('/');
  if (slash == absl::string_view::npos) return false;
  const absl::string_view service = path.substr(0, slash);
  return std::find(checked_by_handlers_.begin(), checked_by_handlers_.end(), service) !=
         checked_by_handlers_.end();
}

grpc::Status TokenAuthMetadataProcessor::Refuse(absl::string_view why,
                                                absl::string_view peer) const {
  refused_.fetch_add(1, std::memory_order_relaxed);
  if (on_refused_) on_refused_(peer.empty() ? why : absl::StrCat(peer, ": ", why));
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(why));
}

grpc::Status TokenAuthMetadataProcessor::Process(const InputMetadata& auth_metadata,
                                                 grpc::AuthContext* /*context*/,
                                                 OutputMetadata* /*consumed_auth_metadata*/,
                                                 OutputMetadata* /*response_metadata*/) {
  // gRPC hands the processor the call's whole initial metadata, ":path"
  // included.
  if (const auto path = auth_metadata.find(":path");
      path != auth_metadata.end() &&
      CheckedByHandlers(absl::string_view(path->second.data(), path->second.size()))) {
    return grpc::Status::OK;
  }
  const auto it = auth_metadata.find("authorization");
  const bool present = it != auth_metadata.end();
  const absl::string_view value =
      present ? absl::string_view(it->second.data(), it->second.size()) : absl::string_view();
  const absl::StatusOr<std::string> name = checker()->Check(present, value);
  if (!name.ok()) return Refuse(name.status().message(), "");
  return grpc::Status::OK;
}

grpc::Status TokenAuthMetadataProcessor::AdmitCall(absl::string_view peer,
                                                   std::optional<absl::string_view> authorization,
                                                   absl::Time now) const {
  const std::shared_ptr<const BearerTokenChecker> tokens = checker();
  // A token accepted before is let through, and leaves the peer's throttle
  // as it is: it tells nothing to whoever is guessing from the same peer
  // (they had to be right already), a good client does not pay for another
  // one's mistakes, and its calls do not forgive them.
  if (authorization.has_value() && tokens->Remembers(*authorization)) return grpc::Status::OK;
  const bool throttled_peer = !peer.empty();
  if (const absl::Duration wait =
          throttled_peer ? throttle_.Wait(peer, now) : absl::ZeroDuration();
      wait > absl::ZeroDuration()) {
    throttled_.fetch_add(1, std::memory_order_relaxed);
    return grpc::Status(
        grpc::StatusCode::UNAVAILABLE,
        absl::StrCat("torchmond checks no token from ", peer, " for another ",
                     absl::FormatDuration(absl::Ceil(wait, absl::Milliseconds(100))),
                     ": calls from there failed the token check too often lately "
                     "(docs/security.md, \"Throttling\")"));
  }
  const absl::StatusOr<std::string> name =
      tokens->Check(authorization.has_value(), authorization.value_or(absl::string_view()));
  if (!name.ok()) {
    if (throttled_peer) throttle_.Failed(peer, now);
    return Refuse(name.status().message(), peer);
  }
  if (throttled_peer) throttle_.Succeeded(peer);
  return grpc::Status::OK;
}

std::string TokenAuthMetadataProcessor::ThrottleKeyOf(absl::string_view grpc_peer) {
  if (absl::StartsWith(grpc_peer, "ipv4:") || absl::StartsWith(grpc_peer, "ipv6:")) {
    // "ipv4:ADDR:PORT", "ipv6:[ADDR]:PORT" (also "ipv6:%5B...%5D:PORT",
    // URI-escaped, in some gRPC versions): the port is after the last ':'.
    // IPv6 by /64 (AddressBucket), so a host cannot rotate addresses.
    if (const size_t colon = grpc_peer.rfind(':'); colon > 5) {
      absl::string_view address = grpc_peer.substr(5, colon - 5);
      if (absl::ConsumePrefix(&address, "[")) {
        absl::ConsumeSuffix(&address, "]");
      } else if (absl::ConsumePrefix(&address, "%5B")) {
        absl::ConsumeSuffix(&address, "%5D");
      }
      return absl::StrCat(grpc_peer.substr(0, 5), AddressBucket(address));
    }
  }
  return "";
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

namespace {

// The user and password of a "Basic" authorization value.
std::optional<std::pair<std::string, std::string>> BasicCredentialsOf(
    absl::string_view authorization) {
  absl::string_view encoded = authorization;
  if (!ConsumeScheme("Basic", &encoded)) return std::nullopt;
  std::string decoded;
  if (!absl::Base64Unescape(absl::StripTrailingAsciiWhitespace(encoded), &decoded)) {
    return std::nullopt;
  }
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return std::nullopt;
  return std::make_pair(decoded.substr(0, colon), decoded.substr(colon + 1));
}

// SHA-256 of user and password: what is remembered of credentials accepted
// (never the password itself). Empty if OpenSSL fails: nothing is then
// remembered.
std::string DigestOf(absl::string_view user, absl::string_view password) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  const std::string pair = absl::StrCat(user, std::string(1, '\0'), password);
  if (EVP_Digest(pair.data(), pair.size(), digest, &size, EVP_sha256(), nullptr) != 1) return "";
  return std::string(reinterpret_cast<const char*>(digest), size);
}

}  // namespace

bool BasicAuthChecker::Users::Remembers(const std::string& digest) const {
  if (digest.empty()) return false;
  absl::MutexLock lock(&verified_mu);
  return verified.contains(digest);
}

void BasicAuthChecker::Users::Remember(std::string digest) const {
  if (digest.empty()) return;
  absl::MutexLock lock(&verified_mu);
  // A scraper or two use one password each: the bound only stops a flood
  // of distinct good passwords (which would need every user's) from
  // growing it.
  if (verified.size() >= 1024) verified.clear();
  verified.insert(std::move(digest));
}

std::shared_ptr<const BasicAuthChecker::Users> BasicAuthChecker::users() const {
  absl::MutexLock lock(&mu_);
  return users_;
}

bool BasicAuthChecker::Accepts(absl::string_view authorization) const {
  const auto credentials = BasicCredentialsOf(authorization);
  if (!credentials.has_value()) return false;
  const auto& [user, password] = *credentials;
  const std::shared_ptr<const Users> users = this->users();
  std::string digest = DigestOf(user, password);
  bool accepted = false;
  if (!users->hashed.empty()) {
    accepted = AcceptsHashed(*users, user, password, digest);
  } else {
    for (const auto& [u, p] : users->plain) {
      // Both compared whatever the user's outcome: no early answer for a
      // known user name.
      const bool user_ok = ConstantTimeEquals(user, u);
      const bool password_ok = ConstantTimeEquals(password, p);
      accepted |= user_ok && password_ok;
    }
  }
  if (accepted) users->Remember(std::move(digest));
  return accepted;
}

bool BasicAuthChecker::AcceptsHashed(const Users& users, absl::string_view user,
                                     absl::string_view password, const std::string& digest) {
  // Every user name is compared; an unknown user's password is checked
  // against the first user's hash and refused whatever bcrypt says.
  const BcryptHash* hash = &users.hashed.front().second;
  bool known = false;
  for (const auto& [u, h] : users.hashed) {
    if (ConstantTimeEquals(user, u) && !known) {
      hash = &h;
      known = true;
    }
  }
  if (known && users.Remembers(digest)) return true;
  return BcryptMatches(*hash, password) && known;
}

bool BasicAuthChecker::Remembers(absl::string_view authorization) const {
  const auto credentials = BasicCredentialsOf(authorization);
  return credentials.has_value() &&
         users()->Remembers(DigestOf(credentials->first, credentials->second));
}

BasicAuthChecker::Admission BasicAuthChecker::Admit(absl::string_view peer,
                                                    absl::string_view authorization,
                                                    absl::Time now) const {
  // Credentials accepted before are let through, and leave the peer's
  // throttle as it is: that tells nothing to whoever is guessing from the
  // same address (they had to be right already), a scraper does not pay
  // for another client's mistakes, and its scrapes do not forgive them.
  if (Remembers(authorization)) return {Admission::Kind::kAccepted, absl::ZeroDuration()};
  // IPv6 peers by /64: a host has that many addresses to guess from.
  const std::string key = AddressBucket(peer);
  if (const absl::Duration wait = throttle_.Wait(key, now); wait > absl::ZeroDuration()) {
    return {Admission::Kind::kWait, wait};
  }
  if (Accepts(authorization)) {
    throttle_.Succeeded(key);
    return {Admission::Kind::kAccepted, absl::ZeroDuration()};
  }
  throttle_.Failed(key, now);
  return {Admission::Kind::kRefused, absl::ZeroDuration()};
}

void BasicAuthChecker::Replace(Credentials credentials) {
  auto users = std::make_shared<Users>();
  users->plain = std::move(credentials);
  Install(std::move(users));
}

void BasicAuthChecker::Replace(HashedCredentials credentials) {
  auto users = std::make_shared<Users>();
  users->hashed = std::move(credentials);
  Install(std::move(users));
}

void BasicAuthChecker::Install(std::shared_ptr<const Users> users) {
  absl::MutexLock lock(&mu_);
  users_ = std::move(users);
}

}  // namespace torchmon::server

// Who may talk to torchmond: the bearer token every gRPC call must carry
// (--auth-token-file) and the basic-auth credentials a scrape of /metrics
// must carry (--metrics-auth-file). docs/security.md explains the threat
// model these answer.
//
// The parsers and checkers here are pure (no I/O); the daemon reads the files
// (server/daemon/security.h) and hands their text over.
#ifndef TORCHMON_SERVER_AUTH_AUTH_H_
#define TORCHMON_SERVER_AUTH_AUTH_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/security/auth_metadata_processor.h"
#include "server/auth/bcrypt.h"
#include "server/auth/constant_time.h"
#include "server/auth/failure_throttle.h"

namespace torchmon::server {

// Shortest token --auth-token-file accepts: guessing must be hopeless, and
// `openssl rand -hex 32` gives 64 characters.
inline constexpr size_t kMinTokenLength = 16;

// One token of a token file, and the name of who holds it: with
// --peer-labels a named token's calls are that identity's
// (docs/security.md, "Who sees what"). "" for an unnamed token.
struct BearerToken {
  std::string name;
  std::string token;
};

// Longest token name, and its characters: those of a user name.
inline constexpr size_t kMaxTokenNameLength = 64;
bool IsValidTokenName(absl::string_view name);

// The tokens of a token file: every line that is neither empty nor a
// comment ('#'), with surrounding whitespace removed: a token, or "NAME
// TOKEN" (NAME of letters, digits, '.', '_', '@' and '-'). Several tokens,
// of one name or none, let an operator rotate without stopping every client
// at once. InvalidArgument if there is none, or a token is shorter than
// kMinTokenLength or holds a character outside printable ASCII (it travels
// as an HTTP/2 header value), or a name is malformed. `origin` names the
// file in messages; the tokens themselves never appear in one.
absl::StatusOr<std::vector<BearerToken>> ParseTokenFile(absl::string_view text,
                                                        absl::string_view origin);

// Checks the "authorization" value of a call against a set of tokens.
// Immutable after construction; thread-safe.
class BearerTokenChecker {
 public:
  explicit BearerTokenChecker(std::vector<BearerToken> tokens);

  // The name of the token (possibly "") if `authorization` is "Bearer
  // <token>" (scheme case-insensitive) for one of the tokens, which is then
  // remembered as accepted. Otherwise Unauthenticated with a message that
  // tells a user what to fix; it never echoes what was sent. `present` is
  // false when the call carried no authorization header at all.
  absl::StatusOr<std::string> Check(bool present, absl::string_view authorization) const;

  // True if `authorization` carries a token Check accepted before.
  bool Remembers(absl::string_view authorization) const;

 private:
  // The index of the token in `authorization`, every token compared.
  std::optional<size_t> Find(absl::string_view authorization) const;

  const std::vector<BearerToken> tokens_;
  // Which tokens were accepted; set once, never cleared (a reload makes a
  // new checker).
  const std::unique_ptr<std::atomic<bool>[]> accepted_;
};

// How a gRPC peer that keeps failing the token check is slowed
// (FailureThrottle): not for its first 5 failures in a row (a client
// fixing its token file), then as /metrics logins are.
inline constexpr FailureThrottle::Options kTokenThrottle = {absl::Seconds(1), absl::Seconds(60),
                                                            4096, 5};

// Refuses every gRPC call, on every listener and of every service (health
// and reflection included), that does not carry a token BearerTokenChecker
// accepts, in two places:
//  - in the transport (Process), before any handler sees the call: calls of
//    services other than `checked_by_handlers`;
//  - in the handlers of `checked_by_handlers` (AdmitCall), which know the
//    caller's peer: so that a peer that keeps failing is slowed
//    (FailureThrottle) and other peers are not, and so that calls on Unix
//    connections torchmond accepted itself are checked too (gRPC serves
//    those without transport security, where Process never runs).
// The token stays in the metadata handlers see: with --peer-labels its name
// is the caller's identity (TokenNameOf). Not the AuthContext: gRPC shares
// one between every call of a connection, and calls of several tokens may
// share a connection.
//
// gRPC applies an AuthMetadataProcessor to secure server credentials only:
// the daemon gives every listener gRPC binds such credentials when a token
// is configured (TLS, or gRPC's "local" credentials for Unix sockets and
// loopback TCP; see server/daemon/security.h). Thread-safe.
class TokenAuthMetadataProcessor final : public grpc::AuthMetadataProcessor {
 public:
  // Called with why, for each refused call (the daemon logs it,
  // rate-limited); thread-safe.
  using OnRefused = std::function<void(absl::string_view why)>;
  // `refused` counts calls refused after a check, `throttled` calls turned
  // away unchecked; both must outlive the processor. `checked_by_handlers`:
  // names of services ("torchmon.v1.Ingest") whose every method calls
  // AdmitCall first.
  TokenAuthMetadataProcessor(std::shared_ptr<const BearerTokenChecker> checker,
                             std::atomic<uint64_t>& refused, std::atomic<uint64_t>& throttled,
                             OnRefused on_refused = nullptr,
                             std::vector<std::string> checked_by_handlers = {},
                             FailureThrottle::Options throttle = kTokenThrottle);

  // Calls from now on are checked against `checker` (a reload); calls
  // already admitted keep going.
  void Replace(std::shared_ptr<const BearerTokenChecker> checker) ABSL_LOCKS_EXCLUDED(mu_);

  // The name of the token in `authorization` (a call's metadata, which
  // Process admitted), "" for an unnamed token, or nullopt for one not (or
  // no longer) among the tokens.
  std::optional<std::string> TokenNameOf(absl::string_view authorization) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The check of a call of a `checked_by_handlers` service from `peer` (a
  // key naming who is calling: ThrottleKeyOf; "" for a peer that cannot be
  // told from others, which is never slowed) at `now`. OK if its
  // `authorization` (nullopt: none sent) carries a token; UNAUTHENTICATED
  // if not; UNAVAILABLE, unchecked, while `peer` failed too often lately.
  // A token accepted before always goes through and leaves the throttle as
  // it is (a client sharing an address with one that keeps failing is not
  // slowed and does not forgive it); a guess is never checked while slowed,
  // and a newly accepted token forgives the peer.
  grpc::Status AdmitCall(absl::string_view peer, std::optional<absl::string_view> authorization,
                         absl::Time now) const ABSL_LOCKS_EXCLUDED(mu_);

  // The throttle's key for a gRPC peer string: its address without the
  // port ("ipv4:10.0.0.7:41234" -> "ipv4:10.0.0.7"), an IPv6 one's /64
  // ("ipv6:[2001:db8::7]:80" -> "ipv6:2001:db8::/64"); "" for other peers
  // (every client of a Unix socket gRPC accepted is "unix:"): slowing one
  // would slow them all.
  static std::string ThrottleKeyOf(absl::string_view grpc_peer);

  // A comparison of a few strings: run it inline rather than on gRPC's
  // separate thread for blocking processors.
  bool IsBlocking() const override { return false; }

  grpc::Status Process(const InputMetadata& auth_metadata, grpc::AuthContext* context,
                       OutputMetadata* consumed_auth_metadata,
                       OutputMetadata* response_metadata) override;

 private:
  // The tokens in force now; a call checks against one snapshot.
  std::shared_ptr<const BearerTokenChecker> checker() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the handlers of the method at `path` ("/pkg.Service/Method")
  // check its calls.
  bool CheckedByHandlers(absl::string_view path) const;
  grpc::Status Refuse(absl::string_view why, absl::string_view peer) const;

  mutable absl::Mutex mu_;
  std::shared_ptr<const BearerTokenChecker> checker_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t>& refused_;
  std::atomic<uint64_t>& throttled_;
  const OnRefused on_refused_;
  const std::vector<std::string> checked_by_handlers_;
  // Who failed lately (synchronized on its own).
  mutable FailureThrottle throttle_;
};

// The credentials of a basic-auth file: one "user:password" per line (the
// password is everything after the first ':'), empty lines and '#' comments
// skipped. InvalidArgument naming the line (never its password) if a line is
// malformed, or if there is no entry.
absl::StatusOr<std::vector<std::pair<std::string, std::string>>> ParseBasicAuthFile(
    absl::string_view text, absl::string_view origin);

// Checks the Authorization header of an HTTP request against basic-auth
// credentials: plain passwords (--metrics-auth-file) or bcrypt hashes
// (--web-config-file's basic_auth_users). Thread-safe; the credentials
// change only by Replace.
class BasicAuthChecker {
 public:
  using Credentials = std::vector<std::pair<std::string, std::string>>;
  using HashedCredentials = std::vector<std::pair<std::string, BcryptHash>>;
  explicit BasicAuthChecker(Credentials credentials) { Replace(std::move(credentials)); }
  explicit BasicAuthChecker(HashedCredentials credentials) { Replace(std::move(credentials)); }

  // True if `authorization` is "Basic base64(user:password)" for one of the
  // credentials. Plain passwords: every entry is compared, in constant time,
  // whatever matched. Hashes: the user's hash is checked with bcrypt (an
  // unknown user's password against another's hash, so that the time taken
  // does not tell whether the user exists). Credentials accepted are
  // remembered (as a SHA-256 digest, never the password) until the next
  // Replace: a scraper's every request then skips bcrypt's cost (the
  // exporter toolkit does the same), and Admit lets them through a
  // throttle.
  bool Accepts(absl::string_view authorization) const ABSL_LOCKS_EXCLUDED(mu_);

  // True if `authorization` carries credentials accepted before (since the
  // last Replace).
  bool Remembers(absl::string_view authorization) const ABSL_LOCKS_EXCLUDED(mu_);

  // Requests from now on are checked against `credentials` (a reload).
  void Replace(Credentials credentials) ABSL_LOCKS_EXCLUDED(mu_);
  void Replace(HashedCredentials credentials) ABSL_LOCKS_EXCLUDED(mu_);

  // Accepts, for a request from `peer` (its address) at `now`, unless the
  // peer (an IPv6 one: its /64, AddressBucket) failed too often lately
  // (FailureThrottle): then it is turned away
  // unchecked, `wait` saying for how long. Credentials this checker
  // accepted before always go through and leave the throttle as it is (a
  // scraper sharing an address with a client that keeps failing is not
  // slowed, and does not forgive it); a guess is never checked while
  // slowed.
  struct Admission {
    enum class Kind { kAccepted, kRefused, kWait };
    Kind kind;
    absl::Duration wait;
  };
  Admission Admit(absl::string_view peer, absl::string_view authorization, absl::Time now) const;

  // The WWW-Authenticate value of a 401 answer.
  static constexpr absl::string_view kChallenge = "Basic realm=\"torchmond\", charset=\"UTF-8\"";

 private:
  // One set of credentials, as read from one file.
  struct Users {
    Credentials plain;
    HashedCredentials hashed;
    // Digests of credentials accepted; bounded.
    mutable absl::Mutex verified_mu;
    mutable absl::flat_hash_set<std::string> verified ABSL_GUARDED_BY(verified_mu);
    bool Remembers(const std::string& digest) const ABSL_LOCKS_EXCLUDED(verified_mu);
    void Remember(std::string digest) const ABSL_LOCKS_EXCLUDED(verified_mu);
  };
  std::shared_ptr<const Users> users() const ABSL_LOCKS_EXCLUDED(mu_);
  static bool AcceptsHashed(const Users& users, absl::string_view user,
                            absl::string_view password, const std::string& digest);
  void Install(std::shared_ptr<const Users> users) ABSL_LOCKS_EXCLUDED(mu_);

  mutable absl::Mutex mu_;
  std::shared_ptr<const Users> users_ ABSL_GUARDED_BY(mu_);
  // Who failed lately: not the credentials, but kept with them (mutable:
  // synchronized on its own).
  mutable FailureThrottle throttle_;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_AUTH_AUTH_H_

// Checks a password against a bcrypt hash ("$2b$10$<salt><digest>"), the
// form the exporter-toolkit web-config format (basic_auth_users) stores,
// as written by `htpasswd -B`, Go's bcrypt and crypt(3)'s "$2b$". Written
// from the published algorithm (Provos and Mazieres, "A Future-Adaptable
// Password Scheme", 1999), because the portable static build of torchmond
// has no libcrypt with bcrypt.
//
// The Blowfish initial state bcrypt starts from is the fractional part of
// pi; it is computed from pi once, on first use, rather than pasted in.
//
// Thread-safe: no mutable state is shared between calls (the pi table is
// built once, under C++'s guarded static initialisation, then only read).
#ifndef TORCHMON_SERVER_AUTH_BCRYPT_H_
#define TORCHMON_SERVER_AUTH_BCRYPT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torchmon::server {

// Costs a hash may name: log2 of the number of key-expansion rounds.
inline constexpr int kMinBcryptCost = 4;
inline constexpr int kMaxBcryptCost = 31;
// The most torchmond checks (a web config naming more is refused at load):
// a check takes about 1 s at 14 on a current x86 core, doubling with each
// step, on one of the metrics port's four workers.
inline constexpr int kMaxServedBcryptCost = 14;

// The parts of a "$2a$", "$2b$" or "$2y$" hash. "$2b$" and "$2y$" verify the
// same way. "$2a$" is crypt_blowfish's and libxcrypt's: the same but for a
// password with a byte whose top bit is set (not the first of its 4-byte
// group) whose key the sign-extension bug of "$2x$" would have left
// unchanged; for those, "$2a$" alters the key's first word so that its hash
// cannot be the "$2x$" one ("\xff\xff\xa3": crypt_blowfish's countermeasure,
// Openwall's test list). Like libxcrypt, every minor takes the first 72
// bytes of any password (OpenBSD's first "$2a$" wrapped lengths at 256).
// Every key and the state derived from it are wiped once used.
struct BcryptHash {
  char minor = 'b';
  int cost = 0;
  std::array<uint8_t, 16> salt{};
  std::array<uint8_t, 23> digest{};
};

// Parses a 60-character hash. InvalidArgument, saying which field is wrong
// (and where), if it is not "$2" + a, b or y + "$" + two-digit cost in
// [kMinBcryptCost, kMaxBcryptCost] + "$" + 22 characters of salt + 31 of
// digest in bcrypt's base64 ("./A-Za-z0-9"), or if the last character of
// the salt or of the digest sets bits beyond the 16 or 23 bytes encoded (no
// bcrypt encoder writes those; libxcrypt ignores them in a salt, so its
// crypt() gives back a different string and a crypt()-and-compare check
// could never succeed). "$2x$" (crypt_blowfish's sign-extension bug) and
// "$2$" are refused. The message never quotes the hash.
absl::StatusOr<BcryptHash> ParseBcryptHash(absl::string_view hash);

// True if `password` hashes, under `hash`'s cost and salt, to its digest.
// Bytes past the 72nd are ignored, as bcrypt does; a password with a NUL
// ends there for crypt(3), but not here: every byte given counts. Takes
// 2^cost key expansions (about 50 ms at cost 10 on a current x86 core, as
// libxcrypt takes); the digests are compared in time independent of where they
// differ. False also for a cost outside [kMinBcryptCost, kMaxBcryptCost].
bool BcryptMatches(const BcryptHash& hash, absl::string_view password);

// The full hash ("$2b$NN$" + salt + digest) of `password` under `salt16`
// (16 raw bytes) and `cost`, with minor 'a', 'b' or 'y'. For tests and for
// whoever writes a hash. "" if `salt16` is not 16 bytes, `cost` is outside
// [kMinBcryptCost, kMaxBcryptCost] or `minor` is not one of those.
std::string BcryptHashOf(absl::string_view password, absl::string_view salt16, int cost,
                         char minor = 'b');

namespace bcrypt_internal {

// Blowfish's initial state: the 18-word P-array, then the four 256-word
// S-boxes, i.e. the first 1042 32-bit words of pi's fractional part
// (0x243F6A88, 0x85A308D3, ...). Computed on first call, then shared.
inline constexpr size_t kPiWords = 18 + 4 * 256;
const std::array<uint32_t, kPiWords>& PiFractionWords();

// Computes those words afresh, uncached (so a test or benchmark can time it).
std::array<uint32_t, kPiWords> ComputePiFractionWords();

}  // namespace bcrypt_internal

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_AUTH_BCRYPT_H_

#include "server/auth/bcrypt.h"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <openssl/crypto.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "server/auth/constant_time.h"

namespace torchmon::server {
namespace bcrypt_internal {
namespace {

// Fixed-point numbers for computing pi: word 0 is the integer part, word i
// the i-th 32 bits of the fraction. The guard words absorb the truncation
// of every division (a few thousand ulps at most), so the kPiWords words
// that are kept are exact.
constexpr size_t kGuardWords = 8;
constexpr size_t kFixedWords = 1 + kPiWords + kGuardWords;
using Fixed = std::vector<uint32_t>;

// sum += value, where value's words before `from` are zero.
void AddFrom(Fixed& sum, const Fixed& value, size_t from) {
  uint64_t carry = 0;
  for (size_t i = kFixedWords; i-- > from;) {
    const uint64_t s = uint64_t{sum[i]} + value[i] + carry;
    sum[i] = static_cast<uint32_t>(s);
    carry = s >> 32;
  }
  for (size_t i = from; carry != 0 && i-- > 0;) {
    const uint64_t s = uint64_t{sum[i]} + carry;
    sum[i] = static_cast<uint32_t>(s);
    carry = s >> 32;
  }
}

// sum -= value, where value's words before `from` are zero and value <= sum.
void SubtractFrom(Fixed& sum, const Fixed& value, size_t from) {
  uint64_t borrow = 0;
  for (size_t i = kFixedWords; i-- > from;) {
    const uint64_t d = uint64_t{sum[i]} - value[i] - borrow;
    sum[i] = static_cast<uint32_t>(d);
    borrow = (d >> 32) & 1;
  }
  for (size_t i = from; borrow != 0 && i-- > 0;) {
    const uint64_t d = uint64_t{sum[i]} - borrow;
    sum[i] = static_cast<uint32_t>(d);
    borrow = (d >> 32) & 1;
  }
}

// sum += multiplier * atan(1/x) (-= if `subtract`), by the series
// atan(1/x) = sum_k (-1)^k / ((2k+1) x^(2k+1)). x and x^2 are template
// arguments so that dividing by them compiles to a multiplication; only the
// division by 2k+1 is left to the divider.
template <uint32_t kX, uint32_t kXSquared>
void AddArctanOfInverse(Fixed& sum, uint32_t multiplier, bool subtract) {
  static_assert(uint64_t{kX} * kX == kXSquared);
  Fixed power(kFixedWords, 0);  // multiplier / x^(2k+1)
  Fixed term(kFixedWords, 0);   // power / (2k+1)
  power[0] = multiplier;
  uint64_t rem = 0;
  for (size_t i = 0; i < kFixedWords; ++i) {
    const uint64_t cur = (rem << 32) | power[i];
    power[i] = static_cast<uint32_t>(cur / kX);
    rem = cur % kX;
  }
  size_t lead = 0;  // words of `power` before this are zero
  if (subtract) {
    SubtractFrom(sum, power, lead);
  } else {
    AddFrom(sum, power, lead);
  }
  for (uint32_t k = 1;; ++k) {
    while (lead < kFixedWords && power[lead] == 0) ++lead;
    if (lead == kFixedWords) break;
    // One pass divides power by x^2 and the new power by 2k+1: the two
    // remainder chains overlap in the pipeline.
    const uint64_t odd = 2 * uint64_t{k} + 1;
    uint64_t rem_power = 0;
    uint64_t rem_term = 0;
    for (size_t i = lead; i < kFixedWords; ++i) {
      const uint64_t cur = (rem_power << 32) | power[i];
      const uint32_t p = static_cast<uint32_t>(cur / kXSquared);
      rem_power = cur % kXSquared;
      power[i] = p;
      const uint64_t cur_term = (rem_term << 32) | p;
      term[i] = static_cast<uint32_t>(cur_term / odd);
      rem_term = cur_term % odd;
    }
    // Words of `term` before `lead` are stale from earlier (longer) terms,
    // but AddFrom and SubtractFrom never read them.
    if (subtract != (k % 2 == 1)) {
      SubtractFrom(sum, term, lead);
    } else {
      AddFrom(sum, term, lead);
    }
  }
}

}  // namespace

std::array<uint32_t, kPiWords> ComputePiFractionWords() {
  // Machin: pi = 16 atan(1/5) - 4 atan(1/239). Adding the whole first
  // series before subtracting the second keeps every partial sum positive.
  Fixed pi(kFixedWords, 0);
  AddArctanOfInverse<5, 25>(pi, 16, /*subtract=*/false);
  AddArctanOfInverse<239, 239 * 239>(pi, 4, /*subtract=*/true);
  std::array<uint32_t, kPiWords> words;
  for (size_t i = 0; i < kPiWords; ++i) words[i] = pi[1 + i];
  return words;
}

const std::array<uint32_t, kPiWords>& PiFractionWords() {
  // Trivially destructible, so safe as a static; C++ guards its first
  // initialisation against concurrent callers.
  static const std::array<uint32_t, kPiWords> words = ComputePiFractionWords();
  return words;
}

}  // namespace bcrypt_internal

namespace {

constexpr size_t kSaltBytes = 16;
constexpr size_t kDigestBytes = 23;
constexpr size_t kSaltChars = 22;    // ceil(16 * 8 / 6)
constexpr size_t kDigestChars = 31;  // ceil(23 * 8 / 6)
constexpr size_t kPrefixChars = 7;   // "$2b$10$"
constexpr size_t kHashChars = kPrefixChars + kSaltChars + kDigestChars;
// bcrypt never reads more of a password than fills the 18-word P-array.
constexpr size_t kMaxKeyBytes = 72;
constexpr size_t kKeyWords = 18;

constexpr absl::string_view kBase64Alphabet =
    "./ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

int Base64Value(char c) {
  if (c == '.') return 0;
  if (c == '/') return 1;
  if (c >= 'A' && c <= 'Z') return 2 + (c - 'A');
  if (c >= 'a' && c <= 'z') return 28 + (c - 'a');
  if (c >= '0' && c <= '9') return 54 + (c - '0');
  return -1;
}

// Big-endian 6-bit groups, no padding: the last character carries the
// remaining 2 or 4 bits in its high end.
std::string Base64Encode(const uint8_t* bytes, size_t n) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    acc = (acc << 8) | bytes[i];
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kBase64Alphabet[(acc >> bits) & 63]);
    }
    acc &= (1u << bits) - 1;
  }
  if (bits > 0) out.push_back(kBase64Alphabet[(acc << (6 - bits)) & 63]);
  return out;
}

// Decodes `text` into the `n` bytes it encodes (n = 6 * text.size() / 8,
// which the callers' constants guarantee). `field` and `offset` (where
// text starts in the hash, 0-based) only word the message.
absl::Status Base64Decode(absl::string_view text, uint8_t* out, size_t n, absl::string_view field,
                          size_t offset) {
  uint32_t acc = 0;
  int bits = 0;
  size_t written = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const int v = Base64Value(text[i]);
    if (v < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("bcrypt hash: character ", offset + i + 1, " (in the ", field,
                       ") is not one of bcrypt's base64 characters ./A-Za-z0-9"));
    }
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out[written++] = static_cast<uint8_t>(acc >> bits);
      acc &= (1u << bits) - 1;
    }
  }
  if (acc != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bcrypt hash: the last character of the ", field, " (character ", offset + text.size(),
        ") sets bits past the ", n, " bytes it encodes; no bcrypt encoder writes that"));
  }
  return absl::OkStatus();
}

uint32_t BigEndianWord(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
}

// bcrypt's key: the bytes used cyclically, as big-endian words, enough to
// cover the P-array once.
std::array<uint32_t, kKeyWords> KeyWords(const uint8_t* bytes, size_t n) {
  std::array<uint32_t, kKeyWords> words;
  size_t at = 0;
  for (uint32_t& word : words) {
    word = 0;
    for (int i = 0; i < 4; ++i) {
      word = (word << 8) | bytes[at];
      at = at + 1 == n ? 0 : at + 1;
    }
  }
  return words;
}

struct Blowfish {
  std::array<uint32_t, 18> p;
  std::array<std::array<uint32_t, 256>, 4> s;

  Blowfish() {
    const auto& pi = bcrypt_internal::PiFractionWords();
    for (size_t i = 0; i < p.size(); ++i) p[i] = pi[i];
    for (size_t box = 0; box < s.size(); ++box) {
      for (size_t i = 0; i < 256; ++i) s[box][i] = pi[p.size() + 256 * box + i];
    }
  }

  uint32_t F(uint32_t x) const {
    return ((s[0][x >> 24] + s[1][(x >> 16) & 0xff]) ^ s[2][(x >> 8) & 0xff]) + s[3][x & 0xff];
  }

  // Sixteen Feistel rounds, two per step so that the halves keep their
  // names; the final swap is folded into the output.
  void Encrypt(uint32_t& left, uint32_t& right) const {
    uint32_t l = left;
    uint32_t r = right;
    for (size_t i = 0; i < 16; i += 2) {
      l ^= p[i];
      r ^= F(l);
      r ^= p[i + 1];
      l ^= F(r);
    }
    l ^= p[16];
    r ^= p[17];
    left = r;
    right = l;
  }

  // The paper's ExpandKey: XORs the key into P, then refills P and the
  // S-boxes with successive encryptions of a running block. With a salt,
  // each block is first XORed with the salt's next 64-bit half,
  // alternating across the whole refill; without one (nullptr), it is not.
  void ExpandKey(const std::array<uint32_t, 4>* salt, const std::array<uint32_t, kKeyWords>& key) {
    for (size_t i = 0; i < p.size(); ++i) p[i] ^= key[i];
    uint32_t l = 0;
    uint32_t r = 0;
    size_t half = 0;
    auto next = [&](uint32_t& out_l, uint32_t& out_r) {
      if (salt != nullptr) {
        l ^= (*salt)[half];
        r ^= (*salt)[half + 1];
        half ^= 2;
      }
      Encrypt(l, r);
      out_l = l;
      out_r = r;
    };
    for (size_t i = 0; i < p.size(); i += 2) next(p[i], p[i + 1]);
    for (auto& box : s) {
      for (size_t i = 0; i < box.size(); i += 2) next(box[i], box[i + 1]);
    }
  }
};

// What "$2a$" adds to the key, as crypt_blowfish 1.1 and later (and so
// libxcrypt) define it: 0x10000, to be XORed into the first word of the
// first expansion, for a key of which some byte (not the first of its
// 32-bit word) has its top bit set and whose words are nevertheless the
// same as the sign-extending "$2x$" bug would have made them. Without it
// such a key's "$2a$" hash would equal its "$2x$" one, which the bug's
// wrong hashes share with other passwords ("\xff\xff\xa3" and "\xa3").
// The `bytes` are the cycled key, as KeyWords reads it.
uint32_t TwoASafetyBit(const uint8_t* bytes, size_t n) {
  uint32_t sign = 0;
  uint32_t diff = 0;
  size_t at = 0;
  for (size_t word = 0; word < kKeyWords; ++word) {
    uint32_t correct = 0;
    uint32_t buggy = 0;
    for (int i = 0; i < 4; ++i) {
      const uint8_t byte = bytes[at];
      correct = (correct << 8) | byte;
      buggy = (buggy << 8) | static_cast<uint32_t>(static_cast<int32_t>(static_cast<int8_t>(byte)));
      if (i > 0) sign |= buggy & 0x80;
      at = (at + 1) % n;
    }
    diff |= correct ^ buggy;
  }
  return diff == 0 && sign != 0 ? 0x10000 : 0;
}

// Overwrites `bytes` with zeros in a way the compiler may not drop: the
// key and what was derived from it are wiped once used.
void Wipe(void* bytes, size_t n) { OPENSSL_cleanse(bytes, n); }

std::array<uint8_t, kDigestBytes> Digest(absl::string_view password,
                                         const std::array<uint8_t, kSaltBytes>& salt, int cost,
                                         char minor) {
  // The password with its terminating NUL, cut to 72 bytes.
  std::array<uint8_t, kMaxKeyBytes> key_bytes{};
  const size_t copied = std::min(password.size(), kMaxKeyBytes);
  for (size_t i = 0; i < copied; ++i) key_bytes[i] = static_cast<uint8_t>(password[i]);
  const size_t key_length = std::min(password.size() + 1, kMaxKeyBytes);
  std::array<uint32_t, kKeyWords> key = KeyWords(key_bytes.data(), key_length);
  std::array<uint32_t, kKeyWords> first_key = key;
  if (minor == 'a') first_key[0] ^= TwoASafetyBit(key_bytes.data(), key_length);
  Wipe(key_bytes.data(), key_bytes.size());
  const std::array<uint32_t, kKeyWords> salt_key = KeyWords(salt.data(), salt.size());
  const std::array<uint32_t, 4> salt_words = {salt_key[0], salt_key[1], salt_key[2], salt_key[3]};

  // EksBlowfishSetup. About 4 KiB of state, on the stack of the caller.
  Blowfish state;
  state.ExpandKey(&salt_words, first_key);
  Wipe(first_key.data(), sizeof(first_key));
  const uint64_t rounds = uint64_t{1} << cost;
  for (uint64_t i = 0; i < rounds; ++i) {
    state.ExpandKey(nullptr, key);
    state.ExpandKey(nullptr, salt_key);
  }
  Wipe(key.data(), sizeof(key));

  static constexpr char kMagic[] = "OrpheanBeholderScryDoubt";
  std::array<uint32_t, 6> text;
  for (size_t i = 0; i < text.size(); ++i) {
    text[i] = BigEndianWord(reinterpret_cast<const uint8_t*>(kMagic) + 4 * i);
  }
  for (size_t block = 0; block < text.size(); block += 2) {
    for (int i = 0; i < 64; ++i) state.Encrypt(text[block], text[block + 1]);
  }
  std::array<uint8_t, kDigestBytes> digest;
  for (size_t i = 0; i < digest.size(); ++i) {
    digest[i] = static_cast<uint8_t>(text[i / 4] >> (24 - 8 * (i % 4)));
  }
  // The state is a function of the key: no copy of it outlives the check.
  Wipe(&state, sizeof(state));
  Wipe(text.data(), sizeof(text));
  return digest;
}

bool IsSupportedMinor(char minor) { return minor == 'a' || minor == 'b' || minor == 'y'; }

}  // namespace

absl::StatusOr<BcryptHash> ParseBcryptHash(absl::string_view hash) {
  if (hash.size() < 4 || hash[0] != '$' || hash[1] != '2' || hash[3] != '$' ||
      !IsSupportedMinor(hash[2])) {
    if (hash.size() >= 4 && hash.substr(0, 4) == "$2x$") {
      return absl::InvalidArgumentError(
          "bcrypt hash: \"$2x$\" hashes (from crypt_blowfish's sign-extension bug) are not "
          "supported; hash the password again as \"$2b$\" or \"$2y$\"");
    }
    return absl::InvalidArgumentError(
        "not a supported bcrypt hash: it must begin with \"$2a$\", \"$2b$\" or \"$2y$\"");
  }
  BcryptHash parsed;
  parsed.minor = hash[2];
  const auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  if (hash.size() < kPrefixChars || !is_digit(hash[4]) || !is_digit(hash[5]) || hash[6] != '$') {
    return absl::InvalidArgumentError(
        "bcrypt hash: characters 5-7 must be a two-digit cost and '$' (as in \"$2b$10$\")");
  }
  parsed.cost = (hash[4] - '0') * 10 + (hash[5] - '0');
  if (parsed.cost < kMinBcryptCost || parsed.cost > kMaxBcryptCost) {
    return absl::InvalidArgumentError(absl::StrCat("bcrypt hash: cost ", parsed.cost,
                                                   " is outside [", kMinBcryptCost, ", ",
                                                   kMaxBcryptCost, "]"));
  }
  if (hash.size() != kHashChars) {
    return absl::InvalidArgumentError(absl::StrCat("bcrypt hash: it must be ", kHashChars,
                                                   " characters long, not ", hash.size()));
  }
  absl::Status salt = Base64Decode(hash.substr(kPrefixChars, kSaltChars), parsed.salt.data(),
                                   parsed.salt.size(), "salt", kPrefixChars);
  if (!salt.ok()) return salt;
  absl::Status digest = Base64Decode(hash.substr(kPrefixChars + kSaltChars), parsed.digest.data(),
                                     parsed.digest.size(), "digest", kPrefixChars + kSaltChars);
  if (!digest.ok()) return digest;
  return parsed;
}

bool BcryptMatches(const BcryptHash& hash, absl::string_view password) {
  if (hash.cost < kMinBcryptCost || hash.cost > kMaxBcryptCost) return false;
  const std::array<uint8_t, kDigestBytes> digest =
      Digest(password, hash.salt, hash.cost, hash.minor);
  const auto bytes = [](const std::array<uint8_t, kDigestBytes>& d) {
    return absl::string_view(reinterpret_cast<const char*>(d.data()), d.size());
  };
  return ConstantTimeEquals(bytes(digest), bytes(hash.digest));
}

std::string BcryptHashOf(absl::string_view password, absl::string_view salt16, int cost,
                         char minor) {
  if (salt16.size() != kSaltBytes || cost < kMinBcryptCost || cost > kMaxBcryptCost ||
      !IsSupportedMinor(minor)) {
    return "";
  }
  std::array<uint8_t, kSaltBytes> salt;
  for (size_t i = 0; i < salt.size(); ++i) salt[i] = static_cast<uint8_t>(salt16[i]);
  const std::array<uint8_t, kDigestBytes> digest = Digest(password, salt, cost, minor);
  const char cost_digits[] = {static_cast<char>('0' + cost / 10),
                              static_cast<char>('0' + cost % 10)};
  return absl::StrCat("$2", absl::string_view(&minor, 1), "$", absl::string_view(cost_digits, 2),
                      "$", Base64Encode(salt.data(), salt.size()),
                      Base64Encode(digest.data(), digest.size()));
}

}  // namespace torchmon::server

// bcrypt, written from the paper: its hashes must be the very strings
// libxcrypt's crypt(3) writes, and a malformed hash is refused saying why.
// Where libxcrypt is linked (TORCHMON_HAVE_LIBCRYPT) the hashes are checked
// against it on random passwords; the fixed vectors below came from it too
// (Python's crypt module over Debian 12's libxcrypt), so a build without
// it still checks the algorithm.
#include "server/auth/bcrypt.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#if defined(TORCHMON_HAVE_LIBCRYPT)
#include <crypt.h>
#endif

namespace torchmon::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct Vector {
  std::string password;
  std::string hash;
};

// From libxcrypt (crypt.crypt(pw, crypt.mksalt(crypt.METHOD_BLOWFISH,
// rounds=32)), and the "U*U" salt given by hand).
std::vector<Vector> FixedVectors() {
  return {
      {"", "$2b$05$8dw4Gwyf511nuxCpRaFq7uONgNtO6O3HNV1tULo75yOwhygauaKfi"},
      {"correct horse battery staple",
       "$2b$05$oDEn.wc0VsgkoEZZV8yZlO3xOATl1ALWY6A/IjV9p4iUh63tn1B6."},
      // "pässwörd-üß" in UTF-8: bytes >= 0x80 must count as unsigned.
      {"p\xc3\xa4ssw\xc3\xb6rd-\xc3\xbc\xc3\x9f",
       "$2b$05$Qxmlu5ncrQ8yAs0Xzy64SOXg9zJ0l/A/U1opaSu1WZXv05XWtMJEG"},
      {std::string(72, 'x') + "ignored",
       "$2b$05$8ndX2cIsDRieqRm3cgpes.B1Dplwh.BOPtGKvViM8dg/Hi1eOYzQu"},
      {"U*U", "$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"},
      {"U*U", "$2y$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW"},
  };
}

absl::string_view SaltBytes(const BcryptHash& hash) {
  return absl::string_view(reinterpret_cast<const char*>(hash.salt.data()), hash.salt.size());
}

// Checks `hash` (from libxcrypt) is what we compute for `password`, and
// that we accept it for `password` and refuse it for a one-byte change.
void ExpectAgrees(const std::string& password, const std::string& hash) {
  SCOPED_TRACE(absl::StrCat("password of ", password.size(), " bytes, hash ", hash));
  absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(hash);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(BcryptHashOf(password, SaltBytes(*parsed), parsed->cost, parsed->minor), hash);
  EXPECT_TRUE(BcryptMatches(*parsed, password));
  std::string changed = password.empty() ? std::string("\x01") : password;
  const size_t at = std::min<size_t>(changed.size(), 72) / 2;
  changed[at] = static_cast<char>(changed[at] ^ 0x20);
  EXPECT_FALSE(BcryptMatches(*parsed, changed));
}

TEST(BcryptTest, PiTableHoldsBlowfishsKnownWords) {
  const auto& pi = bcrypt_internal::PiFractionWords();
  EXPECT_EQ(pi[0], 0x243F6A88u);                   // P[0]
  EXPECT_EQ(pi[1], 0x85A308D3u);                   // P[1]
  EXPECT_EQ(pi[17], 0x8979FB1Bu);                  // P[17]
  EXPECT_EQ(pi[18], 0xD1310BA6u);                  // S0[0]
  EXPECT_EQ(pi[18 + 3 * 256 + 255], 0x3AC372E6u);  // S3[255], the last word
}

TEST(BcryptTest, PiTableComputedAfreshEqualsTheSharedOne) {
  EXPECT_EQ(bcrypt_internal::ComputePiFractionWords(), bcrypt_internal::PiFractionWords());
}

TEST(BcryptTest, HashOfReproducesFixedLibxcryptVectors) {
  for (const Vector& v : FixedVectors()) {
    absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(v.hash);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(BcryptHashOf(v.password, SaltBytes(*parsed), parsed->cost, parsed->minor), v.hash);
  }
}

TEST(BcryptTest, MatchesFixedLibxcryptVectorsAndRefusesAOneByteChange) {
  for (const Vector& v : FixedVectors()) ExpectAgrees(v.password, v.hash);
}

// Openwall's crypt_blowfish test list (wrapper.c of crypt_blowfish 1.3,
// which libxcrypt's bcrypt is): every "$2a$", "$2b$" and "$2y$" line is
// matched and reproduced; the "$2x$" lines (the sign-extension bug's
// hashes) are refused, naming the bug.
struct Line {
  const char* hash;
  std::string password;
};
std::vector<Line> OpenwallList() {
  const std::string after72 = "chars after 72 are ignored as usual";
  std::string aa55, ff3;
  for (int i = 0; i < 36; ++i) aa55 += "\xaa\x55";
  for (int i = 0; i < 24; ++i) ff3 += "\x55\xaa\xff";
  return {
      {"$2a$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW", "U*U"},
      {"$2a$05$CCCCCCCCCCCCCCCCCCCCC.VGOzA784oUp/Z0DY336zx7pLYAy0lwK", "U*U*"},
      {"$2a$05$XXXXXXXXXXXXXXXXXXXXXOAcXxm9kjPGEMsLznoKqmqw7tc8WCx4a", "U*U*U"},
      {"$2a$05$abcdefghijklmnopqrstuu5s2v8.iXieOjg/.AySBTTZIIVFJeBui",
       "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789chars after 72 are "
       "ignored"},
      {"$2x$05$/OK.fbVrR/bpIqNJ5ianF.CE5elHaaO4EbggVDjb8P19RukzXSM3e", "\xa3"},
      {"$2x$05$/OK.fbVrR/bpIqNJ5ianF.CE5elHaaO4EbggVDjb8P19RukzXSM3e", "\xff\xff\xa3"},
      {"$2y$05$/OK.fbVrR/bpIqNJ5ianF.CE5elHaaO4EbggVDjb8P19RukzXSM3e", "\xff\xff\xa3"},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.nqd1wy.pTMdcvrRWxyiGL2eMz.2a85.", "\xff\xff\xa3"},
      {"$2b$05$/OK.fbVrR/bpIqNJ5ianF.CE5elHaaO4EbggVDjb8P19RukzXSM3e", "\xff\xff\xa3"},
      {"$2y$05$/OK.fbVrR/bpIqNJ5ianF.Sa7shbm4.OzKpvFnX1pQLmQW96oUlCq", "\xa3"},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.Sa7shbm4.OzKpvFnX1pQLmQW96oUlCq", "\xa3"},
      {"$2b$05$/OK.fbVrR/bpIqNJ5ianF.Sa7shbm4.OzKpvFnX1pQLmQW96oUlCq", "\xa3"},
      {"$2x$05$/OK.fbVrR/bpIqNJ5ianF.o./n25XVfn6oAPaUvHe.Csk4zRfsYPi", "1\xa3" "345"},
      {"$2x$05$/OK.fbVrR/bpIqNJ5ianF.o./n25XVfn6oAPaUvHe.Csk4zRfsYPi", "\xff\xa3" "345"},
      {"$2x$05$/OK.fbVrR/bpIqNJ5ianF.o./n25XVfn6oAPaUvHe.Csk4zRfsYPi",
       "\xff\xa3" "34" "\xff\xff\xff\xa3" "345"},
      {"$2y$05$/OK.fbVrR/bpIqNJ5ianF.o./n25XVfn6oAPaUvHe.Csk4zRfsYPi",
       "\xff\xa3" "34" "\xff\xff\xff\xa3" "345"},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.ZC1JEJ8Z4gPfpe1JOr/oyPXTWl9EFd.",
       "\xff\xa3" "34" "\xff\xff\xff\xa3" "345"},
      {"$2y$05$/OK.fbVrR/bpIqNJ5ianF.nRht2l/HRhr6zmCp9vYUvvsqynflf9e", "\xff\xa3" "345"},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.nRht2l/HRhr6zmCp9vYUvvsqynflf9e", "\xff\xa3" "345"},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.6IflQkJytoRVc1yuaNtHfiuq.FRlSIS", "\xa3" "ab"},
      {"$2x$05$/OK.fbVrR/bpIqNJ5ianF.6IflQkJytoRVc1yuaNtHfiuq.FRlSIS", "\xa3" "ab"},
      {"$2y$05$/OK.fbVrR/bpIqNJ5ianF.6IflQkJytoRVc1yuaNtHfiuq.FRlSIS", "\xa3" "ab"},
      {"$2x$05$6bNw2HLQYeqHYyBfLMsv/OiwqTymGIGzFsA4hOTWebfehXHNprcAS", "\xd1\x91"},
      {"$2x$05$6bNw2HLQYeqHYyBfLMsv/O9LIGgn8OMzuDoHfof8AQimSGfcSWxnS",
       "\xd0\xc1\xd2\xcf\xcc\xd8"},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.swQOIzjOiJ9GHEPuhEkvqrUyvWhEMx6",
       std::string(72, '\xaa') + after72},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.R9xrDjiycxMbQE2bp.vgqlYpW5wx2yy", aa55},
      {"$2a$05$/OK.fbVrR/bpIqNJ5ianF.9tQZzcJfm3uj2NvJ/n5xkhpqLrMpWCe", ff3},
      {"$2a$05$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy", ""},
  };
}

TEST(BcryptTest, OpenwallsListIsMatchedAndItsTwoXLinesRefused) {
  int matched = 0, refused = 0;
  for (const Line& line : OpenwallList()) {
    if (std::string(line.hash).rfind("$2x$", 0) == 0) {
      absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(line.hash);
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << line.hash;
      EXPECT_THAT(parsed.status().message(), HasSubstr("sign-extension")) << line.hash;
      ++refused;
    } else {
      ExpectAgrees(line.password, line.hash);
      ++matched;
    }
  }
  EXPECT_EQ(matched, 20);
  EXPECT_EQ(refused, 8);
}

// "$2a$"'s countermeasure is what separates these: one password, the same
// salt, three minors, and "$2a$" alone differs.
TEST(BcryptTest, TwoADiffersFromTwoBOnlyWhereTheBugWouldHaveHidden) {
  const std::string salt = "0123456789abcdef";
  const std::string b = BcryptHashOf("\xff\xff\xa3", salt, 5, 'b');
  const std::string y = BcryptHashOf("\xff\xff\xa3", salt, 5, 'y');
  const std::string a = BcryptHashOf("\xff\xff\xa3", salt, 5, 'a');
  EXPECT_EQ(b.substr(4), y.substr(4));
  EXPECT_NE(a.substr(4), b.substr(4));
  // A password without such a byte hashes the same under every minor.
  EXPECT_EQ(BcryptHashOf("p\xc3\xa4ss", salt, 5, 'a').substr(4),
            BcryptHashOf("p\xc3\xa4ss", salt, 5, 'b').substr(4));
}

// The vectors of jBCrypt, by OpenBSD's bcrypt's author, and the 254- and
// 255-byte passwords of OpenBSD's length fix ("$2b$": every minor here
// takes their first 72 bytes).
TEST(BcryptTest, OpenBsdsVectorsAreMatched) {
  const std::string digits = std::string("0123456789") + "0123456789" + "0123456789" +
                             "0123456789" + "0123456789" + "0123456789" + "0123456789" +
                             "0123456789" + "0123456789" + "0123456789" + "0123456789" +
                             "0123456789" + "0123456789" + "0123456789" + "0123456789" +
                             "0123456789" + "0123456789" + "0123456789" + "0123456789" +
                             "0123456789" + "0123456789" + "0123456789" + "0123456789" +
                             "0123456789" + "0123456789" + "0123456789";
  const std::vector<Line> lines = {
      {"$2a$06$DCq7YPn5Rq63x1Lad4cll.TV4S6ytwfsfvkgY8jIucDrjc8deX1s.", ""},
      {"$2a$08$HqWuK6/Ng6sg9gQzbLrgb.Tl.ZHfXLhvt/SgVyWhQqgqcZ7ZuUtye", ""},
      {"$2a$10$k1wbIrmNyFAPwPVPSVa/zecw2BCEnBwVS2GbrmgzxFUOqW9dk4TCW", ""},
      {"$2a$06$m0CrhHm10qJ3lXRY.5zDGO3rS2KdeeWLuGmsfGlMfOxih58VYVfxe", "a"},
      {"$2a$08$cfcvVd2aQ8CMvoMpP2EBfeodLEkkFJ9umNEfPD18.hUF62qqlC/V.", "a"},
      {"$2a$06$If6bvum7DFjUnE9p2uDeDu0YHzrHM6tf.iqN8.yx.jNN1ILEf7h0i", "abc"},
      {"$2a$08$Ro0CUfOqk6cXEKf3dyaM7OhSCvnwM9s4wIX9JeLapehKK5YdLxKcm", "abc"},
      {"$2a$10$WvvTPHKwdBJ3uk0Z37EMR.hLA2W6N9AEBhEgrAOljy2Ae5MtaSIUi", "abc"},
      {"$2a$06$.rCVZVOThsIa97pEDOxvGuRRgzG64bvtJ0938xuqzv18d3ZpQhstC",
       "abcdefghijklmnopqrstuvwxyz"},
      {"$2a$04$R1lJ2gkNaoPGdafE.H.16.1MKHPvmKwryeulRe225LKProWYwt9Oi", digits.substr(0, 254)},
      {"$2a$04$R1lJ2gkNaoPGdafE.H.16.1MKHPvmKwryeulRe225LKProWYwt9Oi", digits.substr(0, 255)},
  };
  for (const Line& line : lines) ExpectAgrees(line.password, line.hash);
}

// crypt_blowfish's list of settings it refuses.
TEST(BcryptTest, OpenwallsBadSettingsAreRefused) {
  for (const char* hash : {"$2a$03$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy",
                           "$2a$32$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy",
                           "$2c$05$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy",
                           "$2z$05$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy",
                           "$2`$05$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy",
                           "$2{$05$CCCCCCCCCCCCCCCCCCCCC.7uG0VCzI2bS7j6ymqJi9CdcdxiRTWNy"}) {
    EXPECT_EQ(ParseBcryptHash(hash).status().code(), absl::StatusCode::kInvalidArgument) << hash;
  }
}

TEST(BcryptTest, ParsesMinorCostSaltAndDigest) {
  absl::StatusOr<BcryptHash> parsed =
      ParseBcryptHash("$2y$05$CCCCCCCCCCCCCCCCCCCCC.E5YPO9kmyuRGyh0XouQYb4YMJKvyOeW");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->minor, 'y');
  EXPECT_EQ(parsed->cost, 5);
  // 'C' is 4 in bcrypt's base64: 000100 repeated.
  EXPECT_EQ(parsed->salt[0], 0x10);
  EXPECT_EQ(parsed->salt[1], 0x41);
  EXPECT_EQ(parsed->salt[2], 0x04);
  // "E5YP": 000110 111011 011010 010001.
  EXPECT_EQ(parsed->digest[0], 0x1B);
  EXPECT_EQ(parsed->digest[1], 0xB6);
  EXPECT_EQ(parsed->digest[2], 0x91);
}

TEST(BcryptTest, OnlyTheFirstSeventyTwoBytesCount) {
  absl::StatusOr<BcryptHash> parsed =
      ParseBcryptHash("$2b$05$8ndX2cIsDRieqRm3cgpes.B1Dplwh.BOPtGKvViM8dg/Hi1eOYzQu");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(BcryptMatches(*parsed, std::string(72, 'x')));
  EXPECT_TRUE(BcryptMatches(*parsed, std::string(72, 'x') + "anything else"));
  EXPECT_FALSE(BcryptMatches(*parsed, std::string(71, 'x')));
}

TEST(BcryptTest, AnEmbeddedNulIsPartOfThePassword) {
  const std::string hash = BcryptHashOf("a", std::string(16, '\x5a'), 4);
  absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(hash);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_TRUE(BcryptMatches(*parsed, "a"));
  EXPECT_FALSE(BcryptMatches(*parsed, absl::string_view("a\0b", 3)));
}

TEST(BcryptTest, HashOfRefusesBadArgumentsWithAnEmptyString) {
  const std::string salt(16, 's');
  EXPECT_EQ(BcryptHashOf("pw", "short", 4), "");
  EXPECT_EQ(BcryptHashOf("pw", salt, 3), "");
  EXPECT_EQ(BcryptHashOf("pw", salt, 32), "");
  EXPECT_EQ(BcryptHashOf("pw", salt, 4, 'x'), "");
  EXPECT_THAT(BcryptHashOf("pw", salt, 4, 'a'), ::testing::StartsWith("$2a$04$"));
}

// A valid hash to take apart.
constexpr absl::string_view kGood = "$2b$05$oDEn.wc0VsgkoEZZV8yZlO3xOATl1ALWY6A/IjV9p4iUh63tn1B6.";

void ExpectRefused(absl::string_view hash, absl::string_view why) {
  SCOPED_TRACE(hash);
  absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(hash);
  ASSERT_FALSE(parsed.ok());
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr(why));
  if (hash.size() > 7) {
    EXPECT_THAT(parsed.status().message(), Not(HasSubstr(hash.substr(7))));
  }
}

TEST(BcryptTest, RefusesAPrefixOtherThanTwoATwoBOrTwoY) {
  for (absl::string_view prefix : {"$2c$", "$2$0", "$1$0", "$6$0", "2b$0", "$3b$"}) {
    ExpectRefused(absl::StrCat(prefix, kGood.substr(4)), "must begin with \"$2a$\"");
  }
  ExpectRefused("", "must begin with");
  ExpectRefused("$2b", "must begin with");
}

TEST(BcryptTest, RefusesTwoXNamingItsBug) {
  ExpectRefused(absl::StrCat("$2x$", kGood.substr(4)), "sign-extension bug");
}

TEST(BcryptTest, RefusesACostThatIsNotTwoDigits) {
  ExpectRefused(absl::StrCat("$2b$5$", kGood.substr(7)), "two-digit cost");
  ExpectRefused(absl::StrCat("$2b$0a$", kGood.substr(7)), "two-digit cost");
  ExpectRefused(absl::StrCat("$2b$05x", kGood.substr(7)), "two-digit cost");
  ExpectRefused("$2b$0", "two-digit cost");
}

TEST(BcryptTest, RefusesACostOutsideFourToThirtyOne) {
  ExpectRefused(absl::StrCat("$2b$03$", kGood.substr(7)), "cost 3 is outside [4, 31]");
  ExpectRefused(absl::StrCat("$2b$32$", kGood.substr(7)), "cost 32 is outside [4, 31]");
  ExpectRefused(absl::StrCat("$2b$00$", kGood.substr(7)), "cost 0 is outside [4, 31]");
  EXPECT_TRUE(ParseBcryptHash(absl::StrCat("$2b$31$", kGood.substr(7))).ok());
  EXPECT_TRUE(ParseBcryptHash(absl::StrCat("$2b$04$", kGood.substr(7))).ok());
}

TEST(BcryptTest, RefusesAWrongLength) {
  ExpectRefused(kGood.substr(0, 59), "must be 60 characters long, not 59");
  ExpectRefused(absl::StrCat(kGood, "."), "must be 60 characters long, not 61");
  ExpectRefused(absl::StrCat(kGood, "\n"), "must be 60 characters long, not 61");
  ExpectRefused(kGood.substr(0, 7), "must be 60 characters long, not 7");
}

TEST(BcryptTest, RefusesACharacterOutsideBcryptsBase64NamingWhere) {
  std::string in_salt(kGood);
  in_salt[10] = '+';  // standard base64, not bcrypt's
  ExpectRefused(in_salt, "character 11 (in the salt) is not one of bcrypt's base64");
  std::string in_digest(kGood);
  in_digest[40] = '=';
  ExpectRefused(in_digest, "character 41 (in the digest) is not one of bcrypt's base64");
}

// libxcrypt ignores these bits in a salt but writes them as zero, so its
// crypt() never gives back such a hash: a crypt()-and-compare check would
// refuse every password. Refusing the hash says so up front.
TEST(BcryptTest, RefusesBitsPastTheSaltsSixteenBytes) {
  std::string hash(kGood);
  ASSERT_EQ(hash[28], 'O');  // 16 in bcrypt's base64: low 4 bits zero
  hash[28] = 'P';
  ExpectRefused(hash, "last character of the salt (character 29) sets bits past the 16 bytes");
}

TEST(BcryptTest, RefusesBitsPastTheDigestsTwentyThreeBytes) {
  std::string hash(kGood);
  ASSERT_EQ(hash[59], '.');  // 0: low 2 bits zero
  hash[59] = '/';
  ExpectRefused(hash, "last character of the digest (character 60) sets bits past the 23 bytes");
}

#if defined(TORCHMON_HAVE_LIBCRYPT)

// libxcrypt's hash of `password` under a fresh salt from `rng`.
std::string LibxcryptHash(const std::string& password, const char* prefix, int cost,
                          std::mt19937& rng) {
  std::array<char, 16> random_bytes;
  for (char& c : random_bytes) c = static_cast<char>(rng());
  std::array<char, CRYPT_GENSALT_OUTPUT_SIZE> setting{};
  if (crypt_gensalt_rn(prefix, static_cast<unsigned long>(cost), random_bytes.data(),
                       static_cast<int>(random_bytes.size()), setting.data(),
                       static_cast<int>(setting.size())) == nullptr) {
    ADD_FAILURE() << "crypt_gensalt_rn(" << prefix << ", " << cost << ") failed";
    return "";
  }
  auto data = std::make_unique<crypt_data>();
  const char* hash =
      crypt_rn(password.c_str(), setting.data(), data.get(), static_cast<int>(sizeof(crypt_data)));
  if (hash == nullptr || hash[0] == '*') {
    ADD_FAILURE() << "crypt_rn failed for setting " << setting.data();
    return "";
  }
  return hash;
}

// A password crypt(3) can take (no NUL), of `length` random bytes, about
// half of them >= 0x80.
std::string RandomPassword(size_t length, std::mt19937& rng) {
  std::string password(length, '\0');
  for (char& c : password) c = static_cast<char>(1 + rng() % 255);
  return password;
}

TEST(BcryptTest, AgreesWithLibxcryptOnRandomPasswords) {
  std::mt19937 rng(20240601);
  for (int cost : {4, 5}) {
    std::vector<size_t> lengths = {0, 1, 71, 72, 73};
    while (lengths.size() < 50) lengths.push_back(rng() % 101);
    for (size_t length : lengths) {
      const std::string password = RandomPassword(length, rng);
      const std::string hash = LibxcryptHash(password, "$2b$", cost, rng);
      ASSERT_FALSE(hash.empty());
      ExpectAgrees(password, hash);
    }
  }
}

TEST(BcryptTest, AgreesWithLibxcryptOnTwoAAndTwoY) {
  std::mt19937 rng(7);
  for (const char* prefix : {"$2a$", "$2y$"}) {
    for (size_t length : {0, 5, 30, 72, 73}) {
      const std::string password = RandomPassword(length, rng);
      const std::string hash = LibxcryptHash(password, prefix, 4, rng);
      ASSERT_FALSE(hash.empty());
      ASSERT_EQ(hash.substr(0, 4), prefix);
      ExpectAgrees(password, hash);
    }
  }
}

// OpenBSD's first $2a$ wrapped the length at 256; libxcrypt (like Go) does
// not, and cuts every minor's password at 72 bytes.
TEST(BcryptTest, AgreesWithLibxcryptOnPasswordsOfTwoHundredFiftyFiveBytesOrMore) {
  std::mt19937 rng(11);
  for (const char* prefix : {"$2a$", "$2b$", "$2y$"}) {
    for (size_t length : {255, 256, 300}) {
      const std::string password = RandomPassword(length, rng);
      const std::string hash = LibxcryptHash(password, prefix, 4, rng);
      ASSERT_FALSE(hash.empty());
      ExpectAgrees(password, hash);
    }
  }
}

#else

TEST(BcryptTest, AgreesWithLibxcryptOnRandomPasswords) {
  GTEST_SKIP() << "built without libxcrypt (no libcrypt with crypt_gensalt_rn found): "
                  "only the fixed vectors check the algorithm";
}

#endif

}  // namespace
}  // namespace torchmon::server

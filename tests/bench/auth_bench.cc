// The cost of basic auth on /metrics (docs/performance.md, "Authentication"):
// one bcrypt check at the costs htpasswd and the exporter toolkit's docs
// use, beside libxcrypt's crypt_rn on the same hash where this build links
// it (the same work, measured in the same run); what a scraper pays after
// its first request (the remembered digest); and the one-off pi table.
#include <string>

#include "absl/strings/escaping.h"
#include "benchmark/benchmark.h"
#include "server/auth/auth.h"
#include "server/auth/bcrypt.h"

#if defined(TORCHMON_HAVE_LIBCRYPT)
#include <crypt.h>
#endif

namespace torchmon::server {
namespace {

constexpr char kSalt[] = "0123456789abcdef";
constexpr char kPassword[] = "correct horse battery staple";

BcryptHash HashAt(int cost) {
  return *ParseBcryptHash(BcryptHashOf(kPassword, kSalt, static_cast<int>(cost)));
}

void BM_BcryptMatches(benchmark::State& state) {
  const BcryptHash hash = HashAt(static_cast<int>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(BcryptMatches(hash, kPassword));
}
BENCHMARK(BM_BcryptMatches)->Arg(4)->Arg(10)->Unit(benchmark::kMillisecond);

#if defined(TORCHMON_HAVE_LIBCRYPT)
void BM_LibxcryptCryptRn(benchmark::State& state) {
  const std::string hash = BcryptHashOf(kPassword, kSalt, static_cast<int>(state.range(0)));
  crypt_data data{};
  for (auto _ : state) {
    const char* out = crypt_rn(kPassword, hash.c_str(), &data, sizeof(data));
    if (out == nullptr || hash != out) state.SkipWithError("libxcrypt disagrees");
  }
}
BENCHMARK(BM_LibxcryptCryptRn)->Arg(4)->Arg(10)->Unit(benchmark::kMillisecond);
#endif

// A scrape's check once its credentials were accepted: decode, SHA-256,
// a set look-up; bcrypt is not run again.
void BM_BasicAuthRememberedHashedUser(benchmark::State& state) {
  BasicAuthChecker checker(BasicAuthChecker::HashedCredentials{{"prometheus", HashAt(10)}});
  const std::string authorization =
      "Basic " + absl::Base64Escape(std::string("prometheus:") + kPassword);
  if (!checker.Accepts(authorization)) state.SkipWithError("not accepted");
  for (auto _ : state) benchmark::DoNotOptimize(checker.Accepts(authorization));
}
BENCHMARK(BM_BasicAuthRememberedHashedUser);

void BM_BcryptPiTable(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(bcrypt_internal::ComputePiFractionWords());
}
BENCHMARK(BM_BcryptPiTable)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace torchmon::server

// Fuzzes the reader of --web-config-file (server/auth/web_config.h), the
// exporter toolkit's YAML, which a user writes by hand. The input is the
// file. Checked, beside memory safety:
//
//   - what it refuses it refuses naming the file and the line
//     ("web.yml line N: ..."), N a line of the input;
//   - a UTF-8 byte order mark in front, or CRLF line ends, change nothing:
//     the same result, or a refusal again;
//   - a password hash never appears in a message (it names the user).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/strings/string_view.h"
#include "server/auth/web_config.h"
#include "tests/fuzz/fuzz_support.h"

namespace torchmon::fuzz {
namespace {

using server::WebConfig;

std::string Show(const absl::StatusOr<WebConfig>& c) {
  if (!c.ok()) return std::string(c.status().message());
  std::string out = "ok:";
  if (c->tls.has_value()) {
    absl::StrAppend(&out, " cert=", c->tls->cert_file, " key=", c->tls->key_file,
                    " ca=", c->tls->client_ca_file, " auth=", static_cast<int>(c->tls->client_auth),
                    " min=", static_cast<int>(c->tls->min_version),
                    " max=", static_cast<int>(c->tls->max_version));
  }
  for (const auto& [user, hash] : c->basic_auth_users) {
    absl::StrAppend(&out, " user=", user, "/", std::string(1, hash.minor), hash.cost);
  }
  return out;
}

absl::StatusOr<WebConfig> Parse(absl::string_view text) {
  return server::ParseWebConfig(text, "web.yml", "/etc/torchmon");
}

}  // namespace
}  // namespace torchmon::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace torchmon::fuzz;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<WebConfig> config = Parse(text);
  if (!config.ok()) {
    absl::string_view message = config.status().message();
    FUZZ_CHECK(absl::ConsumePrefix(&message, "web.yml line "), config.status().message());
    const size_t colon = message.find(':');
    int line = 0;
    FUZZ_CHECK(colon != absl::string_view::npos && absl::SimpleAtoi(message.substr(0, colon), &line),
               config.status().message());
    const int lines = static_cast<int>(std::count(text.begin(), text.end(), '\n')) + 1;
    FUZZ_CHECK(line >= 1 && line <= lines, config.status().message(), " of ", lines, " lines");
    // A hash is 60 characters from "$2"; none is quoted back.
    for (size_t at = text.find("$2"); at != absl::string_view::npos; at = text.find("$2", at + 1)) {
      if (text.size() - at >= 60) {
        FUZZ_CHECK(!absl::StrContains(config.status().message(), text.substr(at, 60)),
                   config.status().message());
      }
    }
  }
  const std::string shown = Show(config);
  // A byte order mark changes nothing (but for a text that had one already).
  if (!absl::StartsWith(text, "\xEF\xBB\xBF")) {
    const std::string with_bom = absl::StrCat("\xEF\xBB\xBF", text);
    FUZZ_CHECK(Show(Parse(with_bom)) == shown, Show(Parse(with_bom)), " vs ", shown);
  }
  // Nor do CRLF line ends, for a text with no CR of its own.
  if (text.find('\r') == absl::string_view::npos) {
    const std::string crlf = absl::StrReplaceAll(text, {{"\n", "\r\n"}});
    FUZZ_CHECK(Show(Parse(crlf)) == shown, Show(Parse(crlf)), " vs ", shown);
  }
  return 0;
}

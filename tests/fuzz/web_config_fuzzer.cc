// Fuzzes the reader of --web-config-file (server/auth/web_config.h), the
// exporter toolkit's YAML, which a user writes by hand. The input is the
// file. Checked, beside memory safety:
//
//   - what it refuses it refuses naming the file and the line
//     ("web.yml line N: ..."), N a line of the input;
//   - a UTF-8 byte order mark in front, or CRLF line ends, change nothing:
//     the same result, or a refusal again;
//   - a basic_auth_users entry's hash never appears in a message (it
//     names the user), but where the message's own wording holds the
//     same characters.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
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
    // What a basic_auth_users entry holds (its password hash) is never
    // quoted back by a message about it ("basic_auth_users.USER: ..."),
    // which names the user instead. (Messages that quote a key or a user
    // name quote it whole, whatever it holds.)
    bool in_users = false;
    for (absl::string_view row : absl::StrSplit(text, '\n')) {
      absl::ConsumeSuffix(&row, "\r");
      const bool top = !row.empty() && row[0] != ' ';
      if (top) in_users = absl::StartsWith(row, "basic_auth_users:");
      if (top || !in_users) continue;
      // A quoted user name may hold a ':' of its own: only plain names are
      // split here (the message names the user, whatever it holds).
      const absl::string_view name = absl::StripLeadingAsciiWhitespace(row);
      if (!name.empty() && (name[0] == '\'' || name[0] == '"')) continue;
      // The key ends, as YAML has it, at the first ':' followed by a blank.
      size_t colon = absl::string_view::npos;
      for (size_t i = 0; i < row.size(); ++i) {
        if (row[i] == ':' && (i + 1 == row.size() || row[i + 1] == ' ' || row[i + 1] == '\t')) {
          colon = i;
          break;
        }
      }
      if (colon == absl::string_view::npos) continue;
      absl::string_view value = absl::StripAsciiWhitespace(row.substr(colon + 1));
      value = absl::StripAsciiWhitespace(value.substr(0, value.find(" #")));
      if (value.size() >= 2 && (value[0] == '\'' || value[0] == '"') &&
          value.back() == value[0]) {
        value = value.substr(1, value.size() - 2);
      }
      // (A text that holds the same characters elsewhere, in a key the
      // message rightly names, proves nothing either way.)
      if (value.size() >= 20 && text.find(value) == text.rfind(value) &&
          absl::StrContains(config.status().message(), "basic_auth_users.") &&
          absl::StrContains(config.status().message(), value)) {
        // Nor does a value that is a piece of the message's own wording
        // ("$2y$\" (make one with `ht"): the fuzzer finds those by
        // watching the search above. The same file with the value
        // replaced, at every character, by another one tells: if its
        // message holds the value too, the wording holds it; if not, the
        // message copied the value.
        std::string other(text);
        const size_t at = text.find(value);
        for (size_t i = 0; i < value.size(); ++i) other[at + i] = value[i] == 'Q' ? 'R' : 'Q';
        const absl::StatusOr<WebConfig> without = Parse(other);
        FUZZ_CHECK(!without.ok() && absl::StrContains(without.status().message(), value),
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

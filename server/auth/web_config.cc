#include "server/auth/web_config.h"

#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace torchmon::server {
namespace {

// A node of the YAML subset: a scalar, a mapping, or null (a key with
// nothing after it).
struct Node {
  enum class Kind { kNull, kScalar, kMap };
  Kind kind = Kind::kNull;
  int line = 0;
  std::string scalar;
  std::vector<std::pair<std::string, std::unique_ptr<Node>>> map;
};

struct Line {
  int number;
  size_t indent;
  absl::string_view text;  // without indentation and comment
};

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

// The position of a comment ('#' at the start or after a blank, outside
// quotes) in `text`, or its size. A quote opens at the start, after a
// blank or after a ':'; inside single quotes '' is a quote, inside double
// quotes a backslash escapes the next character (YAML's rules), so neither
// ends the quoted text.
size_t CommentStart(absl::string_view text) {
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quote == '\'') {
      if (c == '\'') {
        if (i + 1 < text.size() && text[i + 1] == '\'') {
          ++i;  // '' inside single quotes
        } else {
          quote = 0;
        }
      }
      continue;
    }
    if (quote == '"') {
      if (c == '\\') {
        ++i;  // an escaped character, a quote included
      } else if (c == '"') {
        quote = 0;
      }
      continue;
    }
    if ((c == '"' || c == '\'') && (i == 0 || IsBlank(text[i - 1]) || text[i - 1] == ':')) {
      quote = c;
    } else if (c == '#' && (i == 0 || IsBlank(text[i - 1]))) {
      return i;
    }
  }
  return text.size();
}

// Where the ':' that ends a plain key lies: the first followed by a blank
// or ending the line; npos if none.
size_t KeyEnd(absl::string_view text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == ':' && (i + 1 == text.size() || IsBlank(text[i + 1]))) return i;
  }
  return absl::string_view::npos;
}

class Parser {
 public:
  explicit Parser(absl::string_view origin) : origin_(origin) {}

  absl::Status Error(int line, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(origin_, " line ", line, ": ", what));
  }

  absl::StatusOr<std::vector<Line>> Lines(absl::string_view text) const {
    std::vector<Line> lines;
    int number = 0;
    // A UTF-8 byte order mark, which some editors write first: not text.
    absl::ConsumePrefix(&text, "\xEF\xBB\xBF");
    for (absl::string_view raw : absl::StrSplit(text, '\n')) {
      ++number;
      absl::ConsumeSuffix(&raw, "\r");
      size_t indent = 0;
      while (indent < raw.size() && raw[indent] == ' ') ++indent;
      absl::string_view rest = raw.substr(indent);
      rest = absl::StripTrailingAsciiWhitespace(rest.substr(0, CommentStart(rest)));
      if (rest.empty()) continue;
      if (rest[0] == '\t') return Error(number, "a tab in the indentation; YAML indents with spaces");
      if (lines.empty() && indent == 0 && (rest == "---")) continue;
      if (indent == 0 && rest == "...") break;
      if (indent == 0 && rest == "---") {
        return Error(number, "a second YAML document; the file holds one");
      }
      lines.push_back({number, indent, rest});
    }
    return lines;
  }

  // Parses the mapping whose keys are at `indent`, from lines_[*next].
  absl::StatusOr<std::unique_ptr<Node>> Map(const std::vector<Line>& lines, size_t* next,
                                            size_t indent) const {
    auto node = std::make_unique<Node>();
    node->kind = Node::Kind::kMap;
    node->line = lines[*next].number;
    while (*next < lines.size() && lines[*next].indent >= indent) {
      const Line& line = lines[*next];
      if (line.indent != indent) return Error(line.number, "unexpected indentation");
      if (absl::StartsWith(line.text, "- ") || line.text == "-") {
        return Error(line.number, "a YAML sequence where a mapping was expected");
      }
      absl::StatusOr<std::pair<std::string, absl::string_view>> entry = KeyValue(line);
      if (!entry.ok()) return entry.status();
      auto& [key, value] = *entry;
      for (const auto& [seen, _] : node->map) {
        if (seen == key) return Error(line.number, absl::StrCat("\"", key, "\" given twice"));
      }
      ++*next;
      std::unique_ptr<Node> child;
      if (!value.empty()) {
        absl::StatusOr<std::unique_ptr<Node>> scalar = Scalar(line.number, key, value);
        if (!scalar.ok()) return scalar.status();
        child = *std::move(scalar);
      } else if (*next < lines.size() && lines[*next].indent > indent) {
        absl::StatusOr<std::unique_ptr<Node>> nested = Map(lines, next, lines[*next].indent);
        if (!nested.ok()) return nested.status();
        child = *std::move(nested);
        child->line = line.number;  // errors about the mapping name its key
      } else {
        child = std::make_unique<Node>();
        child->line = line.number;
      }
      node->map.emplace_back(std::move(key), std::move(child));
    }
    return node;
  }

 private:
  absl::StatusOr<std::pair<std::string, absl::string_view>> KeyValue(const Line& line) const {
    absl::string_view text = line.text;
    std::string key;
    size_t end;
    if (text[0] == '"' || text[0] == '\'') {
      absl::StatusOr<std::pair<std::string, size_t>> quoted = Quoted(line.number, text);
      if (!quoted.ok()) return quoted.status();
      key = quoted->first;
      end = quoted->second;
      if (end >= text.size() || text[end] != ':') {
        return Error(line.number, "expected \"key: value\"");
      }
    } else {
      end = KeyEnd(text);
      if (end == absl::string_view::npos || end == 0) {
        return Error(line.number, "expected \"key: value\" or \"key:\"");
      }
      key = std::string(absl::StripTrailingAsciiWhitespace(text.substr(0, end)));
    }
    return std::make_pair(std::move(key), absl::StripAsciiWhitespace(text.substr(end + 1)));
  }

  absl::StatusOr<std::unique_ptr<Node>> Scalar(int number, absl::string_view key,
                                               absl::string_view value) const {
    auto node = std::make_unique<Node>();
    node->line = number;
    if (value == "{}") {
      node->kind = Node::Kind::kMap;
      return node;
    }
    if (value == "~" || value == "null") return node;
    if (value[0] == '"' || value[0] == '\'') {
      absl::StatusOr<std::pair<std::string, size_t>> quoted = Quoted(number, value);
      if (!quoted.ok()) return quoted.status();
      if (quoted->second != value.size()) {
        return Error(number, absl::StrCat("text after the quoted value of \"", key, "\""));
      }
      node->kind = Node::Kind::kScalar;
      node->scalar = quoted->first;
      return node;
    }
    if (absl::string_view("[{|>&*!%@`").find(value[0]) != absl::string_view::npos) {
      return Error(number, absl::StrCat("the value of \"", key,
                                        "\" uses YAML torchmond does not read (flow "
                                        "collections, block scalars, anchors, tags); write "
                                        "it as a plain or quoted scalar"));
    }
    node->kind = Node::Kind::kScalar;
    node->scalar = std::string(value);
    return node;
  }

  // A quoted scalar at the start of `text`: its value and where it ends.
  absl::StatusOr<std::pair<std::string, size_t>> Quoted(int number, absl::string_view text) const {
    const char quote = text[0];
    std::string out;
    for (size_t i = 1; i < text.size(); ++i) {
      const char c = text[i];
      if (quote == '\'' && c == '\'') {
        if (i + 1 < text.size() && text[i + 1] == '\'') {
          out.push_back('\'');
          ++i;
          continue;
        }
        return std::make_pair(std::move(out), i + 1);
      }
      if (quote == '"' && c == '"') return std::make_pair(std::move(out), i + 1);
      if (quote == '"' && c == '\\') {
        if (++i == text.size()) break;
        switch (text[i]) {
          case '\\': out.push_back('\\'); break;
          case '"': out.push_back('"'); break;
          case '/': out.push_back('/'); break;
          case 'n': out.push_back('\n'); break;
          case 't': out.push_back('\t'); break;
          default:
            return Error(number, absl::StrCat("the escape \\", text.substr(i, 1),
                                              " is not one torchmond reads (\\\\ \\\" \\/ \\n \\t)"));
        }
        continue;
      }
      out.push_back(c);
    }
    return Error(number, "a quoted value without its closing quote");
  }

  const absl::string_view origin_;
};

std::string Resolve(absl::string_view base_dir, absl::string_view path) {
  if (path.empty() || path[0] == '/' || base_dir.empty()) return std::string(path);
  return absl::StrCat(absl::StripSuffix(base_dir, "/"), "/", path);
}

absl::StatusOr<TlsVersion> VersionOf(absl::string_view name) {
  if (name == "TLS10") return TlsVersion::kTls10;
  if (name == "TLS11") return TlsVersion::kTls11;
  if (name == "TLS12") return TlsVersion::kTls12;
  if (name == "TLS13") return TlsVersion::kTls13;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown TLS version \"", name, "\" (TLS10, TLS11, TLS12 or TLS13)"));
}

absl::StatusOr<ClientAuthType> ClientAuthOf(absl::string_view name) {
  if (name.empty() || name == "NoClientCert") return ClientAuthType::kNoClientCert;
  if (name == "RequestClientCert") return ClientAuthType::kRequestClientCert;
  // "RequireClientCert": the toolkit's older name, which it still takes.
  if (name == "RequireAnyClientCert" || name == "RequireClientCert") {
    return ClientAuthType::kRequireAnyClientCert;
  }
  if (name == "VerifyClientCertIfGiven") return ClientAuthType::kVerifyClientCertIfGiven;
  if (name == "RequireAndVerifyClientCert") return ClientAuthType::kRequireAndVerifyClientCert;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown client_auth_type \"", name,
      "\" (NoClientCert, RequestClientCert, RequireAnyClientCert, VerifyClientCertIfGiven or "
      "RequireAndVerifyClientCert)"));
}

// Keys of the toolkit's format torchmond does not implement: refused by
// name, never ignored.
constexpr absl::string_view kUnsupportedTlsKeys[] = {
    "cert", "key", "client_ca", "client_allowed_sans", "cipher_suites", "curve_preferences",
    "prefer_server_cipher_suites"};

absl::StatusOr<WebTlsConfig> TlsOf(const Parser& parser, const Node& node,
                                   absl::string_view base_dir) {
  WebTlsConfig tls;
  for (const auto& [key, value] : node.map) {
    for (absl::string_view unsupported : kUnsupportedTlsKeys) {
      if (key == unsupported) {
        return parser.Error(value->line, absl::StrCat("tls_server_config.", key,
                                                      " is not supported by torchmond"));
      }
    }
    if (value->kind == Node::Kind::kMap) {
      return parser.Error(value->line, absl::StrCat("tls_server_config.", key, " is a mapping; "
                                                    "a value was expected"));
    }
    const std::string& text = value->scalar;
    absl::Status bad;
    if (key == "cert_file") {
      tls.cert_file = Resolve(base_dir, text);
    } else if (key == "key_file") {
      tls.key_file = Resolve(base_dir, text);
    } else if (key == "client_ca_file") {
      tls.client_ca_file = Resolve(base_dir, text);
    } else if (key == "client_auth_type") {
      absl::StatusOr<ClientAuthType> type = ClientAuthOf(text);
      if (!type.ok()) bad = type.status();
      else tls.client_auth = *type;
    } else if (key == "min_version" || key == "max_version") {
      absl::StatusOr<TlsVersion> version = VersionOf(text);
      if (!version.ok()) bad = version.status();
      else (key == "min_version" ? tls.min_version : tls.max_version) = *version;
    } else {
      return parser.Error(value->line, absl::StrCat("unknown key tls_server_config.", key));
    }
    if (!bad.ok()) return parser.Error(value->line, bad.message());
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return parser.Error(node.line, "tls_server_config needs both cert_file and key_file");
  }
  if (tls.min_version > tls.max_version) {
    return parser.Error(node.line, "tls_server_config.min_version is above max_version");
  }
  const bool verifies = tls.client_auth == ClientAuthType::kVerifyClientCertIfGiven ||
                        tls.client_auth == ClientAuthType::kRequireAndVerifyClientCert;
  if (!tls.client_ca_file.empty() && tls.client_auth == ClientAuthType::kNoClientCert) {
    return parser.Error(node.line,
                        "tls_server_config.client_ca_file is given but client_auth_type is "
                        "NoClientCert: set client_auth_type (RequireAndVerifyClientCert "
                        "to require certificates it signed)");
  }
  if (tls.client_ca_file.empty() && verifies) {
    return parser.Error(node.line,
                        "tls_server_config.client_auth_type verifies client certificates but "
                        "no client_ca_file says against which CA");
  }
  return tls;
}

}  // namespace

absl::StatusOr<WebConfig> ParseWebConfig(absl::string_view text, absl::string_view origin,
                                         absl::string_view base_dir) {
  Parser parser(origin);
  absl::StatusOr<std::vector<Line>> lines = parser.Lines(text);
  if (!lines.ok()) return lines.status();
  WebConfig config;
  if (lines->empty()) return config;
  if (lines->front().indent != 0) return parser.Error(lines->front().number, "indented first key");
  size_t next = 0;
  absl::StatusOr<std::unique_ptr<Node>> root = parser.Map(*lines, &next, 0);
  if (!root.ok()) return root.status();
  for (const auto& [key, value] : (*root)->map) {
    const bool empty = value->kind == Node::Kind::kNull ||
                       (value->kind == Node::Kind::kMap && value->map.empty());
    if (value->kind == Node::Kind::kScalar) {
      return parser.Error(value->line, absl::StrCat(key, " is a value; a mapping was expected"));
    }
    if (key == "tls_server_config") {
      if (empty) continue;
      absl::StatusOr<WebTlsConfig> tls = TlsOf(parser, *value, base_dir);
      if (!tls.ok()) return tls.status();
      config.tls = *std::move(tls);
    } else if (key == "basic_auth_users") {
      for (const auto& [user, hash] : value->map) {
        if (user.find(':') != std::string::npos) {
          return parser.Error(hash->line, absl::StrCat("basic_auth_users: the user name \"", user,
                                                       "\" holds a ':', which basic auth cannot carry"));
        }
        if (hash->kind != Node::Kind::kScalar) {
          return parser.Error(hash->line,
                              absl::StrCat("basic_auth_users.", user, " needs a bcrypt hash"));
        }
        absl::StatusOr<BcryptHash> parsed = ParseBcryptHash(hash->scalar);
        if (!parsed.ok()) {
          return parser.Error(hash->line,
                              absl::StrCat("basic_auth_users.", user, ": ", parsed.status().message(),
                                           " (make one with `htpasswd -nBC 10 ", user, "`)"));
        }
        if (parsed->cost > kMaxServedBcryptCost) {
          return parser.Error(
              hash->line,
              absl::StrCat("basic_auth_users.", user, ": bcrypt cost ", parsed->cost, " is over ",
                           kMaxServedBcryptCost,
                           ", the most torchmond checks (each check takes 2^cost key "
                           "expansions on one of the metrics port's workers: about 1 s at 14, "
                           "twice that for each step up); hash it again with `htpasswd -nBC 12 ",
                           user, "`"));
        }
        config.basic_auth_users.emplace_back(user, *std::move(parsed));
      }
    } else if (key == "http_server_config") {
      if (!empty) {
        return parser.Error(value->line, "http_server_config is not supported by torchmond");
      }
    } else {
      return parser.Error(value->line,
                          absl::StrCat("unknown key \"", key,
                                       "\" (tls_server_config, basic_auth_users)"));
    }
  }
  return config;
}

}  // namespace torchmon::server

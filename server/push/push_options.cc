#include "server/push/push_options.h"

#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::server {

const char* PushProtocolName(PushProtocol protocol) {
  return protocol == PushProtocol::kRemoteWrite ? "remote_write" : "otlp";
}

absl::StatusOr<HttpUrl> ParseHttpUrl(absl::string_view text) {
  HttpUrl url;
  absl::string_view rest = text;
  if (absl::ConsumePrefix(&rest, "https://")) {
    url.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not an http:// or https:// URL"));
  }
  const size_t slash = rest.find('/');
  absl::string_view authority = rest.substr(0, slash);
  url.path = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (authority.find('@') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "\"", text,
        "\" has credentials in it; give them as bearer_token_file= or basic_auth_username= "
        "with basic_auth_password_file= after the URL"));
  }
  absl::string_view port_text;
  if (absl::ConsumePrefix(&authority, "[")) {
    const size_t close = authority.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" has an unclosed [ in its host"));
    }
    url.host = std::string(authority.substr(0, close));
    absl::string_view after = authority.substr(close + 1);
    if (!after.empty() && !absl::ConsumePrefix(&after, ":")) {
      return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" has text after its host"));
    }
    port_text = after;
  } else {
    const size_t colon = authority.rfind(':');
    url.host = std::string(authority.substr(0, colon));
    if (colon != absl::string_view::npos) port_text = authority.substr(colon + 1);
    if (url.host.find(':') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"", text, "\": write an IPv6 host in brackets, [::1]:9090"));
    }
  }
  if (url.host.empty()) return absl::InvalidArgumentError(absl::StrCat("\"", text, "\" has no host"));
  url.port = url.tls ? 443 : 80;
  if (!port_text.empty() &&
      (!absl::SimpleAtoi(port_text, &url.port) || url.port < 1 || url.port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" has a port that is not 1 to 65535"));
  }
  const bool v6 = url.host.find(':') != std::string::npos;
  url.text = absl::StrCat(url.tls ? "https://" : "http://", v6 ? "[" : "", url.host, v6 ? "]" : "",
                          ":", url.port, url.path);
  return url;
}

absl::StatusOr<PushEndpoint> ParsePushEndpoint(PushProtocol protocol, absl::string_view flag,
                                               absl::string_view text) {
  std::vector<absl::string_view> words = absl::StrSplit(text, ' ', absl::SkipWhitespace());
  if (words.empty()) return absl::InvalidArgumentError(absl::StrCat(flag, " is empty"));
  PushEndpoint endpoint;
  endpoint.protocol = protocol;
  auto url = ParseHttpUrl(words[0]);
  if (!url.ok()) return absl::InvalidArgumentError(absl::StrCat(flag, " ", url.status().message()));
  endpoint.url = *std::move(url);
  if (protocol == PushProtocol::kOtlp && endpoint.url.path == "/") {
    endpoint.url.path = "/v1/metrics";
    endpoint.url.text += "v1/metrics";
  }
  for (size_t i = 1; i < words.size(); ++i) {
    const size_t eq = words[i].find('=');
    const absl::string_view key = words[i].substr(0, eq);
    const std::string value =
        eq == absl::string_view::npos ? "" : std::string(words[i].substr(eq + 1));
    if (eq == absl::string_view::npos || value.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " ", words[0], ": \"", words[i], "\" is not KEY=VALUE"));
    }
    std::string* field = nullptr;
    if (key == "bearer_token_file") field = &endpoint.bearer_token_file;
    if (key == "basic_auth_username") field = &endpoint.basic_auth_username;
    if (key == "basic_auth_password_file") field = &endpoint.basic_auth_password_file;
    if (key == "ca_file") field = &endpoint.ca_file;
    if (key == "cert_file") field = &endpoint.cert_file;
    if (key == "key_file") field = &endpoint.key_file;
    if (key == "server_name") field = &endpoint.server_name;
    if (key == "timeout") {
      auto ms = protocol::ParseDurationMs(value);
      if (!ms.ok() || *ms <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, " ", words[0], ": timeout \"", value, "\" is not a duration"));
      }
      endpoint.timeout_ms = *ms;
      continue;
    }
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " ", words[0], ": unknown option \"", key,
          "\" (bearer_token_file, basic_auth_username, basic_auth_password_file, ca_file, "
          "cert_file, key_file, server_name, timeout)"));
    }
    *field = value;
  }
  const PushEndpoint& e = endpoint;
  auto refuse = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " ", words[0], ": ", why));
  };
  if (!e.bearer_token_file.empty() && !e.basic_auth_username.empty()) {
    return refuse("give bearer_token_file or basic_auth_username, not both");
  }
  if (e.basic_auth_username.empty() != e.basic_auth_password_file.empty()) {
    return refuse("basic_auth_username and basic_auth_password_file go together");
  }
  if (e.cert_file.empty() != e.key_file.empty()) {
    return refuse("cert_file and key_file go together");
  }
  if (!e.url.tls && (!e.ca_file.empty() || !e.cert_file.empty() || !e.server_name.empty())) {
    return refuse("ca_file, cert_file, key_file and server_name need an https:// URL");
  }
  return endpoint;
}

}  // namespace torchmon::server

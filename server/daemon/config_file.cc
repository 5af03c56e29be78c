#include "server/daemon/config_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace torchmon::server {
namespace {

// Flags that may be given more than once; every other name may appear once.
bool IsRepeatable(absl::string_view name) {
  return name == "listen" || name == "remote-write-url" || name == "otlp-endpoint";
}

bool IsNameChar(char c) { return absl::ascii_isalnum(c) || c == '-'; }

// The value after "=", with surrounding blanks and any " #" comment removed
// and quotes undone. `error` is set on a malformed value.
std::string ParseValue(absl::string_view text, std::string& error) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty() || text[0] != '"') {
    // Unquoted: a comment starts at a '#' that follows a blank.
    for (size_t i = 1; i < text.size(); ++i) {
      if (text[i] == '#' && absl::ascii_isspace(static_cast<unsigned char>(text[i - 1]))) {
        text = absl::StripTrailingAsciiWhitespace(text.substr(0, i));
        break;
      }
    }
    return std::string(text);
  }
  std::string value;
  size_t i = 1;
  for (; i < text.size() && text[i] != '"'; ++i) {
    if (text[i] == '\\') {
      if (i + 1 == text.size() || (text[i + 1] != '"' && text[i + 1] != '\\')) {
        error = "in a quoted value, a backslash may only escape \" or \\";
        return "";
      }
      ++i;
    }
    value.push_back(text[i]);
  }
  if (i == text.size()) {
    error = "the quoted value has no closing \"";
    return "";
  }
  absl::string_view rest = absl::StripAsciiWhitespace(text.substr(i + 1));
  if (!rest.empty() && rest[0] != '#') {
    error = absl::StrCat("unexpected \"", rest, "\" after the quoted value");
    return "";
  }
  return value;
}

}  // namespace

absl::StatusOr<std::vector<ConfigSetting>> ParseConfigText(absl::string_view text,
                                                           const std::string& file) {
  std::vector<ConfigSetting> settings;
  absl::flat_hash_map<std::string, int> first_line;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    const std::string origin = absl::StrCat(file, ":", line_number);
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const size_t eq = line.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": expected NAME = VALUE (NAME is a torchmond flag without its --), got \"",
          line, "\""));
    }
    std::string name(absl::StripAsciiWhitespace(line.substr(0, eq)));
    if (absl::StartsWith(name, "--")) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ": write \"", name.substr(2), " = ...\", without the leading --"));
    }
    if (name.empty() || !std::all_of(name.begin(), name.end(), IsNameChar)) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": \"", name, "\" is not a setting name (letters, digits, -)"));
    }
    std::string error;
    std::string value = ParseValue(line.substr(eq + 1), error);
    if (!error.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, ": ", name, ": ", error));
    if (!IsRepeatable(name)) {
      auto [it, inserted] = first_line.try_emplace(name, line_number);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ": ", name, " is already set on line ", it->second,
            " (only listen, remote-write-url and otlp-endpoint may be repeated)"));
      }
    }
    settings.push_back({std::move(name), std::move(value), origin});
  }
  return settings;
}

absl::StatusOr<std::vector<ConfigSetting>> ReadConfigFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the configuration file \"", path, "\" is a directory"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    const std::string message =
        absl::StrCat("cannot read the configuration file \"", path, "\": ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(message);
    if (err == EACCES) return absl::PermissionDeniedError(message);
    return absl::InvalidArgumentError(message);
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read the configuration file \"", path, "\""));
  }
  return ParseConfigText(text.str(), path);
}

}  // namespace torchmon::server

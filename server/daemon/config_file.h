// torchmond's configuration file: every flag, one per line.
//
//   # comment
//   listen = unix:///run/torchmon/torchmond.sock
//   listen = :7070                 # repeatable flags repeat the line
//   grace = 2s
//   auth-token-file = "/etc/torchmon/token"
//
// A name is a long flag without its leading "--"; the value is what the flag
// would take. A value may be double-quoted (\" and \\ escape inside quotes);
// an unquoted value ends at a " #" comment. Names other than repeatable
// flags may appear once. The values are checked by the flag parser
// (ParseDaemonOptions), which names the file and line of a bad one.
#ifndef TORCHMON_SERVER_DAEMON_CONFIG_FILE_H_
#define TORCHMON_SERVER_DAEMON_CONFIG_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace torchmon::server {

struct ConfigSetting {
  std::string name;    // "grace" (no dashes)
  std::string value;   // unquoted
  std::string origin;  // "FILE:LINE", for error messages
};

// Parses the text of a configuration file; `file` names it in errors
// ("FILE:LINE: ..."). Checks only the syntax and repeated names; what a
// name and its value mean is the flag parser's business.
absl::StatusOr<std::vector<ConfigSetting>> ParseConfigText(absl::string_view text,
                                                           const std::string& file);

// Reads and parses `path`. NotFound / PermissionDenied naming the path if it
// cannot be read.
absl::StatusOr<std::vector<ConfigSetting>> ReadConfigFile(const std::string& path);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_CONFIG_FILE_H_

// torchmonctl's usage text, written from its flag and command tables
// (command_table.h). Pure; thread-safe.
#ifndef TORCHMON_CLI_USAGE_TEXT_H_
#define TORCHMON_CLI_USAGE_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"

namespace torchmon::cli {

// The usage text of `command` ("" for the tool), ending in a newline, every
// line within 80 columns. Unknown commands get the tool's usage.
std::string UsageText(absl::string_view command);

}  // namespace torchmon::cli

#endif  // TORCHMON_CLI_USAGE_TEXT_H_

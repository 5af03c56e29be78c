#include "cli/usage_text.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/command_table.h"

namespace torchmon::cli {
namespace {

constexpr size_t kUsageWidth = 80;
// Where a flag's help starts: "  --stat GLOB         stat name, ...".
constexpr size_t kHelpColumn = 22;

// `first` followed by `items`, wrapped at kUsageWidth; continuation lines
// start under the first item.
std::string WrapSynopsis(absl::string_view first, const std::vector<std::string>& items,
                         size_t indent) {
  std::string out(first);
  size_t line_start = 0;
  bool line_empty = absl::EndsWith(first, " ");
  for (const std::string& item : items) {
    if (!line_empty && out.size() - line_start + 1 + item.size() > kUsageWidth) {
      out.push_back('\n');
      line_start = out.size();
      out.append(indent, ' ');
      line_empty = true;
    }
    if (!line_empty) out.push_back(' ');
    out += item;
    line_empty = false;
  }
  return out;
}

// The synopsis items of a command: its arguments, then "[--flag VALUE]" each.
std::vector<std::string> SynopsisItems(const CommandSpec& command) {
  std::vector<std::string> items;
  if (!command.arguments.empty()) items.emplace_back(command.arguments);
  for (const FlagSpec& flag : command.flags) {
    items.push_back(absl::StrCat("[", flag.name, flag.takes_value() ? " " : "", flag.value, "]",
                                 flag.repeatable ? "..." : ""));
  }
  return items;
}

// "  --flag VALUE        help", one line per line of help.
std::string FlagList(absl::Span<const FlagSpec> flags) {
  std::string out;
  for (const FlagSpec& flag : flags) {
    std::string shown = absl::StrCat("  ", flag.alias, flag.alias.empty() ? "" : ", ", flag.name,
                                     flag.takes_value() ? " " : "", flag.value);
    if (shown.size() < kHelpColumn) {
      shown.append(kHelpColumn - shown.size(), ' ');
    } else {
      absl::StrAppend(&shown, "\n", std::string(kHelpColumn, ' '));
    }
    out += shown;
    bool first_line = true;
    for (absl::string_view line : absl::StrSplit(flag.help, '\n')) {
      if (!first_line) out.append(kHelpColumn, ' ');
      absl::StrAppend(&out, line, "\n");
      first_line = false;
    }
  }
  return out;
}

std::string GlobalFlagsText() {
  return absl::StrCat("Global flags (before or after the command):\n", FlagList(GlobalFlags()));
}

}  // namespace

std::string UsageText(absl::string_view command) {
  if (const CommandSpec* spec = FindCommand(command); spec != nullptr) {
    const std::string first = absl::StrCat("Usage: torchmonctl ", spec->name, " ");
    return absl::StrCat(WrapSynopsis(first, SynopsisItems(*spec), first.size()), "\n\n",
                        spec->description, "\n\n", FlagList(spec->flags), "\n",
                        GlobalFlagsText());
  }
  std::vector<std::string> global;
  for (const FlagSpec& flag : GlobalFlags()) {
    if (flag.synopsis == kHidden) continue;
    global.push_back(flag.synopsis.empty()
                         ? absl::StrCat("[", flag.name, flag.takes_value() ? " " : "",
                                        flag.value, "]")
                         : std::string(flag.synopsis));
  }
  global.emplace_back("COMMAND ...");
  constexpr absl::string_view kTool = "Usage: torchmonctl ";
  std::string out = absl::StrCat(WrapSynopsis(kTool, global, kTool.size()), "\n\n",
                                 "Queries and feeds torchmond, the torchmon daemon.\n\n",
                                 "Commands:\n");
  for (const CommandSpec& spec : Commands()) {
    const std::string first = absl::StrCat("  ", spec.name, " ");
    absl::StrAppend(&out, WrapSynopsis(first, SynopsisItems(spec), first.size()), "\n      ",
                    spec.summary, "\n");
  }
  absl::StrAppend(&out, "\n", GlobalFlagsText(),
                  "\nExit status: 0 success; 1 the daemon answered with an error or refused\n"
                  "something; 2 usage error; 3 the daemon could not be reached in time.\n"
                  "Run 'torchmonctl COMMAND --help' for a command's flags.\n");
  return out;
}

}  // namespace torchmon::cli

// torchmonctl: the command-line client of torchmond. Parses the command line,
// then hands over to one command; see docs/cli.md.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "cli/command_line.h"
#include "cli/commands.h"
#include "cli/usage_text.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::cli {
namespace {

int Run(const std::vector<std::string>& args) {
  if (args.empty()) {
    std::fputs(UsageText("").c_str(), stderr);
    return kExitUsage;
  }
  auto invocation = ParseCommandLine(args, protocol::DefaultTarget());
  if (!invocation.ok()) {
    std::string help = "torchmonctl --help";
    for (const std::string& arg : args) {
      if (IsCommand(arg)) {
        help = "torchmonctl " + arg + " --help";
        break;
      }
    }
    std::fprintf(stderr, "torchmonctl: %s\nRun '%s' for usage.\n",
                 std::string(invocation.status().message()).c_str(), help.c_str());
    return kExitUsage;
  }
  const GlobalOptions& global = invocation->global;
  return std::visit(
      [&](const auto& command) -> int {
        using T = std::decay_t<decltype(command)>;
        if constexpr (std::is_same_v<T, HelpRequest>) {
          std::fputs(UsageText(command.command).c_str(), stdout);
          return kExitOk;
        } else if constexpr (std::is_same_v<T, SeriesCommand>) {
          return RunSeries(global, command);
        } else if constexpr (std::is_same_v<T, WindowsCommand>) {
          return RunWindows(global, command);
        } else if constexpr (std::is_same_v<T, EventsCommand>) {
          return RunEvents(global, command);
        } else if constexpr (std::is_same_v<T, WatchCommand>) {
          // Before gRPC starts any thread, so that every thread inherits the mask.
          BlockTerminationSignals();
          return RunWatch(global, command);
        } else if constexpr (std::is_same_v<T, TopCommand>) {
          BlockTerminationSignals();
          return RunTop(global, command);
        } else if constexpr (std::is_same_v<T, RanksCommand>) {
          return RunRanks(global, command);
        } else if constexpr (std::is_same_v<T, PushCommand>) {
          return RunPush(global, command);
        } else {
          static_assert(std::is_same_v<T, EventCommand>);
          return RunEvent(global, command);
        }
      },
      invocation->command);
}

}  // namespace
}  // namespace torchmon::cli

int main(int argc, char** argv) {
  int status = torchmon::cli::Run(std::vector<std::string>(argv + 1, argv + argc));
  // Output a script relies on must not be lost silently (e.g. a full disk).
  if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
    std::fprintf(stderr, "torchmonctl: could not write the output: %s\n", std::strerror(errno));
    if (status == torchmon::cli::kExitOk) status = torchmon::cli::kExitFailed;
  }
  return status;
}

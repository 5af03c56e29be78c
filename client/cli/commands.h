// The commands of torchmonctl, each run against the daemon at
// `global.target`. Every Run* function prints its result to stdout, its
// errors to stderr as "torchmonctl: ...", and returns the process exit
// status (an ExitCode). Called once per process, from the main thread.
#ifndef TORCHMON_CLI_COMMANDS_H_
#define TORCHMON_CLI_COMMANDS_H_

#include "cli/command_line.h"
#include "torchmon/client.h"

namespace torchmon::cli {

// The daemon's address and the security settings every command connects
// with, from the shared options (--target, --token-file, --tls-*).
inline ClientOptions ConnectionOptions(const GlobalOptions& global) {
  ClientOptions options;
  options.target = global.target;
  options.security = global.security;
  return options;
}

// Query commands: one Query RPC each, bounded by global.timeout_ms.
int RunSeries(const GlobalOptions& global, const SeriesCommand& command);
int RunWindows(const GlobalOptions& global, const WindowsCommand& command);
int RunEvents(const GlobalOptions& global, const EventsCommand& command);
int RunRanks(const GlobalOptions& global, const RanksCommand& command);
// Refreshes until --count refreshes are shown or SIGINT/SIGTERM arrives (call
// BlockTerminationSignals() first, as for RunWatch).
int RunTop(const GlobalOptions& global, const TopCommand& command);

// Streams windows until the daemon ends the stream or SIGINT/SIGTERM arrives
// (which ends it with status 0). Call BlockTerminationSignals() first, while
// the process has one thread, so that the signals can be awaited.
int RunWatch(const GlobalOptions& global, const WatchCommand& command);
void BlockTerminationSignals();

// Ingest commands: send through torchmon::Client, then flush for at most
// global.timeout_ms.
int RunPush(const GlobalOptions& global, const PushCommand& command);
int RunEvent(const GlobalOptions& global, const EventCommand& command);

}  // namespace torchmon::cli

#endif  // TORCHMON_CLI_COMMANDS_H_

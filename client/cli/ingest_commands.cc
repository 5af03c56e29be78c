// push and event: one sample batch or one event, sent through the C++ client
// exactly as a training process would send it.

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cli/commands.h"
#include "torchmon/channel.h"
#include "torchmon/client.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::cli {
namespace {

ClientOptions MakeClientOptions(const GlobalOptions& global) {
  ClientOptions options = ConnectionOptions(global);
  options.labels_from_environment = true;
  // Flush() below already waited as long as the user allowed.
  options.destructor_flush_timeout = std::chrono::milliseconds(0);
  options.client_name = absl::StrCat("torchmonctl pid=", getpid());
  // The CLI prints the daemon's refusals itself (TakeErrors) with its exit code.
  options.log_to_stderr = false;
  return options;
}

// Flushes `client` and turns the outcome into an exit status: kExitOk when
// everything was acknowledged and nothing refused, kExitFailed when the daemon
// refused something, kExitUnreachable when it did not acknowledge in time or
// the client had to drop something. `what` names what was sent ("3 samples").
int FlushAndReport(const GlobalOptions& global, Client& client, const std::string& what) {
  const absl::Status flushed = client.Flush(std::chrono::milliseconds(global.timeout_ms));
  const std::vector<std::string> errors = client.TakeErrors();
  for (const std::string& error : errors) {
    std::fprintf(stderr, "torchmonctl: torchmond refused: %s\n", error.c_str());
  }
  if (!flushed.ok()) {
    std::fprintf(stderr, "torchmonctl: could not deliver %s to torchmond at %s within %s: %s\n",
                 what.c_str(), client.target().c_str(),
                 protocol::FormatDurationMs(global.timeout_ms).c_str(),
                 std::string(flushed.message()).c_str());
    // A daemon that refused our credentials was reached: that is a refusal.
    for (const std::string& error : errors) {
      if (absl::StartsWith(error, "UNAUTHENTICATED") ||
          absl::StartsWith(error, "PERMISSION_DENIED")) {
        return kExitFailed;
      }
    }
    return kExitUnreachable;
  }
  const ClientStats stats = client.Stats();
  if (stats.samples_dropped > 0 || stats.events_dropped > 0) {
    std::fprintf(stderr,
                 "torchmonctl: the client dropped %llu samples and %llu events before "
                 "torchmond at %s acknowledged them\n",
                 static_cast<unsigned long long>(stats.samples_dropped),
                 static_cast<unsigned long long>(stats.events_dropped), client.target().c_str());
    return kExitUnreachable;
  }
  return errors.empty() ? kExitOk : kExitFailed;
}

// False, with the reason printed, if the client would refuse to connect
// (unreadable file, token in clear text, untrusted socket): better said at
// once than after a flush that waited for nothing.
bool SecuritySettingsUsable(const ClientOptions& options) {
  auto channel = CreateDaemonChannel(options);
  if (channel.ok()) return true;
  std::fprintf(stderr, "torchmonctl: %s\n", std::string(channel.status().message()).c_str());
  return false;
}

}  // namespace

int RunPush(const GlobalOptions& global, const PushCommand& command) {
  if (!SecuritySettingsUsable(MakeClientOptions(global))) return kExitUsage;
  Client client(MakeClientOptions(global));

  // A key that is also an identity label would make the daemon refuse the
  // definition; say so before sending anything.
  for (const auto& [key, value] : command.labels) {
    for (const auto& [identity_key, identity_value] : client.labels()) {
      if (key == identity_key) {
        std::fprintf(stderr,
                     "torchmonctl: --label %s: %s is already an identity label of this process "
                     "(%s=%s, from the environment); set it through TORCHMON_LABELS instead\n",
                     key.c_str(), key.c_str(), identity_key.c_str(), identity_value.c_str());
        return kExitUsage;
      }
    }
  }

  std::vector<StatAggregation> aggregations;
  for (int aggregation : command.spec.aggregations()) {
    aggregations.push_back(protocol::AggregationAs<Aggregation>(aggregation));
  }
  for (double q : command.spec.quantiles()) aggregations.push_back(Quantile(q));
  StatOptions options;
  options.max_samples = command.spec.max_samples();
  options.labels = command.labels;
  options.histogram = command.spec.histogram();
  Stat stat(client, command.stat, aggregations,
            std::chrono::milliseconds(command.spec.window_size_ms()), std::move(options));
  for (double value : command.values) {
    if (command.at_ms.has_value()) {
      stat.add(value, *command.at_ms * 1000);
    } else {
      stat.add(value);
    }
  }
  return FlushAndReport(
      global, client,
      absl::StrCat(command.values.size(), command.values.size() == 1 ? " sample" : " samples"));
}

int RunEvent(const GlobalOptions& global, const EventCommand& command) {
  // --label overrides identity labels (docs/cli.md). The daemon refuses an
  // event label that repeats an identity key, so the overrides go into the
  // client's identity, which only this one event uses.
  ClientOptions options = MakeClientOptions(global);
  options.labels = command.labels;
  if (!SecuritySettingsUsable(options)) return kExitUsage;
  Client client(options);
  Event event(command.name, command.data);
  client.LogEvent(event);
  return FlushAndReport(global, client, absl::StrCat("event ", command.name));
}

}  // namespace torchmon::cli

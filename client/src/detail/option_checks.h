// What a Client settles before its threads start: its options made usable,
// its identity labels, the channel's arguments, and each Stat's definition
// checked against what the daemon would refuse. Pure functions of their
// arguments (and the environment, where named); thread-safe.
#ifndef TORCHMON_CLIENT_DETAIL_OPTION_CHECKS_H_
#define TORCHMON_CLIENT_DETAIL_OPTION_CHECKS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "grpcpp/support/channel_arguments.h"
#include "torchmon/client.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// `options` with every duration made usable (send_interval and
// initial_backoff at least 1 ms, max_backoff at least initial_backoff, a
// negative destructor_flush_timeout 0) and an empty target replaced by
// $TORCHMON_TARGET or the default socket. Never fails.
ClientOptions NormalizeOptions(ClientOptions options);

// options.buffer_bytes, once it is known to fit the sample pool: throws
// std::invalid_argument naming the bounds if it is below
// ClientOptions::kMinBufferBytes or above what the pool can address. The
// one check that refuses a Client (client.h, Client's constructor).
size_t CheckedBufferBudget(const ClientOptions& options);

// The identity labels of a client: those of the environment (when
// options.labels_from_environment) overridden by options.labels. A label
// the daemon would refuse is left out and described in `errors`.
Labels ResolveClientLabels(const ClientOptions& options, std::vector<std::string>* errors);

// The channel arguments of a client's connection: gRPC's own reconnect
// backoff follows options.initial_backoff and max_backoff, so that a
// daemon that comes back is found within max_backoff.
grpc::ChannelArguments ChannelArgumentsFor(const ClientOptions& options);

// A non-zero number that no other client on the node is likely to draw:
// the client's instance (IngestHello.client_instance).
uint64_t DrawClientInstance();

// A Stat's definition as it goes on the wire (its id not yet set), the
// verdict of the checks the daemon would make of it, and the hashes of its
// name and labels (the series it feeds: StatRegistry keys by it) and of its
// spec.
struct CheckedDefinition {
  v1::StatDefinition definition;
  // OK, or why every sample of the stat is dropped (INVALID_ARGUMENT's
  // message, without the code).
  absl::Status status;
  uint64_t key_hash = 0;
  // The hash of its spec: Stats of one series whose specs agree may be
  // defined in any order (BatchFiller).
  uint64_t spec_hash = 0;
};
// Builds and checks a definition: its name, aggregations, window and cap
// (torchmon/protocol), its labels' keys and values, and that with the
// client's identity labels (`identity`) they number at most
// protocol::kMaxLabels and none repeats one of them.
CheckedDefinition CheckStatDefinition(const std::string& name,
                                      const std::vector<StatAggregation>& aggregations,
                                      std::chrono::milliseconds window_size,
                                      const StatOptions& options, const Labels& identity);

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_OPTION_CHECKS_H_

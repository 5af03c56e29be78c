// A gRPC channel to torchmond for programs that make their own calls
// (torchmonctl's queries, tests, tools of your own), set up exactly as a
// torchmon::Client sets up its own: the same target resolution, TLS and
// bearer token (docs/security.md).
#ifndef TORCHMON_CHANNEL_H_
#define TORCHMON_CHANNEL_H_

#include <memory>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "torchmon/client.h"

namespace torchmon {

// A channel to the daemon `options` names; only its target, security and
// security_from_environment fields are used. Every call on the channel
// carries the token, if one is configured. The error says why the settings
// cannot be honoured (see ClientOptions::target); no connection is made then.
// What works but is unsafe (a token file every user can read) is printed to
// stderr. Thread-safe.
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateDaemonChannel(const ClientOptions& options);

}  // namespace torchmon

#endif  // TORCHMON_CHANNEL_H_

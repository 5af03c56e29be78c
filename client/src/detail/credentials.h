// How the client library reaches the daemon securely: the security
// settings completed from the environment, the checks that decide whether
// they can be honoured, and the channel they produce.
#ifndef TORCHMON_CLIENT_DETAIL_CREDENTIALS_H_
#define TORCHMON_CLIENT_DETAIL_CREDENTIALS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/channel.h"
#include "grpcpp/support/channel_arguments.h"
#include "torchmon/client.h"

namespace torchmon::detail {

// `security` with each empty field taken from its environment variable
// (TORCHMON_TOKEN_FILE, TORCHMON_TLS_CA, TORCHMON_TLS_CERT, TORCHMON_TLS_KEY,
// TORCHMON_TLS_SERVER_NAME).
ClientSecurity SecurityFromEnvironment(ClientSecurity security);

// The first token of a token file's text: the first line that is neither
// empty nor a '#' comment, stripped. InvalidArgument naming `origin` if
// there is none or it holds anything but printable ASCII.
absl::StatusOr<std::string> ParseClientToken(absl::string_view text, absl::string_view origin);

// What a target string says about where calls go.
struct TargetInfo {
  bool is_unix = false;
  std::string unix_path;  // is_unix: the socket path
  std::string host;       // otherwise: the host, without brackets ("" if unknown)
  // Only this machine can be reached there: a Unix socket, 127.0.0.0/8,
  // ::1 or "localhost", named by this machine: not through a DNS server
  // of the target's own ("dns://8.8.8.8/localhost:7070").
  bool local = false;
};
TargetInfo ParseTarget(absl::string_view target);

// Creates the channel to `target` with `security` as given (the caller
// completes it from the environment) and `args`. Refuses, with the reason:
// an unreadable or invalid file; a token for a TCP target that is neither
// loopback nor TLS; the default socket (protocol::DefaultSocketPath()) in a
// directory that root and this user do not control alone. Appends to
// `warnings` what works but is unsafe (a token file other users can read).
absl::StatusOr<std::shared_ptr<grpc::Channel>> CreateChannel(const std::string& target,
                                                             const ClientSecurity& security,
                                                             grpc::ChannelArguments args,
                                                             std::vector<std::string>* warnings);

// A channel that never connects and fails every call, for a client whose
// settings were refused: it keeps retrying (and reporting) like a client
// whose daemon is away, without sending anything anywhere.
std::shared_ptr<grpc::Channel> RefusedChannel(const grpc::ChannelArguments& args);

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_CREDENTIALS_H_

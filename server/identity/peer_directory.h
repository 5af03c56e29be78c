// Who is at the other end of each connection the daemon accepted on a Unix
// socket itself (server/daemon/unix_acceptor.h), found again from a call's
// gRPC peer string. gRPC names a connection handed to it by file descriptor
// "fd:<N>"; the acceptor records the kernel's word on the peer under N
// before gRPC sees the descriptor.
//
// Why a number is enough: gRPC closes N only when the connection's transport
// is destroyed, and every call on it holds the transport; so while a call
// runs, N is open and cannot name another connection. A record is replaced
// when the kernel hands N out again, which it does only after the old
// connection was closed, with no call of it left.
//
// Thread-safe.
#ifndef TORCHMON_SERVER_IDENTITY_PEER_DIRECTORY_H_
#define TORCHMON_SERVER_IDENTITY_PEER_DIRECTORY_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/identity/peer_identity.h"

namespace torchmon::server {

// One accepted connection's peer, immutable once recorded.
struct PeerIdentity {
  PeerCredentials credentials;
  // The labels the daemon adds to every series and event of the peer's
  // streams (AsLabelPairs: the user, and what its cgroup vouches for),
  // sorted by name.
  std::vector<std::pair<std::string, std::string>> labels;
  // The peer's user: its name, or its uid in decimal.
  std::string user;
  // Sees every user's series and events in queries (AdminRule).
  bool admin = false;
};

class PeerDirectory {
 public:
  // Records `peer` as the one at the other end of connection `fd`,
  // replacing what an earlier connection of that number left.
  void Record(int fd, std::shared_ptr<const PeerIdentity> peer) ABSL_LOCKS_EXCLUDED(mu_);

  // The peer of the connection gRPC calls `grpc_peer` ("fd:<N>"), or null
  // for a peer string of another form (a TCP or gRPC-accepted Unix
  // connection) or a number never recorded.
  std::shared_ptr<const PeerIdentity> Find(absl::string_view grpc_peer) const
      ABSL_LOCKS_EXCLUDED(mu_);

  // Connections recorded (one per descriptor number in use or reused).
  size_t size() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  mutable absl::Mutex mu_;
  absl::flat_hash_map<int, std::shared_ptr<const PeerIdentity>> peers_ ABSL_GUARDED_BY(mu_);
};

// The descriptor number of a gRPC peer string "fd:<N>", or -1.
int FdOfGrpcPeer(absl::string_view grpc_peer);

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_IDENTITY_PEER_DIRECTORY_H_

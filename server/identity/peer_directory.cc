#include "server/identity/peer_directory.h"

#include "absl/strings/strip.h"
#include "absl/strings/numbers.h"

namespace torchmon::server {

int FdOfGrpcPeer(absl::string_view grpc_peer) {
  int fd = -1;
  if (!absl::ConsumePrefix(&grpc_peer, "fd:") || !absl::SimpleAtoi(grpc_peer, &fd) || fd < 0) {
    return -1;
  }
  return fd;
}

void PeerDirectory::Record(int fd, std::shared_ptr<const PeerIdentity> peer) {
  absl::MutexLock lock(&mu_);
  peers_[fd] = std::move(peer);
}

std::shared_ptr<const PeerIdentity> PeerDirectory::Find(absl::string_view grpc_peer) const {
  const int fd = FdOfGrpcPeer(grpc_peer);
  if (fd < 0) return nullptr;
  absl::MutexLock lock(&mu_);
  auto it = peers_.find(fd);
  return it == peers_.end() ? nullptr : it->second;
}

size_t PeerDirectory::size() const {
  absl::MutexLock lock(&mu_);
  return peers_.size();
}

}  // namespace torchmon::server

// A Unix socket whose connections torchmond accepts itself rather than
// through gRPC, so that it knows who is on the other end of each
// (--peer-labels; docs/security.md): the peer's credentials (SO_PEERCRED)
// and the labels its cgroup vouches for are recorded in a PeerDirectory,
// then the connection is handed to the gRPC server, which names it
// "fd:<N>" in every call's peer string.
//
// gRPC serves connections handed over this way without transport security
// (grpc_server_add_channel_from_fd takes insecure credentials only), where
// its transport runs no --auth-token-file check: the handlers of
// torchmond's services check those calls (ServicesCheckingTokens);
// grpc++'s reflection answers them unchecked. The socket's mode and group
// decide who may connect, as on the sockets gRPC binds.
//
// Thread-safe: Start and Stop from one thread; the acceptor runs on its own.
#ifndef TORCHMON_SERVER_DAEMON_UNIX_ACCEPTOR_H_
#define TORCHMON_SERVER_DAEMON_UNIX_ACCEPTOR_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server.h"
#include "server/daemon/unix_socket.h"
#include "server/identity/peer_directory.h"

namespace torchmon::server {

class UnixAcceptor {
 public:
  // Called for a connection that was closed at once because its peer could
  // not be identified (the process left before it was looked at).
  using OnRefused = std::function<void(absl::string_view why)>;

  // Binds and listens on `path`, made ready by PrepareUnixSocket, and gives
  // it `mode` and `owner` (FinishUnixSocket); no connection is accepted
  // before Start. Errors name the path.
  static absl::StatusOr<std::unique_ptr<UnixAcceptor>> Listen(const std::string& path,
                                                              uint32_t mode,
                                                              const SocketOwner& owner);
  ~UnixAcceptor();  // Stop()
  UnixAcceptor(const UnixAcceptor&) = delete;
  UnixAcceptor& operator=(const UnixAcceptor&) = delete;

  // Accepts connections on a thread of its own until Stop: each one's peer
  // is recorded in `directory` (under <proc_root>/<pid>/cgroup), then the
  // connection is added to `server`, which must outlive Stop. `server`,
  // `directory` and `on_refused` must outlive this.
  // `admins` says which peers are marked admin (PeerIdentity::admin).
  void Start(grpc::Server* server, PeerDirectory* directory, AdminRule admins,
             OnRefused on_refused, std::string proc_root = "/proc");

  // Stops accepting and closes the listening socket; connections already
  // handed to gRPC carry on. Idempotent. Call before the server shuts down.
  void Stop();

  // Connections accepted and handed to gRPC, and those closed unidentified.
  uint64_t accepted() const { return accepted_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  UnixAcceptor(int listen_fd, int wake_fd) : listen_fd_(listen_fd), wake_fd_(wake_fd) {}
  void Run(grpc::Server* server, PeerDirectory* directory, const AdminRule& admins,
           const OnRefused& on_refused, const std::string& proc_root);

  int listen_fd_;
  int wake_fd_;  // an eventfd: written by Stop to end Run's poll
  std::thread thread_;
  std::atomic<uint64_t> accepted_{0};
  std::atomic<uint64_t> refused_{0};
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_UNIX_ACCEPTOR_H_

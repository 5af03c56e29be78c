#include "server/daemon/unix_acceptor.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/server_posix.h"

namespace torchmon::server {

absl::StatusOr<std::unique_ptr<UnixAcceptor>> UnixAcceptor::Listen(const std::string& path,
                                                                   uint32_t mode,
                                                                   const SocketOwner& owner) {
  sockaddr_un addr{};
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(absl::StrCat("socket path ", path, " is too long"));
  }
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket() for ", path, ": ", std::strerror(errno)));
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size());
  int bound;
  {
    // Owner-only until FinishUnixSocket gives the socket its mode.
    ScopedUmask owner_only(0177);
    bound = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  }
  if (bound != 0 || listen(fd, SOMAXCONN) != 0) {
    const std::string why = std::strerror(errno);
    close(fd);
    return absl::UnavailableError(absl::StrCat("cannot listen on unix://", path, ": ", why));
  }
  if (absl::Status s = FinishUnixSocket(path, mode, owner); !s.ok()) {
    close(fd);
    return s;
  }
  const int wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake < 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  return std::unique_ptr<UnixAcceptor>(new UnixAcceptor(fd, wake));
}

UnixAcceptor::~UnixAcceptor() {
  Stop();
  if (wake_fd_ >= 0) close(wake_fd_);
}

void UnixAcceptor::Start(grpc::Server* server, PeerDirectory* directory, AdminRule admins,
                         OnRefused on_refused, std::string proc_root) {
  thread_ = std::thread([this, server, directory, admins = std::move(admins),
                         on_refused = std::move(on_refused), proc_root = std::move(proc_root)] {
    Run(server, directory, admins, on_refused, proc_root);
  });
}

void UnixAcceptor::Stop() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    // An eventfd write of 1 cannot block or fail short of an overflow.
    [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (listen_fd_ >= 0) {
    close(listen_fd_);
    listen_fd_ = -1;
  }
}

void UnixAcceptor::Run(grpc::Server* server, PeerDirectory* directory, const AdminRule& admins,
                       const OnRefused& on_refused, const std::string& proc_root) {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (true) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds[1].revents != 0) return;  // Stop
    while (true) {
      // Non-blocking, as gRPC's own connections are.
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        // EAGAIN: none left. EMFILE and the like: the next poll retries,
        // after a pause so that a full fd table does not spin the thread.
        if (errno != EAGAIN && errno != EWOULDBLOCK) poll(nullptr, 0, 100);
        break;
      }
      auto credentials = PeerCredentialsOf(fd);
      // The pidfd pins the process that connected, so that what /proc says
      // of its pid is known to be its own (race-free where the kernel has
      // SO_PEERPIDFD; docs/security.md).
      absl::StatusOr<int> pidfd = credentials.ok() && credentials->pid != 0
                                      ? PeerPidfdOf(fd)
                                      : absl::StatusOr<int>(-1);
      const int peer_pidfd = pidfd.ok() ? *pidfd : -1;
      absl::StatusOr<VouchedLabels> vouched =
          credentials.ok() ? VouchedLabelsOf(*credentials, proc_root, peer_pidfd)
                           : absl::StatusOr<VouchedLabels>(credentials.status());
      // Supplementary groups matter only for --admin-group; a peer whose
      // groups cannot be read is no admin (it may still use its own series).
      // The kernel's record of connect() first, /proc where it has none.
      std::vector<uint32_t> groups;
      if (vouched.ok() && admins.gid.has_value()) {
        if (auto recorded = PeerGroupsOf(fd); recorded.ok()) {
          groups = *std::move(recorded);
        } else if (credentials->pid != 0) {
          if (auto read = SupplementaryGroupsOf(credentials->pid, proc_root, peer_pidfd);
              read.ok()) {
            groups = *std::move(read);
          }
        }
      }
      if (peer_pidfd >= 0) close(peer_pidfd);
      if (!vouched.ok()) {
        close(fd);
        refused_.fetch_add(1, std::memory_order_relaxed);
        if (on_refused) on_refused(vouched.status().message());
        continue;
      }
      auto peer = std::make_shared<PeerIdentity>();
      peer->credentials = *credentials;
      peer->admin = admins.Admits(*credentials, groups);
      peer->user = vouched->user;
      peer->labels = AsLabelPairs(*vouched);
      std::sort(peer->labels.begin(), peer->labels.end());
      // Recorded before gRPC can read a byte: no call of this connection
      // can look its peer up first.
      directory->Record(fd, std::move(peer));
      grpc::AddInsecureChannelFromFd(server, fd);
      accepted_.fetch_add(1, std::memory_order_relaxed);
    }
  }
}

}  // namespace torchmon::server

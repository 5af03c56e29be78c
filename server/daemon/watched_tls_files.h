// The gRPC listeners' TLS material as gRPC reads it when it can change
// under a running server: private copies of the certificate chain, key and
// client CA that gRPC's FileWatcherCertificateProvider polls.
//
// gRPC cannot swap a listener's credentials, but a TLS listener whose
// certificate provider watches files picks up new ones at its next poll.
// The daemon points it at copies it writes itself, never at the operator's
// files: those are read and checked first (modes, PEM, the key belonging to
// the certificate), as at start, on SIGHUP only, and a bad one never
// reaches gRPC. A new generation is written to a directory of its own and
// put in place by renaming a symlink, so the watcher never reads a key of
// one generation with a certificate of another (its documented contract).
//
// Thread-safe as far as the daemon uses it: Replace is called from the
// signal handler's strand only; the paths never change.
#ifndef TORCHMON_SERVER_DAEMON_WATCHED_TLS_FILES_H_
#define TORCHMON_SERVER_DAEMON_WATCHED_TLS_FILES_H_

#include <sys/types.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/exposition/https_context.h"

namespace torchmon::server {

class WatchedTlsFiles {
 public:
  // Creates a private directory (mode 0700) under `parent` and writes the
  // PEM of `pem` there (its certificate chain, key and client CA; the rest
  // is the listener's, not the files'). Internal error naming the path if
  // the file system refuses.
  static absl::StatusOr<std::unique_ptr<WatchedTlsFiles>> Create(const std::string& parent,
                                                                 const HttpsMaterial& pem);

  // Writes `pem` as the next generation and puts it in place; the one
  // before the previous is removed. On error nothing the watcher reads has
  // changed.
  absl::Status Replace(const HttpsMaterial& pem);

  // Gives the directory and its files to `uid`:`gid` (a daemon about to
  // drop privileges must still be able to write the next generation).
  // Called once, after Create.
  absl::Status GiveTo(uid_t uid, gid_t gid);

  // What the watcher reads: <dir>/current/{key,cert,ca}.pem.
  std::string key_path() const { return dir_ + "/current/key.pem"; }
  std::string cert_path() const { return dir_ + "/current/cert.pem"; }
  std::string ca_path() const { return dir_ + "/current/ca.pem"; }

  // Removes the directory.
  ~WatchedTlsFiles();
  WatchedTlsFiles(const WatchedTlsFiles&) = delete;
  WatchedTlsFiles& operator=(const WatchedTlsFiles&) = delete;

 private:
  explicit WatchedTlsFiles(std::string dir) : dir_(std::move(dir)) {}
  absl::Status WriteGeneration(const HttpsMaterial& pem, const std::string& name);

  const std::string dir_;
  int generation_ = 0;
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_DAEMON_WATCHED_TLS_FILES_H_

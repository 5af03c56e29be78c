#include "server/daemon/watched_tls_files.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"

namespace torchmon::server {
namespace {

absl::Status Failed(absl::string_view what, const std::string& path) {
  return absl::InternalError(absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WritePrivate(const std::string& path, const std::string& content) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return Failed("cannot create", path);
  size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status error = Failed("cannot write", path);
      close(fd);
      return error;
    }
    done += static_cast<size_t>(n);
  }
  if (close(fd) != 0) return Failed("cannot write", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<WatchedTlsFiles>> WatchedTlsFiles::Create(
    const std::string& parent, const HttpsMaterial& pem) {
  std::string pattern = parent + "/torchmond-tls.XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return Failed("cannot create a directory in", parent);
  std::unique_ptr<WatchedTlsFiles> files(new WatchedTlsFiles(pattern));
  if (absl::Status s = files->Replace(pem); !s.ok()) return s;
  return files;
}

absl::Status WatchedTlsFiles::WriteGeneration(const HttpsMaterial& pem,
                                              const std::string& name) {
  const std::string dir = absl::StrCat(dir_, "/", name);
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);  // a leftover of a failed attempt
  if (mkdir(dir.c_str(), 0700) != 0) return Failed("cannot create", dir);
  // The CA file always exists (empty without a CA), so that the paths the
  // watcher was given stay valid whatever a reload brings.
  for (const auto& [file, content] :
       {std::pair<const char*, const std::string*>{"key.pem", &pem.key_pem},
        {"cert.pem", &pem.cert_chain_pem},
        {"ca.pem", &pem.client_ca_pem}}) {
    if (absl::Status s = WritePrivate(absl::StrCat(dir, "/", file), *content); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status WatchedTlsFiles::Replace(const HttpsMaterial& pem) {
  const std::string name = absl::StrCat("gen-", generation_ + 1);
  if (absl::Status s = WriteGeneration(pem, name); !s.ok()) return s;
  // rename(2) of a symlink over the old one: the watcher sees either
  // generation whole, never a mix.
  const std::string link = dir_ + "/current.next";
  unlink(link.c_str());
  if (symlink(name.c_str(), link.c_str()) != 0) return Failed("cannot create", link);
  const std::string current = dir_ + "/current";
  if (rename(link.c_str(), current.c_str()) != 0) return Failed("cannot replace", current);
  if (generation_ > 1) {
    // The watcher holds what it read in memory. The generation just
    // replaced stays until the next Replace, for a read it may have begun.
    std::error_code ignored;
    std::filesystem::remove_all(absl::StrCat(dir_, "/gen-", generation_ - 1), ignored);
  }
  ++generation_;
  return absl::OkStatus();
}

absl::Status WatchedTlsFiles::GiveTo(uid_t uid, gid_t gid) {
  std::vector<std::string> paths = {dir_, dir_ + "/current"};
  const std::string generation = absl::StrCat(dir_, "/gen-", generation_);
  paths.push_back(generation);
  for (const char* file : {"key.pem", "cert.pem", "ca.pem"}) {
    paths.push_back(absl::StrCat(generation, "/", file));
  }
  for (const std::string& path : paths) {
    if (lchown(path.c_str(), uid, gid) != 0) return Failed("cannot give", path);
  }
  return absl::OkStatus();
}

WatchedTlsFiles::~WatchedTlsFiles() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

}  // namespace torchmon::server

#include "torchmon/protocol/socket_path.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace torchmon::protocol {
namespace {

std::string UserName(uid_t uid) {
  passwd entry;
  passwd* found = nullptr;
  char buffer[1024];
  if (getpwuid_r(uid, &entry, buffer, sizeof(buffer), &found) == 0 && found != nullptr) {
    return absl::StrCat("uid ", uid, " (", found->pw_name, ")");
  }
  return absl::StrCat("uid ", uid);
}

std::string TrustedNames(const std::vector<uid_t>& trusted) {
  std::vector<std::string> names;
  for (uid_t uid : trusted) {
    if (uid != 0) names.push_back(UserName(uid));
  }
  names.push_back("root");
  return absl::StrJoin(names, " or ");
}

std::string Mode(mode_t mode) {
  char text[16];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

bool Trusted(uid_t uid, const std::vector<uid_t>& trusted) {
  return uid == 0 || std::find(trusted.begin(), trusted.end(), uid) != trusted.end();
}

// Checks "/", "/a", "/a/b", ... up to `dir`, which is absolute. Empty
// components ("//") are skipped; "." and ".." name directories that are
// checked where they are resolved (the caller's second pass).
absl::Status CheckChain(const std::string& dir, const std::string& socket_path,
                        const std::vector<uid_t>& trusted) {
  auto refuse = [&](const std::string& path, const std::string& why, const std::string& fix) {
    return absl::FailedPreconditionError(
        absl::StrCat("refusing the Unix socket ", socket_path, ": ", path, " ", why,
                     ", so another user could put a socket of their own in its place; ", fix,
                     " (docs/security.md)"));
  };
  std::vector<std::string> prefixes = {"/"};
  for (size_t pos = 1; pos < dir.size();) {
    size_t next = dir.find('/', pos);
    if (next == std::string::npos) next = dir.size();
    if (next > pos) prefixes.push_back(dir.substr(0, next));
    pos = next + 1;
  }
  for (size_t i = 0; i < prefixes.size(); ++i) {
    const std::string& path = prefixes[i];
    const bool is_socket_dir = i + 1 == prefixes.size();
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) {
        return absl::NotFoundError(absl::StrCat("socket directory ", dir, " does not exist"));
      }
      return absl::PermissionDeniedError(
          absl::StrCat("cannot inspect ", path, ": ", std::strerror(errno)));
    }
    if (S_ISLNK(st.st_mode)) {
      // Whoever owns a link can point it elsewhere; where it points is
      // checked by the caller's second pass over the resolved path.
      if (!Trusted(st.st_uid, trusted)) {
        return refuse(path, absl::StrCat("is a symbolic link owned by ", UserName(st.st_uid)),
                      absl::StrCat("use a path whose links belong to ", TrustedNames(trusted)));
      }
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat("refusing the Unix socket ", socket_path,
                                                        ": ", path, " is not a directory"));
    }
    if (!Trusted(st.st_uid, trusted)) {
      return refuse(
          path, absl::StrCat("is owned by ", UserName(st.st_uid)),
          absl::StrCat("remove it or choose a directory owned by ", TrustedNames(trusted)));
    }
    const bool shared_write = (st.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (shared_write && is_socket_dir) {
      return refuse(path, absl::StrCat("(mode ", Mode(st.st_mode), ") is writable by other users"),
                    absl::StrCat("use a private directory (chmod go-w ", path,
                                 ", or a subdirectory of it with mode 0700)"));
    }
    if (shared_write && (st.st_mode & S_ISVTX) == 0) {
      return refuse(
          path,
          absl::StrCat("(mode ", Mode(st.st_mode), ") is writable by other users and not sticky"),
          absl::StrCat("chmod go-w ", path, " or choose another place"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSocketDirectory(absl::string_view socket_path,
                                  const std::vector<uid_t>& trusted_uids) {
  const std::string path(socket_path);
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat("socket path \"", path, "\" is not absolute"));
  }
  const size_t slash = path.rfind('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  // As written: what a client names, links included.
  if (absl::Status s = CheckChain(dir, path, trusted_uids); !s.ok()) return s;
  // As resolved: where the links lead.
  char resolved[PATH_MAX];
  if (realpath(dir.c_str(), resolved) == nullptr) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat("socket directory ", dir, " does not exist"));
    }
    return absl::PermissionDeniedError(
        absl::StrCat("cannot resolve ", dir, ": ", std::strerror(errno)));
  }
  if (dir == resolved) return absl::OkStatus();
  return CheckChain(resolved, path, trusted_uids);
}

}  // namespace torchmon::protocol

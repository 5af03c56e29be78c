#include "server/daemon/privileges.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace torchmon::server {
namespace {

// getpw*_r / getgr*_r need a buffer; entries with many members need more.
template <typename Entry, typename Lookup>
bool FindEntry(Lookup lookup, Entry* entry, std::vector<char>& buffer) {
  buffer.resize(4096);
  for (;;) {
    Entry* found = nullptr;
    const int error = lookup(entry, buffer.data(), buffer.size(), &found);
    if (error == ERANGE && buffer.size() < (1u << 20)) {
      buffer.resize(buffer.size() * 4);
      continue;
    }
    return error == 0 && found != nullptr;
  }
}

}  // namespace

absl::StatusOr<UserIdentity> LookUpUser(const std::string& user) {
  passwd entry;
  std::vector<char> buffer;
  uint32_t number;
  const bool numeric = absl::SimpleAtoi(user, &number);
  const bool found = FindEntry(
      [&](passwd* e, char* b, size_t n, passwd** out) {
        return numeric ? getpwuid_r(static_cast<uid_t>(number), e, b, n, out)
                       : getpwnam_r(user.c_str(), e, b, n, out);
      },
      &entry, buffer);
  if (!found) {
    return absl::NotFoundError(absl::StrCat("--user \"", user, "\": no such user"));
  }
  return UserIdentity{entry.pw_name, entry.pw_uid, entry.pw_gid};
}

absl::StatusOr<gid_t> LookUpGroup(const std::string& name) {
  group entry;
  std::vector<char> buffer;
  uint32_t number;
  const bool numeric = absl::SimpleAtoi(name, &number);
  const bool found = FindEntry(
      [&](group* e, char* b, size_t n, group** out) {
        return numeric ? getgrgid_r(static_cast<gid_t>(number), e, b, n, out)
                       : getgrnam_r(name.c_str(), e, b, n, out);
      },
      &entry, buffer);
  if (!found) {
    return absl::NotFoundError(absl::StrCat("--socket-group \"", name, "\": no such group"));
  }
  return entry.gr_gid;
}

absl::Status CheckCanSwitchTo(const UserIdentity& user) {
  uid_t ruid, euid, suid;
  getresuid(&ruid, &euid, &suid);
  if (euid == 0 || (ruid == user.uid && euid == user.uid && suid == user.uid)) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(
      absl::StrCat("--user ", user.name, ": switching users needs root and torchmond runs as uid ",
                   euid, " (drop --user, or start it as root)"));
}

absl::Status DropPrivileges(const UserIdentity& user) {
  uid_t ruid, euid, suid;
  getresuid(&ruid, &euid, &suid);
  if (ruid == user.uid && euid == user.uid && suid == user.uid) return absl::OkStatus();
  if (absl::Status s = CheckCanSwitchTo(user); !s.ok()) return s;
  auto failed = [&](const char* what) {
    return absl::InternalError(
        absl::StrCat("--user ", user.name, ": ", what, " failed: ", std::strerror(errno)));
  };
  // Groups first: once the user is switched, they can no longer be changed.
  if (initgroups(user.name.c_str(), user.gid) != 0) return failed("initgroups");
  if (setresgid(user.gid, user.gid, user.gid) != 0) return failed("setresgid");
  if (setresuid(user.uid, user.uid, user.uid) != 0) return failed("setresuid");
  // A switch that silently left a way back to root is worse than none.
  if (user.uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
    return absl::InternalError(
        absl::StrCat("--user ", user.name, ": root could be regained after the switch"));
  }
  return absl::OkStatus();
}

}  // namespace torchmon::server

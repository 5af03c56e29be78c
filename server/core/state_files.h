// The files of the daemon's state directory (--state-dir), as the state
// store and the push queues on disk (server/push/spool.h) both write, read
// and set aside theirs. POSIX; no locking of its own.
#ifndef TORCHMON_SERVER_CORE_STATE_FILES_H_
#define TORCHMON_SERVER_CORE_STATE_FILES_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace torchmon::server::state {

// Where files that cannot be used go, in the state directory.
inline constexpr char kSkippedDir[] = "skipped";

inline std::string Errno(absl::string_view what, int err) {
  return absl::StrCat(what, ": ", std::strerror(err));
}

inline absl::Status ErrnoStatus(absl::string_view what, int err) {
  if (err == EACCES || err == EPERM || err == EROFS) {
    return absl::PermissionDeniedError(Errno(what, err));
  }
  return absl::InternalError(Errno(what, err));
}

inline bool WriteAll(int fd, const char* data, size_t n, int* err) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      *err = errno;
      return false;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Writes `bytes` as `path`, whole: into `tmp`, fsync()ed if `sync`, then
// renamed over `path`, so that `path` is never half written. A failure
// leaves no `tmp` behind. Returns 0, or the errno that failed it.
inline int WriteFileWhole(const std::string& tmp, const std::string& path, absl::string_view bytes,
                          bool sync) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  int err = fd < 0 ? errno : 0;
  if (err == 0) WriteAll(fd, bytes.data(), bytes.size(), &err);
  if (err == 0 && sync && ::fsync(fd) != 0) err = errno;
  if (fd >= 0) ::close(fd);
  if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
  if (err != 0) ::unlink(tmp.c_str());
  return err;
}

// fsync()s a directory, so that the names made in it are on disk too.
inline bool SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok;
}

// Moves `path` into `state_dir`'s skipped folder as `name`.<seconds now>;
// returns where it went, or "" if it could not be moved.
inline std::string MoveToSkipped(const std::string& state_dir, const std::string& path,
                                 absl::string_view name) {
  const std::string skipped = absl::StrCat(state_dir, "/", kSkippedDir);
  ::mkdir(skipped.c_str(), 0750);
  std::string to = absl::StrCat(skipped, "/", name, ".", absl::ToUnixSeconds(absl::Now()));
  return ::rename(path.c_str(), to.c_str()) == 0 ? to : std::string();
}

// A file's bytes, mapped read-only: a snapshot of a long history is
// hundreds of MB, which read() would copy into as many freshly zeroed pages
// (at 100k series of full history, half of a restore's time went to the
// kernel clearing them). The page cache's pages are mapped as they are.
// The directory is the daemon's own (flock()ed): nothing truncates a file
// while it is mapped.
class FileBytes {
 public:
  FileBytes() = default;
  FileBytes(FileBytes&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  FileBytes& operator=(FileBytes&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~FileBytes() {
    if (data_ != nullptr) ::munmap(data_, size_);
  }
  static absl::StatusOr<FileBytes> Read(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(path, errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus(path, err);
    }
    FileBytes out;
    if (st.st_size > 0) {
      void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ,
                       MAP_PRIVATE | MAP_POPULATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        return ErrnoStatus(path, err);
      }
      out.data_ = p;
      out.size_ = static_cast<size_t>(st.st_size);
    }
    ::close(fd);
    return out;
  }
  absl::string_view view() const { return {static_cast<const char*>(data_), size_}; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace torchmon::server::state

#endif  // TORCHMON_SERVER_CORE_STATE_FILES_H_

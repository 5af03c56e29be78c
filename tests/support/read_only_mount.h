// A directory made read-only by binding it onto itself and remounting the
// bind read-only, as a filesystem the kernel remounted read-only after
// errors is (EROFS, for root too). Needs root, as CI is.
#ifndef TORCHMON_TESTS_SUPPORT_READ_ONLY_MOUNT_H_
#define TORCHMON_TESTS_SUPPORT_READ_ONLY_MOUNT_H_

#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

namespace torchmon::testing {

class ReadOnlyMount {
 public:
  // `dir` bound onto itself, writable until SetWritable(false); null, with
  // why, where no bind mount may be made (not root).
  static std::unique_ptr<ReadOnlyMount> Bind(const std::string& dir, std::string* why) {
    if (::mount(dir.c_str(), dir.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      *why = std::string("a bind mount needs root: ") + std::strerror(errno);
      return nullptr;
    }
    return std::unique_ptr<ReadOnlyMount>(new ReadOnlyMount(dir));
  }
  ~ReadOnlyMount() { ::umount2(dir_.c_str(), MNT_DETACH); }
  ReadOnlyMount(const ReadOnlyMount&) = delete;
  ReadOnlyMount& operator=(const ReadOnlyMount&) = delete;

  // Remounts the bind read-only or read-write; false with errno.
  bool SetWritable(bool writable) {
    const unsigned long flags = MS_BIND | MS_REMOUNT | (writable ? 0 : MS_RDONLY);
    return ::mount(nullptr, dir_.c_str(), nullptr, flags, nullptr) == 0;
  }

 private:
  explicit ReadOnlyMount(std::string dir) : dir_(std::move(dir)) {}
  const std::string dir_;
};

}  // namespace torchmon::testing

#endif  // TORCHMON_TESTS_SUPPORT_READ_ONLY_MOUNT_H_

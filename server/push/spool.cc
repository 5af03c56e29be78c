#include "server/push/spool.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "server/core/state_files.h"
#include "server/core/state_wire.h"

namespace torchmon::server {
namespace {

constexpr char kRequestMagic[8] = {'T', 'M', 'P', 'U', 'S', 'H', '\0', '\1'};
constexpr char kMarkMagic[8] = {'T', 'M', 'P', 'U', 'B', 'L', '\0', '\1'};
constexpr char kPublished[] = "published";
constexpr char kEndpointFile[] = "endpoint";
constexpr char kTmpPrefix[] = ".tmp-";

// The bytes of a file with a check: magic, check of the rest, the rest.
std::string Sealed(const char (&magic)[8], const std::string& rest) {
  std::string out(magic, 8);
  state::Writer w(out);
  w.Fixed64(state::Check(rest));
  out.append(rest);
  return out;
}

// The rest of a file Sealed wrote, or nullopt if it is not one whole.
std::optional<absl::string_view> Unsealed(const char (&magic)[8], absl::string_view bytes) {
  if (bytes.size() < 16 || bytes.substr(0, 8) != absl::string_view(magic, 8)) return std::nullopt;
  state::Reader h(bytes.substr(8, 8));
  const uint64_t check = h.Fixed64("check");
  const absl::string_view rest = bytes.substr(16);
  if (!h.ok() || state::Check(rest) != check) return std::nullopt;
  return rest;
}

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const absl::string_view name = e->d_name;
      if (name != "." && name != "..") out.emplace_back(name);
    }
    ::closedir(d);
  }
  return out;
}

// A request file's name: "<position>-<seq>", 16 and 8 hex digits.
bool ParseRequestName(absl::string_view name, uint64_t* position, uint32_t* seq) {
  std::vector<absl::string_view> parts = absl::StrSplit(name, '-');
  uint64_t s = 0;
  if (parts.size() != 2 || parts[0].size() != 16 || parts[1].size() != 8 ||
      !absl::SimpleHexAtoi(parts[0], position) || !absl::SimpleHexAtoi(parts[1], &s)) {
    return false;
  }
  *seq = static_cast<uint32_t>(s);
  return true;
}

void RemoveTree(const std::string& path) {
  for (const std::string& name : Entries(path)) ::unlink(absl::StrCat(path, "/", name).c_str());
  ::rmdir(path.c_str());
}

}  // namespace

std::string SpoolQueueName(const PushEndpoint& endpoint) {
  const std::string name = PushProtocolName(endpoint.protocol);
  return absl::StrFormat("%s-%016x", name,
                         state::Check(absl::StrCat(name, " ", endpoint.url.text)));
}

PushSpool::PushSpool(std::string state_dir, bool sync, LogFn log, DaemonStats& stats)
    : state_dir_(std::move(state_dir)),
      dir_(state_dir_ + "/push"),
      sync_(sync),
      log_(std::move(log)),
      stats_(stats) {}

absl::StatusOr<std::unique_ptr<PushSpool>> PushSpool::Open(
    const std::string& state_dir, const std::vector<PushEndpoint>& endpoints, bool sync, LogFn log,
    DaemonStats& stats) {
  std::unique_ptr<PushSpool> spool(new PushSpool(state_dir, sync, std::move(log), stats));
  const std::string& dir = spool->dir_;
  // A folder that cannot be made (a state directory that cannot be
  // written) is made again by the first write that finds it missing; until
  // then the queues are in memory only, as when any write fails.
  if (::mkdir(dir.c_str(), 0750) != 0 && errno != EEXIST) {
    spool->Failed(absl::StrCat("making ", dir), errno);
  }
  std::map<std::string, size_t> wanted;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const std::string name = SpoolQueueName(endpoints[i]);
    const std::string path = absl::StrCat(dir, "/", name);
    spool->queues_.push_back(path);
    wanted.emplace(name, i);
    if (::mkdir(path.c_str(), 0750) == 0) {
      spool->WriteFile(absl::StrCat(path, "/", kEndpointFile),
                       absl::StrCat(endpoints[i].url.text, "\n"));
    } else if (errno != EEXIST) {
      spool->Failed(absl::StrCat("making ", path), errno);
    }
  }
  for (const std::string& name : Entries(dir)) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (name == kPublished) {
      absl::StatusOr<state::FileBytes> bytes = state::FileBytes::Read(path);
      std::optional<absl::string_view> rest;
      if (bytes.ok() && (rest = Unsealed(kMarkMagic, bytes->view()))) {
        state::Reader r(*rest);
        const uint64_t position = r.Fixed64("position");
        if (r.ok() && r.done()) {
          spool->published_ = position;
          continue;
        }
      }
      // Without a mark, nothing is published again at this start: what
      // the queues hold is sent, nothing more.
      spool->SetAside(path, "push-published", "not a whole mark of this version");
      continue;
    }
    if (absl::StartsWith(name, kTmpPrefix)) {
      ::unlink(path.c_str());
      continue;
    }
    if (wanted.count(name) != 0) continue;
    // A queue of an endpoint no longer configured.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    absl::StatusOr<state::FileBytes> endpoint =
        state::FileBytes::Read(absl::StrCat(path, "/", kEndpointFile));
    const std::string url = endpoint.ok() ? std::string(endpoint->view()) : "";
    size_t requests = 0;
    for (const std::string& file : Entries(path)) {
      uint64_t position;
      uint32_t seq;
      if (ParseRequestName(file, &position, &seq)) ++requests;
    }
    RemoveTree(path);
    if (spool->log_) {
      spool->log_(absl::StrCat("push: removed the queue of ", std::string(absl::StripAsciiWhitespace(url)),
                               ", no longer an endpoint: ", requests, " requests unsent"));
    }
  }
  return spool;
}

std::vector<PushSpool::Queued> PushSpool::Load(size_t endpoint) {
  const std::string& dir = queues_[endpoint];
  std::map<std::pair<uint64_t, uint32_t>, std::string> files;
  for (const std::string& name : Entries(dir)) {
    const std::string path = absl::StrCat(dir, "/", name);
    uint64_t position;
    uint32_t seq;
    if (name == kEndpointFile) continue;
    if (absl::StartsWith(name, kTmpPrefix)) {
      ::unlink(path.c_str());
    } else if (!ParseRequestName(name, &position, &seq)) {
      SetAside(path, absl::StrCat("push-", name), "not a queued request's name");
    } else if (!published_.has_value() || position > *published_) {
      // Its pass was never handed to the sender: the restore closes its
      // windows again.
      ::unlink(path.c_str());
    } else {
      files.emplace(std::make_pair(position, seq), name);
    }
  }
  std::vector<Queued> out;
  for (const auto& [key, name] : files) {
    const std::string path = absl::StrCat(dir, "/", name);
    absl::StatusOr<state::FileBytes> bytes = state::FileBytes::Read(path);
    std::optional<absl::string_view> rest;
    if (!bytes.ok() || !(rest = Unsealed(kRequestMagic, bytes->view()))) {
      SetAside(path, absl::StrCat("push-", name),
               "its check does not match its content (a torn or damaged file)");
      continue;
    }
    state::Reader r(*rest);
    const int64_t end_ms = r.Signed("end");
    const int64_t queued_ms = r.Signed("queued");
    EncodedRequest request;
    request.windows = r.Varint("windows");
    request.body = r.String("body");
    if (!r.ok() || !r.done()) {
      SetAside(path, absl::StrCat("push-", name), r.ok() ? "bytes after the request" : r.status().ToString());
      continue;
    }
    if (out.empty() || out.back().position != key.first || out.back().end_ms != end_ms) {
      out.push_back(Queued{key.first, end_ms, queued_ms, {}, {}});
    }
    out.back().requests.push_back(std::move(request));
    out.back().files.push_back(path);
  }
  return out;
}

std::string PushSpool::Write(size_t endpoint, uint64_t position, uint32_t seq, int64_t end_ms,
                             int64_t queued_ms, const EncodedRequest& request) {
  std::string rest;
  state::Writer w(rest);
  w.Signed(end_ms);
  w.Signed(queued_ms);
  w.Varint(request.windows);
  w.String(request.body);
  const std::string path =
      absl::StrFormat("%s/%016x-%08x", queues_[endpoint], position, seq);
  return WriteFile(path, Sealed(kRequestMagic, rest)) ? path : std::string();
}

void PushSpool::MarkPublished(uint64_t position) {
  std::string rest;
  state::Writer(rest).Fixed64(position);
  if (WriteFile(absl::StrCat(dir_, "/", kPublished), Sealed(kMarkMagic, rest))) {
    published_ = position;
  }
}

void PushSpool::Remove(const std::string& file) {
  if (file.empty()) return;
  if (::unlink(file.c_str()) != 0 && errno != ENOENT) Failed(absl::StrCat("removing ", file), errno);
}

bool PushSpool::WriteFile(const std::string& path, const std::string& bytes) {
  // Written whole under a temporary name, then renamed: a file of the
  // queue is never half there.
  const size_t slash = path.rfind('/');
  const std::string tmp =
      absl::StrCat(path.substr(0, slash + 1), kTmpPrefix, path.substr(slash + 1));
  int err = state::WriteFileWhole(tmp, path, bytes, sync_);
  if (err == ENOENT) {
    // Its folder could not be made at the start: made now.
    ::mkdir(dir_.c_str(), 0750);
    ::mkdir(path.substr(0, slash).c_str(), 0750);
    err = state::WriteFileWhole(tmp, path, bytes, sync_);
  }
  if (err == 0 && sync_ && !state::SyncDir(path.substr(0, slash))) err = errno;
  if (err != 0) {
    Failed(absl::StrCat("writing ", path), err);
    return false;
  }
  if (failing_.exchange(false, std::memory_order_relaxed) && log_) {
    log_(absl::StrCat("push: writing the queues in ", dir_, " again"));
  }
  return true;
}

void PushSpool::Failed(const std::string& what, int err) {
  stats_.state_write_errors.fetch_add(1, std::memory_order_relaxed);
  // Said once for a run of failures (a full disk fails every write).
  if (!failing_.exchange(true, std::memory_order_relaxed) && log_) {
    log_(absl::StrCat("push: ", what, ": ", std::strerror(err),
                      "; the queues are kept in memory only until writes succeed again"));
  }
}

void PushSpool::SetAside(const std::string& path, const std::string& name, const std::string& why) {
  const std::string to = state::MoveToSkipped(state_dir_, path, name);
  if (to.empty()) ::unlink(path.c_str());
  stats_.state_skipped.fetch_add(1, std::memory_order_relaxed);
  if (log_) {
    log_(absl::StrCat("state: skipped ", path, ": ", why,
                      to.empty() ? " (removed)" : absl::StrCat(" (moved to ", to, ")")));
  }
}

}  // namespace torchmon::server

#include "server/push/pusher.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace torchmon::server {

absl::Status CheckPushOptions(const PushOptions& options) {
  if (options.endpoints.size() > static_cast<size_t>(DaemonStats::kMaxExporters)) {
    return absl::InvalidArgumentError(absl::StrCat("at most ", DaemonStats::kMaxExporters,
                                                   " push endpoints (--remote-write-url, "
                                                   "--otlp-endpoint); ",
                                                   options.endpoints.size(), " given"));
  }
  for (const PushEndpoint& e : options.endpoints) {
    const std::pair<const char*, const std::string*> files[] = {
        {"bearer_token_file", &e.bearer_token_file}, {"basic_auth_password_file", &e.basic_auth_password_file},
        {"ca_file", &e.ca_file},                     {"cert_file", &e.cert_file},
        {"key_file", &e.key_file}};
    for (const auto& [option, path] : files) {
      if (path->empty() || ::access(path->c_str(), R_OK) == 0) continue;
      return absl::FailedPreconditionError(
          absl::StrCat(e.protocol == PushProtocol::kRemoteWrite ? "--remote-write-url " : "--otlp-endpoint ",
                       e.url.text, ": ", option, " ", *path, " cannot be read: ", std::strerror(errno)));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Pusher>> Pusher::Start(const PushOptions& options, DaemonStats& stats,
                                                      const Clock& clock, LogFn log,
                                                      std::string version,
                                                      std::unique_ptr<PushSpool> spool) {
  if (absl::Status s = CheckPushOptions(options); !s.ok()) return s;
  return std::unique_ptr<Pusher>(new Pusher(options, stats, clock, std::move(log),
                                            std::move(version), std::move(spool)));
}

Pusher::Pusher(const PushOptions& options, DaemonStats& stats, const Clock& clock, LogFn log,
               std::string version, std::unique_ptr<PushSpool> spool)
    : options_(options),
      stats_(stats),
      log_(std::move(log)),
      version_(std::move(version)),
      spool_(std::move(spool)),
      clock_(clock) {
  for (size_t i = 0; i < options_.endpoints.size(); ++i) {
    const PushEndpoint& e = options_.endpoints[i];
    DaemonStats::Exporter& slot = stats_.exporters[i];
    slot.protocol.store(PushProtocolName(e.protocol));
    slot.endpoint = e.url.text;
    slot.enabled.store(true, std::memory_order_release);
    exporters_.push_back(std::make_unique<Exporter>(e, options_, slot, clock, log_, spool_.get()));
    slots_.push_back(&slot);
    if (spool_ == nullptr) continue;
    // What the last daemon left queued goes first, within today's bounds.
    size_t ends = 0, windows = 0;
    for (PushSpool::Queued& q : spool_->Load(i)) {
      auto window = EncodedWindow::Of(q.end_ms, std::move(q.requests));
      ++ends;
      windows += window->windows;
      exporters_.back()->Enqueue(std::move(window), std::move(q.files), q.queued_ms);
    }
    if (ends != 0 && log_) {
      log_(absl::StrCat("push to ", e.url.text, ": ", ends, " window end(s) (", windows,
                        " series windows) queued from ", spool_->dir()));
    }
  }
  thread_ = std::thread([this] { Run(); });
}

Pusher::~Pusher() {
  if (thread_.joinable()) Finish();
}

void Pusher::Publish(std::vector<ClosedWindow> windows, uint64_t position) {
  if (windows.empty()) return;
  size_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    if (inbox_.size() >= std::max<size_t>(options_.queue_windows, 1)) {
      dropped = inbox_.front().windows.size();
      inbox_.pop_front();
      for (DaemonStats::Exporter* slot : slots_) {
        slot->dropped[DaemonStats::kExportQueueFull].fetch_add(dropped, std::memory_order_relaxed);
      }
    }
    inbox_.push_back(Pass{std::move(windows), position});
  }
  if (dropped != 0) {
    log_(absl::StrCat("push: encoding is ", options_.queue_windows,
                      " passes behind; dropped the oldest pass, ", dropped, " series windows"));
  }
}

void Pusher::AwaitWritten() {
  absl::MutexLock lock(&mu_);
  auto written = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return inbox_.empty() && !encoding_;
  };
  mu_.Await(absl::Condition(&written));
}

void Pusher::Encode(Pass& pass) {
  std::vector<ClosedWindow>& windows = pass.windows;
  // One pass may close windows of several ends (series of different
  // window lengths, a timer that was late): each end is queued whole, in
  // order.
  std::stable_sort(windows.begin(), windows.end(),
                   [](const ClosedWindow& a, const ClosedWindow& b) { return a.end_ms < b.end_ms; });
  bool want[2] = {false, false};
  for (const PushEndpoint& e : options_.endpoints) want[static_cast<int>(e.protocol)] = true;
  // With a spool, every endpoint's files of the whole pass are written and
  // the pass marked published before any of it is handed to a sender.
  struct Queued {
    size_t exporter;
    std::shared_ptr<const EncodedWindow> window;
    std::vector<std::string> files;
  };
  std::vector<Queued> queued;
  std::vector<uint32_t> seq(exporters_.size(), 0);
  const int64_t now_ms = clock_.NowMs();
  for (size_t begin = 0; begin < windows.size();) {
    size_t end = begin;
    while (end < windows.size() && windows[end].end_ms == windows[begin].end_ms) ++end;
    const absl::Span<const ClosedWindow> group(windows.data() + begin, end - begin);
    std::shared_ptr<const EncodedWindow> encoded[2];
    for (int p = 0; p < 2; ++p) {
      if (!want[p]) continue;
      encoded[p] = EncodedWindow::Of(
          windows[begin].end_ms,
          static_cast<PushProtocol>(p) == PushProtocol::kRemoteWrite
              ? EncodeRemoteWrite(group, options_.windows_per_request)
              : EncodeOtlp(group, options_.windows_per_request, version_));
    }
    for (size_t i = 0; i < exporters_.size(); ++i) {
      std::shared_ptr<const EncodedWindow>& window =
          encoded[static_cast<int>(exporters_[i]->endpoint().protocol)];
      if (spool_ == nullptr) {
        exporters_[i]->Enqueue(window);
        continue;
      }
      std::vector<std::string> files;
      for (const EncodedRequest& r : window->requests) {
        files.push_back(spool_->Write(i, pass.position, seq[i]++, window->end_ms, now_ms, r));
      }
      queued.push_back(Queued{i, window, std::move(files)});
    }
    begin = end;
  }
  if (spool_ == nullptr) return;
  spool_->MarkPublished(pass.position);
  for (Queued& q : queued) exporters_[q.exporter]->Enqueue(std::move(q.window), std::move(q.files), now_ms);
}

void Pusher::Run() {
  for (;;) {
    Pass pass;
    {
      absl::MutexLock lock(&mu_);
      encoding_ = false;
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return finishing_ || !inbox_.empty();
      };
      mu_.Await(absl::Condition(&ready));
      if (inbox_.empty()) return;  // finishing, and everything encoded
      pass = std::move(inbox_.front());
      inbox_.pop_front();
      encoding_ = true;
    }
    Encode(pass);
  }
}

void Pusher::Finish() {
  const absl::Time deadline = absl::Now() + absl::Milliseconds(options_.flush_timeout_ms);
  {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    finishing_ = true;
  }
  thread_.join();
  for (const auto& exporter : exporters_) exporter->Finish(deadline);
}

}  // namespace torchmon::server

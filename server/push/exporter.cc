#include "server/push/exporter.h"

#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"

namespace torchmon::server {

PushOutcome OutcomeOf(int status) {
  if (status >= 200 && status < 300) return PushOutcome::kSent;
  if (status == 0 || status == 429 || (status >= 500 && status < 600)) return PushOutcome::kRetry;
  return PushOutcome::kRejected;
}

int64_t RetryDelayMs(int failures, absl::string_view retry_after, int64_t now_ms,
                     const PushOptions& options) {
  retry_after = absl::StripAsciiWhitespace(retry_after);
  if (!retry_after.empty()) {
    const int64_t cap = options.max_retry_after_ms;
    // A wait of more than the cap's seconds is the cap, before it is
    // multiplied into milliseconds: a receiver's "Retry-After:
    // 9223372036854775807" (or a date in the year 9999) is "later than we
    // wait", not a signed overflow.
    const int64_t cap_seconds = cap / 1000 + 1;
    int64_t seconds = 0;
    int64_t ms = -1;
    if (absl::SimpleAtoi(retry_after, &seconds) && seconds >= 0) {
      ms = seconds >= cap_seconds ? cap : seconds * 1000;
    } else {
      // An HTTP date: "Sun, 06 Nov 1994 08:49:37 GMT".
      struct tm tm {};
      const std::string text(retry_after);
      const char* end = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S GMT", &tm);
      if (end != nullptr && *end == '\0') {
        // Seconds, within ±2^57 for any int tm_year: no overflow in the
        // difference, and milliseconds only of a date within the cap.
        const int64_t at = timegm(&tm);
        const int64_t now = now_ms / 1000;
        if (at - now >= cap_seconds) {
          ms = cap;
        } else {
          ms = at <= now ? 0 : at * 1000 - now_ms;  // a date gone by: at once
        }
      }
    }
    if (ms >= 0) return std::min(ms, cap);
  }
  int64_t delay = options.min_backoff_ms;
  for (int i = 1; i < failures && delay < options.max_backoff_ms; ++i) delay *= 2;
  return std::min(delay, options.max_backoff_ms);
}

Exporter::Exporter(PushEndpoint endpoint, const PushOptions& options, DaemonStats::Exporter& stats,
                   const Clock& clock, LogFn log, PushSpool* spool)
    : endpoint_(std::move(endpoint)),
      options_(options),
      stats_(stats),
      clock_(clock),
      log_(std::move(log)),
      spool_(spool) {
  content_type_ = "application/x-protobuf";
  if (endpoint_.protocol == PushProtocol::kRemoteWrite) {
    headers_ = {{"Content-Encoding", "snappy"}, {"X-Prometheus-Remote-Write-Version", "0.1.0"}};
  } else {
    headers_ = {{"Content-Encoding", "gzip"}};
  }
  cancel_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  thread_ = std::thread([this] { Run(); });
}

Exporter::~Exporter() {
  if (thread_.joinable()) Finish(absl::Now());
  if (cancel_fd_ >= 0) ::close(cancel_fd_);
}

void Exporter::PublishQueueLocked() {
  stats_.queued.store(static_cast<int64_t>(queue_.size()), std::memory_order_relaxed);
  stats_.oldest_queued_ms.store(queue_.empty() ? 0 : queue_.front().queued_ms,
                                std::memory_order_relaxed);
}

void Exporter::RemoveFile(const Entry& entry, size_t i) const {
  if (spool_ != nullptr && i < entry.files.size()) spool_->Remove(entry.files[i]);
}

size_t Exporter::WindowsLeft(const Entry& entry) {
  size_t windows = 0;
  for (size_t i = entry.next; i < entry.window->requests.size(); ++i) {
    windows += entry.window->requests[i].windows;
  }
  return windows;
}

size_t Exporter::DropLocked(const Entry& entry, DaemonStats::ExportDropReason reason) {
  const size_t windows = WindowsLeft(entry);
  for (size_t i = entry.next; i < entry.window->requests.size(); ++i) RemoveFile(entry, i);
  stats_.dropped[reason].fetch_add(windows, std::memory_order_relaxed);
  queued_bytes_ -= entry.window->bytes;
  return windows;
}

void Exporter::Enqueue(std::shared_ptr<const EncodedWindow> window,
                       std::vector<std::string> files, int64_t queued_ms) {
  size_t dropped = 0, dropped_ends = 0;
  {
    absl::MutexLock lock(&mu_);
    if (finishing_) {
      // With a spool its files stay for the next daemon.
      if (spool_ == nullptr) {
        stats_.dropped[DaemonStats::kExportShutdown].fetch_add(window->windows,
                                                               std::memory_order_relaxed);
      }
      return;
    }
    // Room for the new window: the oldest that is not on the wire go.
    const size_t first_droppable = sending_ ? 1 : 0;
    while (queue_.size() > first_droppable &&
           (queue_.size() >= std::max<size_t>(options_.queue_windows, 1) ||
            queued_bytes_ + window->bytes > options_.queue_bytes)) {
      auto victim = queue_.begin() + static_cast<std::ptrdiff_t>(first_droppable);
      dropped += DropLocked(*victim, DaemonStats::kExportQueueFull);
      ++dropped_ends;
      queue_.erase(victim);
      if (first_droppable == 0) failures_ = 0;  // the request retried is gone
    }
    queued_bytes_ += window->bytes;
    queue_.push_back(
        Entry{std::move(window), 0, queued_ms != 0 ? queued_ms : clock_.NowMs(), std::move(files)});
    PublishQueueLocked();
  }
  if (dropped_ends != 0) {
    log_(absl::StrCat("push to ", endpoint_.url.text, ": the queue is full (",
                      options_.queue_windows, " windows); dropped the oldest ", dropped_ends,
                      " window end(s), ", dropped, " series windows"));
  }
}

void Exporter::Run() {
  const bool remote_write = endpoint_.protocol == PushProtocol::kRemoteWrite;
  const std::string name = absl::StrCat(PushProtocolName(endpoint_.protocol), " ", endpoint_.url.text);
  mu_.Lock();
  for (;;) {
    // Waits for a window, a retry falling due, or Finish (and then for
    // the queue to empty or the deadline to pass).
    bool done = false;
    for (;;) {
      const absl::Time now = absl::Now();
      if (finishing_ && (queue_.empty() || now >= finish_deadline_)) {
        done = true;
        break;
      }
      if (!queue_.empty() && now >= next_attempt_) break;
      absl::Time until = queue_.empty() ? absl::InfiniteFuture() : next_attempt_;
      if (finishing_) until = std::min(until, finish_deadline_);
      const bool finishing_seen = finishing_;
      const size_t queued_seen = queue_.size();
      auto changed = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return finishing_ != finishing_seen || queue_.size() != queued_seen;
      };
      mu_.AwaitWithDeadline(absl::Condition(&changed), until);
    }
    if (done) break;
    const absl::Time now = absl::Now();
    std::shared_ptr<const EncodedWindow> window = queue_.front().window;
    const EncodedRequest& request = window->requests[queue_.front().next];
    PushEndpoint endpoint = endpoint_;
    if (finishing_) {
      endpoint.timeout_ms = std::max<int64_t>(
          1, std::min(endpoint.timeout_ms, absl::ToInt64Milliseconds(finish_deadline_ - now)));
    }
    sending_ = true;
    mu_.Unlock();

    const int64_t connections = session_.connections();
    auto answer =
        session_.Post(endpoint, HttpRequest{content_type_, headers_, request.body, cancel_fd_});
    stats_.connections.fetch_add(static_cast<uint64_t>(session_.connections() - connections),
                                 std::memory_order_relaxed);
    const int status = answer.ok() ? answer->status : 0;
    PushOutcome outcome = OutcomeOf(status);
    std::string message;
    if (outcome == PushOutcome::kSent && !remote_write && !answer->body.empty()) {
      // OTLP's partial success: the receiver took the request but refused
      // some points. Said in the log; the windows count as sent.
      opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceResponse response;
      if (response.ParseFromString(answer->body) && response.has_partial_success() &&
          response.partial_success().rejected_data_points() != 0) {
        message = absl::StrCat("push to ", name, ": the receiver refused ",
                               response.partial_success().rejected_data_points(),
                               " data points of a request: ",
                               response.partial_success().error_message());
      }
    }
    if (!answer.ok()) {
      message = std::string(answer.status().message());
    } else if (outcome != PushOutcome::kSent) {
      message = absl::StrCat("HTTP ", status, ": ",
                             absl::StripAsciiWhitespace(answer->body.substr(0, 300)));
    }

    mu_.Lock();
    sending_ = false;
    // The front entry is still the one sent: only this thread removes it
    // while sending_ is set (Enqueue may have removed others behind it).
    Entry& head = queue_.front();
    switch (outcome) {
      case PushOutcome::kSent:
        stats_.sent_windows.fetch_add(request.windows, std::memory_order_relaxed);
        stats_.sent_requests.fetch_add(1, std::memory_order_relaxed);
        stats_.sent_bytes.fetch_add(request.body.size(), std::memory_order_relaxed);
        if (failures_ != 0) {
          log_(absl::StrCat("push to ", name, ": sending again after ", failures_,
                            " failed attempt(s)"));
        }
        failures_ = 0;
        rejected_in_a_row_ = 0;
        next_attempt_ = absl::InfinitePast();
        RemoveFile(head, head.next++);
        if (!message.empty()) log_(message);
        break;
      case PushOutcome::kRejected:
        stats_.dropped[DaemonStats::kExportRejected].fetch_add(request.windows,
                                                               std::memory_order_relaxed);
        // The first refusal of a run, then every 100th: a receiver that
        // refuses everything (a wrong tenant) costs the log a line per 100
        // requests, not one each.
        if (++rejected_in_a_row_ == 1 || rejected_in_a_row_ % 100 == 0) {
          log_(absl::StrCat("push to ", name, ": the receiver refused ",
                            rejected_in_a_row_ == 1 ? "a request" : absl::StrCat(rejected_in_a_row_, " requests in a row, the last"),
                            " of ", request.windows, " series windows, dropped: ", message));
        }
        failures_ = 0;
        next_attempt_ = absl::InfinitePast();
        RemoveFile(head, head.next++);
        break;
      case PushOutcome::kRetry: {
        stats_.retried.fetch_add(1, std::memory_order_relaxed);
        ++failures_;
        const int64_t delay = RetryDelayMs(failures_, answer.ok() ? answer->retry_after : "",
                                           clock_.NowMs(), options_);
        next_attempt_ = absl::Now() + absl::Milliseconds(delay);
        // The first failure of a run, then every 10th: an endpoint down
        // for an hour costs the log a few lines, not thousands.
        if (failures_ == 1 || failures_ % 10 == 0) {
          log_(absl::StrCat("push to ", name, ": attempt ", failures_, " failed (", message,
                            "); trying again in ", delay, " ms"));
        }
        break;
      }
    }
    if (head.next == window->requests.size()) {
      queued_bytes_ -= window->bytes;
      queue_.pop_front();
    }
    PublishQueueLocked();
  }
  // Finishing: what is left is dropped, or with a spool kept on disk for
  // the next daemon.
  stopped_ = true;
  size_t left = 0;
  for (const Entry& entry : queue_) {
    left += spool_ == nullptr ? DropLocked(entry, DaemonStats::kExportShutdown) : WindowsLeft(entry);
  }
  const size_t ends = queue_.size();
  queue_.clear();
  queued_bytes_ = 0;
  PublishQueueLocked();
  mu_.Unlock();
  if (ends != 0) {
    log_(spool_ == nullptr
             ? absl::StrCat("push to ", name, ": stopping with ", ends,
                            " window end(s) unsent; dropped ", left, " series windows")
             : absl::StrCat("push to ", name, ": stopping with ", ends, " window end(s) unsent (",
                            left, " series windows), kept in ", spool_->dir(),
                            " for the next start"));
  }
}

void Exporter::Finish(absl::Time deadline) {
  {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    finishing_ = true;
    finish_deadline_ = deadline;
    // A request on the wire at the deadline is cut there: the thread, in
    // HttpPost, is told by the eventfd.
    auto stopped = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopped_; };
    if (!mu_.AwaitWithDeadline(absl::Condition(&stopped), deadline) && cancel_fd_ >= 0) {
      const uint64_t one = 1;
      if (::write(cancel_fd_, &one, sizeof(one)) < 0) {
        // Cannot fail for an eventfd below its maximum; the request's own
        // timeout ends it then.
      }
    }
  }
  thread_.join();
}

}  // namespace torchmon::server

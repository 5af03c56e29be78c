// Fans items (closed windows, events) out to watchers. Each subscriber has a
// bounded queue: a slow watcher loses its oldest items (counted), it never
// slows the publisher or other watchers.
//
// Thread-safe. `notify` callbacks run on the publishing thread while the
// broadcaster's lock is held: they must be quick and must not call back into
// the Broadcaster. After Unsubscribe returns, `notify` is never called again.
#ifndef TORCHMON_SERVER_CORE_BROADCASTER_H_
#define TORCHMON_SERVER_CORE_BROADCASTER_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace torchmon::server {

// Items queued in a broadcaster's subscriptions, for waiting until they are
// taken. Counting is one atomic operation (publishing and taking stay
// lock-free of it); only the step to zero takes the lock, to wake waiters.
class QueuedCount {
 public:
  void Add(int64_t n) ABSL_LOCKS_EXCLUDED(mu_) {
    if (count_.fetch_add(n, std::memory_order_acq_rel) + n == 0 && n != 0) {
      // A waiter that saw a count above zero holds mu_ until it waits.
      absl::MutexLock lock(&mu_);
      zero_.SignalAll();
    }
  }
  int64_t Get() const { return count_.load(std::memory_order_acquire); }
  bool AwaitZero(absl::Time deadline) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    while (Get() != 0) {
      if (zero_.WaitWithDeadline(&mu_, deadline)) return Get() == 0;  // timed out
    }
    return true;
  }

 private:
  std::atomic<int64_t> count_{0};
  mutable absl::Mutex mu_;
  mutable absl::CondVar zero_;
};

template <typename T>
class Broadcaster {
 public:
  class Subscription {
   public:
    // The oldest queued item, if any.
    std::optional<T> Pop() ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      if (queue_.empty()) return std::nullopt;
      T item = std::move(queue_.front());
      queue_.pop_front();
      queued_->Add(-1);
      return item;
    }
    // Items this subscription lost to a full queue.
    uint64_t Dropped() const ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      return dropped_;
    }
    // True once the broadcaster closed (shutdown) and the queue is drained.
    bool Finished() const ABSL_LOCKS_EXCLUDED(mu_) {
      absl::MutexLock lock(&mu_);
      return closed_ && queue_.empty();
    }

   private:
    friend class Broadcaster;
    std::shared_ptr<QueuedCount> queued_;
    std::function<bool(const T&)> filter_;
    std::function<void()> notify_;
    size_t capacity_ = 0;
    bool counted_by_publish_ = true;
    mutable absl::Mutex mu_;
    uint64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
    std::deque<T> queue_ ABSL_GUARDED_BY(mu_);
    bool closed_ ABSL_GUARDED_BY(mu_) = false;
  };

  // Items for which `filter` is true are queued (at most `capacity`) and
  // `notify` is called. What the subscription loses to a full queue is in
  // its Dropped() and, if `counted_by_publish`, in Publish's result too.
  std::shared_ptr<Subscription> Subscribe(std::function<bool(const T&)> filter,
                                          std::function<void()> notify, size_t capacity,
                                          bool counted_by_publish = true)
      ABSL_LOCKS_EXCLUDED(mu_) {
    auto sub = std::make_shared<Subscription>();
    sub->queued_ = queued_;
    sub->filter_ = std::move(filter);
    sub->notify_ = std::move(notify);
    sub->capacity_ = capacity < 1 ? 1 : capacity;
    sub->counted_by_publish_ = counted_by_publish;
    absl::MutexLock lock(&mu_);
    if (closed_) {
      absl::MutexLock sub_lock(&sub->mu_);
      sub->closed_ = true;
    }
    subscribers_.push_back(sub);
    return sub;
  }

  void Unsubscribe(const std::shared_ptr<Subscription>& sub) ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    for (auto it = subscribers_.begin(); it != subscribers_.end(); ++it) {
      if (*it == sub) {
        subscribers_.erase(it);
        // Nobody takes what it still holds.
        absl::MutexLock sub_lock(&sub->mu_);
        queued_->Add(-static_cast<int64_t>(sub->queue_.size()));
        sub->queue_.clear();
        return;
      }
    }
  }

  // Queues `item` for every matching subscriber. Returns how many queued
  // items were discarded because a subscriber's queue was full (among the
  // subscriptions counted by Publish).
  uint64_t Publish(const T& item) ABSL_LOCKS_EXCLUDED(mu_) {
    uint64_t dropped = 0;
    absl::MutexLock lock(&mu_);
    for (const auto& sub : subscribers_) {
      if (!sub->filter_(item)) continue;
      {
        absl::MutexLock sub_lock(&sub->mu_);
        sub->queue_.push_back(item);
        if (sub->queue_.size() > sub->capacity_) {
          sub->queue_.pop_front();
          ++sub->dropped_;
          if (sub->counted_by_publish_) ++dropped;
        } else {
          queued_->Add(1);
        }
      }
      sub->notify_();
    }
    return dropped;
  }

  // Items queued for subscribers and not yet taken by them, all together.
  size_t Queued() const { return static_cast<size_t>(queued_->Get()); }

  // Waits until every subscriber has taken every item queued for it, or
  // until `deadline`. True if they have.
  bool AwaitTaken(absl::Time deadline) const { return queued_->AwaitZero(deadline); }

  // Marks every subscription closed (they finish once drained) and wakes them.
  void Close() ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    for (const auto& sub : subscribers_) {
      {
        absl::MutexLock sub_lock(&sub->mu_);
        sub->closed_ = true;
      }
      sub->notify_();
    }
  }

 private:
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::shared_ptr<Subscription>> subscribers_ ABSL_GUARDED_BY(mu_);
  // Shared with the subscriptions, which may outlive the broadcaster.
  std::shared_ptr<QueuedCount> queued_ = std::make_shared<QueuedCount>();
};

}  // namespace torchmon::server

#endif  // TORCHMON_SERVER_CORE_BROADCASTER_H_

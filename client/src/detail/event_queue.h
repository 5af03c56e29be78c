// The events a client has logged and not yet put in a batch, and the
// events it dropped, counted by name until a daemon is told.
#ifndef TORCHMON_CLIENT_DETAIL_EVENT_QUEUE_H_
#define TORCHMON_CLIENT_DETAIL_EVENT_QUEUE_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "torchmon/client.h"
#include "torchmon/v1/torchmon.pb.h"

namespace torchmon::detail {

// Converts an Event to its wire form, checking what the daemon would
// refuse (names, label keys and values, UTF-8, field count, 1 MiB encoded).
// On failure the status names the event and the problem; `out` is then
// partly written and must not be sent.
absl::Status EventToProto(const Event& event, v1::Event* out);

// Not thread-safe: ClientCore holds it under its mutex. Every event
// accepted (Push) is "queued" until it is resolved: written in a batch
// (Resolve) or dropped (DropUnsent); Pending() is true in between.
class EventQueue {
 public:
  // Drops are reported by name for at most this many names; the rest are
  // counted under kOtherEvents.
  static constexpr size_t kMaxDropNames = 1024;
  static constexpr char kOtherEvents[] = "<other events>";
  // The name an event's drop is reported under when its name is invalid.
  static constexpr char kInvalidName[] = "<invalid name>";

  explicit EventQueue(size_t max_events) : max_events_(max_events) {}

  // Queues `event` if fewer than max_events wait; false (nothing queued,
  // nothing counted) if the queue is full.
  bool Push(v1::Event&& event);
  // Counts one dropped event under `name` (at most kMaxDropNames names).
  void CountDrop(const std::string& name);

  // What one send cycle takes: the queued events, oldest first, and the
  // drop counts by name. The queue keeps counting them as queued until
  // Resolve, or Requeue gives them back.
  struct Taken {
    std::deque<v1::Event> events;
    std::vector<std::pair<std::string, uint64_t>> drops;
  };
  Taken TakeAll();
  // Puts back what a cycle took and did not write (its stream broke):
  // events at the head, in order; drop counts added to those since.
  void Requeue(Taken& taken);
  // `n` events of the queue were written in a batch.
  void Resolve(uint64_t n) { resolved_ += n; }
  // Drops every event queued and not yet written (the client stopped), and
  // the drop counts no stream will carry now; returns how many events.
  uint64_t DropUnsent();

  bool Pending() const { return queued_ != resolved_; }
  // Drop counts not yet written in a batch: counted since the last
  // TakeAll, or taken by a cycle that has not yet written them. A flush
  // waits for them as for queued events.
  bool DropsUnwritten() const { return !drops_.empty() || drops_taken_; }
  // The cycle that took the drop counts wrote them all.
  void DropsWritten() { drops_taken_ = false; }

 private:
  const size_t max_events_;
  std::deque<v1::Event> events_;
  absl::flat_hash_map<std::string, uint64_t> drops_;
  // Events accepted, and those since written or dropped.
  uint64_t queued_ = 0;
  uint64_t resolved_ = 0;
  bool drops_taken_ = false;
};

}  // namespace torchmon::detail

#endif  // TORCHMON_CLIENT_DETAIL_EVENT_QUEUE_H_

#include "detail/event_queue.h"

#include <chrono>
#include <iterator>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::detail {
namespace {

// One event this large would dominate a batch; the daemon's 4 MiB message
// limit would end the whole stream.
constexpr size_t kMaxEventBytes = size_t{1} << 20;

}  // namespace

absl::Status EventToProto(const Event& event, v1::Event* out) {
  if (absl::Status s = protocol::ValidateName("event name", event.name); !s.ok()) return s;
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("event \"", protocol::Quote(event.name), "\": ", why));
  };
  // The daemon's limits (torchmon/protocol/protocol.h), checked here so the
  // training log names the event that would be refused.
  if (event.data.size() > protocol::kMaxEventFields) {
    return invalid(absl::StrCat("data has ", event.data.size(), " entries (at most ",
                                protocol::kMaxEventFields, ")"));
  }
  out->set_name(event.name);
  out->set_timestamp_us(
      std::chrono::duration_cast<std::chrono::microseconds>(event.timestamp.time_since_epoch())
          .count());
  for (const auto& [key, value] : event.data) {
    // The daemon's proto3 parser refuses invalid UTF-8 and would drop the
    // whole batch, so it is caught here.
    if (absl::Status s = protocol::ValidateName("data key", key, protocol::kMaxKeyBytes); !s.ok()) {
      return invalid(s.message());
    }
    v1::EventValue& wire = (*out->mutable_data())[key];
    if (const auto* s = std::get_if<std::string>(&value)) {
      if (!protocol::IsValidUtf8(*s)) {
        return invalid(absl::StrCat("value of \"", key, "\" is not valid UTF-8"));
      }
      if (s->size() > protocol::kMaxEventStringBytes) {
        return invalid(absl::StrCat("value of \"", key, "\" is ", s->size(), " bytes long (at most ",
                                    protocol::kMaxEventStringBytes, ")"));
      }
      wire.set_string_value(*s);
    } else if (const auto* d = std::get_if<double>(&value)) {
      wire.set_double_value(*d);
    } else if (const auto* i = std::get_if<int64_t>(&value)) {
      wire.set_int_value(*i);
    } else if (const auto* b = std::get_if<bool>(&value)) {
      wire.set_bool_value(*b);
    }
  }
  for (const auto& [key, value] : event.labels) {
    if (absl::Status s = protocol::ValidateLabelKey(key); !s.ok()) return invalid(s.message());
    if (absl::Status s = protocol::ValidateLabelValue(key, value); !s.ok()) {
      return invalid(s.message());
    }
    (*out->mutable_labels())[key] = value;
  }
  if (const size_t size = out->ByteSizeLong(); size > kMaxEventBytes) {
    return invalid(absl::StrCat("is ", size, " bytes encoded; the limit is ", kMaxEventBytes));
  }
  return absl::OkStatus();
}


bool EventQueue::Push(v1::Event&& event) {
  if (events_.size() >= max_events_) return false;
  events_.push_back(std::move(event));
  ++queued_;
  return true;
}

void EventQueue::CountDrop(const std::string& name) {
  auto it = drops_.find(name);
  if (it == drops_.end()) {
    it = drops_.size() < kMaxDropNames ? drops_.emplace(name, 0).first
                                       : drops_.try_emplace(kOtherEvents).first;
  }
  ++it->second;
}

EventQueue::Taken EventQueue::TakeAll() {
  Taken taken;
  taken.events.swap(events_);
  taken.drops.assign(drops_.begin(), drops_.end());
  drops_taken_ = !drops_.empty();
  drops_.clear();
  return taken;
}

void EventQueue::Requeue(Taken& taken) {
  events_.insert(events_.begin(), std::make_move_iterator(taken.events.begin()),
                 std::make_move_iterator(taken.events.end()));
  taken.events.clear();
  for (const auto& [name, dropped] : taken.drops) drops_[name] += dropped;
  taken.drops.clear();
  drops_taken_ = false;
}

uint64_t EventQueue::DropUnsent() {
  const uint64_t dropped = queued_ - resolved_;
  resolved_ = queued_;
  events_.clear();
  drops_.clear();
  drops_taken_ = false;
  return dropped;
}

}  // namespace torchmon::detail

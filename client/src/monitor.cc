#include "torchmon/monitor.h"

#include <algorithm>
#include <map>

namespace torchmon::monitor {
namespace {

struct Handlers {
  std::mutex mu;
  std::vector<std::shared_ptr<EventHandler>> list;
};

Handlers& handlers() {
  static Handlers* h = new Handlers;  // never destroyed: stats may log at exit
  return *h;
}

}  // namespace

const char* aggregationName(Aggregation agg) {
  switch (agg) {
    case Aggregation::NONE: return "none";
    case Aggregation::VALUE: return "value";
    case Aggregation::MEAN: return "mean";
    case Aggregation::COUNT: return "count";
    case Aggregation::SUM: return "sum";
    case Aggregation::MAX: return "max";
    case Aggregation::MIN: return "min";
  }
  return "unknown";
}

bool operator==(const Event& lhs, const Event& rhs) {
  return lhs.name == rhs.name && lhs.timestamp == rhs.timestamp && lhs.data == rhs.data;
}

void detail::callHandlers(const Event& e) {
  std::vector<std::shared_ptr<EventHandler>> list;
  {
    std::lock_guard<std::mutex> guard(handlers().mu);
    list = handlers().list;
  }
  // Outside the lock: a handler may log or register.
  for (const auto& h : list) h->handle(e);
}

void logEvent(const Event& e) {
  detail::callHandlers(e);
  std::map<std::string, EventValue> data(e.data.begin(), e.data.end());
  Client::Default().LogEvent(torchmon::Event(e.name, std::move(data), e.timestamp));
}

void registerEventHandler(std::shared_ptr<EventHandler> p) {
  std::lock_guard<std::mutex> guard(handlers().mu);
  handlers().list.push_back(std::move(p));
}

void unregisterEventHandler(const std::shared_ptr<EventHandler>& p) {
  std::lock_guard<std::mutex> guard(handlers().mu);
  auto& list = handlers().list;
  list.erase(std::remove(list.begin(), list.end(), p), list.end());
}

}  // namespace torchmon::monitor

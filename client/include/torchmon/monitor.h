// torch::monitor's C++ API over torchmon (torch/csrc/monitor/counters.h and
// events.h): a program written against torch's C++ torch::monitor builds
// against torchmon's client with one namespace alias,
//
//   #include <torchmon/monitor.h>
//   namespace monitor = torchmon::monitor;   // was: torch::monitor
//
// and behaves the same in its process: a Stat's count(), get(), the
// "torch.monitor.Stat" events its handlers receive, max_samples closing a
// window early and the event its destructor logs are torch::monitor's
// (windows of the steady clock, any length, its comparisons for MAX and MIN;
// VALUE reported). Every sample also goes to torchmond through
// the default client (Client::Default()), which aggregates the series with
// its own semantics (docs/semantics.md), and logEvent sends the event there
// too.
#ifndef TORCHMON_MONITOR_H_
#define TORCHMON_MONITOR_H_

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "torchmon/client.h"
#include "torchmon/monitor_windows.h"
#include "torchmon/protocol/protocol.h"

namespace torchmon::monitor {

// torch::monitor::Aggregation, with its numbering.
// Aggregation (torchmon/monitor_windows.h) is the client's, number for
// number (protocol::AggregationAs converts).
static_assert(static_cast<int>(Aggregation::VALUE) == static_cast<int>(torchmon::Aggregation::VALUE));
static_assert(static_cast<int>(Aggregation::MEAN) == static_cast<int>(torchmon::Aggregation::MEAN));
static_assert(static_cast<int>(Aggregation::COUNT) == static_cast<int>(torchmon::Aggregation::COUNT));
static_assert(static_cast<int>(Aggregation::SUM) == static_cast<int>(torchmon::Aggregation::SUM));
static_assert(static_cast<int>(Aggregation::MAX) == static_cast<int>(torchmon::Aggregation::MAX));
static_assert(static_cast<int>(Aggregation::MIN) == static_cast<int>(torchmon::Aggregation::MIN));

struct AggregationHash {
  template <typename T>
  std::size_t operator()(T t) const {
    return static_cast<std::size_t>(t);
  }
};

// "value", "mean", ... ("none" for NONE): a static string. Thread-safe.
const char* aggregationName(Aggregation agg);

using data_value_t = std::variant<std::string, double, int64_t, bool>;

// torch::monitor::Event: a plain value, compared field by field.
struct Event {
  std::string name;
  std::chrono::system_clock::time_point timestamp;
  std::unordered_map<std::string, data_value_t> data;
};
bool operator==(const Event& lhs, const Event& rhs);

// Receives every event logged in this process (logEvent and the Stats'
// window events).
class EventHandler {
 public:
  virtual ~EventHandler() = default;
  virtual void handle(const Event& e) = 0;
};

// Handlers, as torch::monitor's: every registered handler receives every
// event logged in the process (logEvent, and each Stat's window events), on
// the logging thread, in order of registration. They are called outside
// the registry's lock, so a handler may log events or (un)register
// handlers; one unregistered while an event is being handed out may still
// receive that event. A handler registered twice is called twice;
// unregistering removes every registration of it. All three functions are
// thread-safe. An exception a handler throws goes to the caller of
// logEvent or Stat::add, after the sample was counted and sent (from a
// Stat's destructor it ends the program), and the handlers after it miss
// that event.

// Calls every registered handler, then sends the event to torchmond (never
// blocks on I/O: Client::LogEvent).
void logEvent(const Event& e);
void registerEventHandler(std::shared_ptr<EventHandler> p);
void unregisterEventHandler(const std::shared_ptr<EventHandler>& p);

namespace detail {
// Calls the handlers only: a Stat's window events stay in the process (the
// daemon aggregates the samples themselves).
void callHandlers(const Event& e);
}  // namespace detail

// torch::monitor::Stat<T>, T double or int64_t. Thread-safe: add(), count()
// and get() may be called from any number of threads; each takes the
// Stat's mutex, and handlers run outside it.
template <typename T>
class Stat {
 public:
  // As torch::monitor's: never throws for a bad definition. Any window is
  // kept in process as asked; the daemon's stat (daemon_stat()) gets the
  // window the daemon holds (protocol::DaemonWindowMs) with the one asked
  // for beside it, and the cap (kNoCap: none). A name or aggregation the
  // daemon would refuse makes that stat invalid (its samples dropped and
  // counted, the reason in Client::TakeErrors()); the in-process windows
  // work all the same. NONE among the aggregations is kept in process and
  // not sent.
  Stat(std::string name, std::initializer_list<Aggregation> aggregations,
       std::chrono::milliseconds windowSize,
       int64_t maxSamples = kNoCap)
      : Stat(std::move(name), std::vector<Aggregation>(aggregations), windowSize, maxSamples) {}

  Stat(std::string name, std::vector<Aggregation> aggregations,
       std::chrono::milliseconds windowSize,
       int64_t maxSamples = kNoCap)
      : name_(name),
        aggregations_(std::move(aggregations)),
        daemon_(std::move(name), DaemonAggregations(aggregations_),
                std::chrono::milliseconds(protocol::DaemonWindowMs(windowSize.count())),
                DaemonOptions(windowSize, maxSamples)),
        windows_(windowSize, maxSamples) {}

  Stat(const Stat&) = delete;
  Stat& operator=(const Stat&) = delete;

  // Logs the window being filled, if it holds samples, as torch::monitor
  // does (a handler's exception here ends the program); the samples already
  // sent still reach the daemon (torchmon::Stat::~Stat). No other member
  // may be running or start on another thread.
  virtual ~Stat() {
    typename StatWindows<T>::Logged logged;
    {
      std::lock_guard<std::mutex> guard(mu_);
      if (windows_.Close(logged) == 0) return;
    }
    log(logged.windows[0]);  // what remains, as torch::monitor does
  }

  // Adds `v` to the window being filled, after logging the windows that
  // ended (an event to every handler for each that held samples, on this
  // thread, after the lock is let go), and sends it to torchmond
  // (torchmon::Stat::add: never blocks on I/O). A handler's exception comes
  // out of add() after the sample was counted and sent.
  void add(T v) {
    typename StatWindows<T>::Logged logged;
    {
      std::lock_guard<std::mutex> guard(mu_);
      windows_.Add(v, logged);
    }
    daemon_.add(static_cast<double>(v));
    // Handlers run outside the lock: one may add to this stat.
    for (int i = 0; i < logged.count; ++i) log(logged.windows[i]);
  }

  const std::string& name() const noexcept { return name_; }

  // Samples in the window being filled (it may have ended: the next add()
  // logs it).
  int64_t count() noexcept {
    std::lock_guard<std::mutex> guard(mu_);
    return windows_.count();
  }

  // The last logged window's aggregations, one entry per aggregation asked
  // for but NONE; zeros before a window was logged, or when the last logged
  // one was empty. As torch::monitor's, noexcept: a failed
  // allocation ends the program.
  std::unordered_map<Aggregation, T, AggregationHash> get() noexcept {
    std::lock_guard<std::mutex> guard(mu_);
    return aggregates(windows_.last_logged());
  }

  // The stat as torchmond receives it (added(), dropped(), ...), with its
  // costs (torchmon::Stat). Not in torch::monitor.
  const torchmon::Stat& daemon_stat() const { return daemon_; }

 private:
  using Values = typename StatWindows<T>::Values;

  static StatOptions DaemonOptions(std::chrono::milliseconds window, int64_t max_samples) {
    StatOptions options;
    options.max_samples = DaemonMaxSamples(max_samples);
    // Told to the daemon where it holds another window.
    options.requested_window = window;
    return options;
  }

  static std::vector<StatAggregation> DaemonAggregations(const std::vector<Aggregation>& list) {
    std::vector<StatAggregation> out;
    for (Aggregation a : list) {
      if (a != Aggregation::NONE) out.emplace_back(protocol::AggregationAs<torchmon::Aggregation>(a));
    }
    return out;
  }

  std::unordered_map<Aggregation, T, AggregationHash> aggregates(const Values& v) const {
    std::unordered_map<Aggregation, T, AggregationHash> out;
    for (Aggregation a : aggregations_) {
      if (a != Aggregation::NONE) out.emplace(a, v.Get(a));
    }
    return out;
  }

  void log(const Values& v) const {
    Event e;
    e.name = "torch.monitor.Stat";
    e.timestamp = std::chrono::system_clock::now();
    for (const auto& [a, value] : aggregates(v)) {
      e.data[name_ + "." + aggregationName(a)] = data_value_t(value);
    }
    detail::callHandlers(e);
  }

  const std::string name_;
  const std::vector<Aggregation> aggregations_;
  torchmon::Stat daemon_;

  std::mutex mu_;
  StatWindows<T> windows_;
};

}  // namespace torchmon::monitor

#endif  // TORCHMON_MONITOR_H_

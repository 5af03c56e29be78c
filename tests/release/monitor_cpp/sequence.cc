// One program, two builds: against libtorch's own torch::monitor
// (-DAGAINST_TORCH) and against torchmon's (torchmon/monitor.h, the
// namespace alias swapped). It drives the same calls and prints what a
// program can observe after each: count(), get() and every event its
// handler received. tests/release/test_torch26.py builds both in the
// trixie-torch root and compares the two outputs line by line.
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#ifdef AGAINST_TORCH
#include <torch/csrc/monitor/counters.h>
#include <torch/csrc/monitor/events.h>
namespace monitor = torch::monitor;
#else
#include "torchmon/monitor.h"
namespace monitor = torchmon::monitor;
#endif

namespace {

using monitor::Aggregation;

std::string Number(double v) {
  if (std::isnan(v)) return "nan";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}
std::string Number(int64_t v) { return std::to_string(v); }

std::string Value(const monitor::data_value_t& v) {
  return std::visit(
      [](const auto& x) -> std::string {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::string>) return "s:" + x;
        if constexpr (std::is_same_v<X, double>) return "d:" + Number(x);
        if constexpr (std::is_same_v<X, int64_t>) return "i:" + Number(x);
        if constexpr (std::is_same_v<X, bool>) return std::string("b:") + (x ? "1" : "0");
      },
      v);
}

class Recorder : public monitor::EventHandler {
 public:
  void handle(const monitor::Event& e) override {
    std::vector<std::string> data;
    for (const auto& [key, value] : e.data) data.push_back(key + "=" + Value(value));
    std::sort(data.begin(), data.end());
    std::string line = e.name;
    for (const auto& d : data) line += " " + d;
    events.push_back(line);
  }
  std::vector<std::string> events;
};

std::shared_ptr<Recorder> recorder;
size_t printed = 0;

void PrintEvents() {
  for (; printed < recorder->events.size(); ++printed) {
    std::printf("  event %s\n", recorder->events[printed].c_str());
  }
}

template <typename T>
void Observe(const char* what, monitor::Stat<T>& s) {
  std::vector<std::pair<int, std::string>> got;
  for (const auto& [agg, value] : s.get()) got.emplace_back(static_cast<int>(agg), Number(value));
  std::sort(got.begin(), got.end());
  std::printf("%s count=%" PRId64 " get=", what, static_cast<int64_t>(s.count()));
  for (const auto& [agg, value] : got) std::printf("%d:%s,", agg, value.c_str());
  std::printf("\n");
  PrintEvents();
}

}  // namespace

int main() {
  recorder = std::make_shared<Recorder>();
  monitor::registerEventHandler(recorder);
  const auto hours = std::chrono::milliseconds(int64_t{100} * 3600 * 1000);
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  {
    // Every aggregation, a cap of 3, NaN and infinities.
    monitor::Stat<double> a("cpp.all",
                            {Aggregation::VALUE, Aggregation::MEAN, Aggregation::COUNT,
                             Aggregation::SUM, Aggregation::MAX, Aggregation::MIN},
                            hours, 3);
    Observe("all", a);
    for (double v : {1.0, 2.0, nan, 4.0, -inf, 8.0, inf, 16.0, -2.5}) {
      a.add(v);
      Observe("all", a);
    }
    // Integers keep integers.
    monitor::Stat<int64_t> b("cpp.int", {Aggregation::VALUE, Aggregation::SUM, Aggregation::MAX},
                             hours, 2);
    for (int64_t v : {5, 6, 7, -9, 11}) {
      b.add(v);
      Observe("int", b);
    }
    // No cap: logged only when destroyed, below.
    monitor::Stat<double> c("cpp.open", {Aggregation::MIN, Aggregation::MAX, Aggregation::VALUE},
                            hours);
    for (double v : {3.0, 1.0, nan, 2.0}) {
      c.add(v);
      Observe("open", c);
    }
  }
  std::printf("destroyed\n");
  PrintEvents();
  monitor::Event e;
  e.name = "cpp.custom";
  e.timestamp = std::chrono::system_clock::now();
  e.data = {{"i", int64_t{1}}, {"s", std::string("x")}, {"d", 0.5}, {"b", true}};
  monitor::logEvent(e);
  std::printf("logged\n");
  PrintEvents();
  monitor::unregisterEventHandler(recorder);
  return 0;
}

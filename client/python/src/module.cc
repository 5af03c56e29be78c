// _torchmon: the pybind11 binding of the C++ client. One implementation for
// both languages; this file only adapts types, the GIL and torch.monitor's
// Python names. The Python package (torchmon/__init__.py) builds the public
// API on top of it.
#include <pybind11/chrono.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <time.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "torchmon/client.h"
#include "torchmon/protocol/protocol.h"

namespace py = pybind11;

namespace torchmon::python {
namespace {

int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// The aggregates of one window, kept in process only so that Stat.count and
// Stat.get() answer as torch.monitor's do. The daemon's aggregation is the
// one that counts; this mirrors it for the calling process alone.
struct LocalWindow {
  uint64_t count = 0;
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double last = 0;
  bool saw_nan = false;

  void Add(double v) {
    ++count;
    sum += v;
    last = v;
    if (std::isnan(v)) {
      saw_nan = true;
    } else {
      min = std::min(min, v);
      max = std::max(max, v);
    }
  }
  double Get(Aggregation a) const {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    switch (a) {
      case Aggregation::VALUE: return last;
      case Aggregation::MEAN: return count == 0 ? 0.0 : sum / static_cast<double>(count);
      case Aggregation::COUNT: return static_cast<double>(count);
      case Aggregation::SUM: return sum;
      case Aggregation::MAX: return count == 0 ? 0.0 : (saw_nan ? nan : max);
      case Aggregation::MIN: return count == 0 ? 0.0 : (saw_nan ? nan : min);
      case Aggregation::QUANTILE: break;  // the daemon's alone: never mirrored here
    }
    return nan;
  }
};

// torch.monitor.Stat's shape over torchmon::Stat. Methods run with the GIL
// held, which is what serialises the local window bookkeeping.
class PyStat {
 public:
  // `on_window(data)` (or None) is called with torch.monitor.Stat's event
  // data ({"<name>.<agg>": value}) each time a local window completes.
  // `aggregations` are the six mirrored here; `quantiles` only go to the
  // daemon (a sketch per window in every training process is what torchmon
  // exists to avoid).
  PyStat(std::shared_ptr<Client> client, std::string name, std::vector<Aggregation> aggregations,
         const std::vector<double>& quantiles, std::chrono::microseconds window_size,
         int64_t max_samples, Labels labels, py::object on_window)
      : client_(std::move(client)),
        on_window_(std::move(on_window)),
        aggregations_(aggregations),
        window_ms_(std::max<int64_t>(1, window_size.count() / 1000)),
        max_samples_(max_samples),
        stat_(*client_, std::move(name), StatAggregations(aggregations, quantiles),
              std::chrono::milliseconds(window_size.count() / 1000),
              // torch.monitor's "no cap" default is INT64_MAX; ours is 0.
              max_samples == std::numeric_limits<int64_t>::max() ? 0 : max_samples,
              std::move(labels)) {}

  // Called from training loops between steps, with cold caches: the clock
  // is the client's TSC clock (no vDSO page to fault in) and, while `now`
  // stays inside the current local window, no division is made.
  void add(double v) {
    const int64_t now_us = WallMicros();
    if (now_us < window_start_us_ || now_us >= window_end_us_) {
      // Outside the current window's bounds: another window.
      if (current_.count > 0) {
        last_closed_ = current_;
        ReportWindow();
      }
      current_ = LocalWindow();
      window_index_ = FloorDiv(FloorDiv(now_us, 1000), window_ms_);
      window_start_us_ = window_index_ * window_ms_ * 1000;
      window_end_us_ = window_start_us_ + window_ms_ * 1000;
    }
    if (max_samples_ <= 0 || max_samples_ == std::numeric_limits<int64_t>::max() ||
        current_.count < static_cast<uint64_t>(max_samples_)) {
      current_.Add(v);
    }
    stat_.add(v, now_us);
  }

  // Samples in the current window (torch.monitor.Stat.count).
  int64_t count() {
    const int64_t index = FloorDiv(FloorDiv(WallMicros(), 1000), window_ms_);
    return index == window_index_ ? static_cast<int64_t>(current_.count) : 0;
  }

  // The aggregates of the last completed window (torch.monitor.Stat.get()).
  std::map<Aggregation, double> get() {
    const int64_t index = FloorDiv(FloorDiv(WallMicros(), 1000), window_ms_);
    const LocalWindow& w = index == window_index_ ? last_closed_ : current_;
    std::map<Aggregation, double> out;
    for (Aggregation a : aggregations_) out[a] = w.Get(a);
    return out;
  }

  const std::string& name() const { return stat_.name(); }
  uint64_t added() const { return stat_.added(); }

  // Reports the window still open, as torch.monitor does when a Stat is
  // destroyed.
  void ReportOpenWindow() {
    if (current_.count == 0) return;
    last_closed_ = current_;
    current_ = LocalWindow();
    ReportWindow();
  }
  uint64_t dropped() const { return stat_.dropped(); }

 private:
  // Hands the completed window to the event handlers. A failing handler
  // must not make add() raise: its exception is reported as unraisable.
  void ReportWindow() {
    if (on_window_.is_none()) return;
    try {
      py::dict data;
      for (Aggregation a : aggregations_) {
        data[py::str(stat_.name() + "." + AggregationLowerName(a))] = last_closed_.Get(a);
      }
      on_window_(data);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("torchmon.Stat window event handler");
    }
  }

  static std::vector<StatAggregation> StatAggregations(const std::vector<Aggregation>& aggregations,
                                                       const std::vector<double>& quantiles) {
    std::vector<StatAggregation> out(aggregations.begin(), aggregations.end());
    for (double q : quantiles) out.push_back(Quantile(q));
    return out;
  }

  static std::string AggregationLowerName(Aggregation a) {
    switch (a) {
      case Aggregation::VALUE: return "value";
      case Aggregation::MEAN: return "mean";
      case Aggregation::COUNT: return "count";
      case Aggregation::SUM: return "sum";
      case Aggregation::MAX: return "max";
      case Aggregation::MIN: return "min";
      case Aggregation::QUANTILE: return "quantile";
    }
    return "unknown";
  }

  std::shared_ptr<Client> client_;  // keeps the connection alive while the Stat is
  py::object on_window_;
  std::vector<Aggregation> aggregations_;
  int64_t window_ms_;
  int64_t max_samples_;
  Stat stat_;
  int64_t window_index_ = std::numeric_limits<int64_t>::min();
  // [start, end) of window_index_ in microseconds; empty until the first add.
  int64_t window_start_us_ = 0;
  int64_t window_end_us_ = 0;
  LocalWindow current_;
  LocalWindow last_closed_;
};

Labels LabelsFromDict(const std::optional<std::map<std::string, std::string>>& labels) {
  Labels out;
  if (labels) {
    for (const auto& [k, v] : *labels) out.emplace_back(k, v);
  }
  return out;
}

std::shared_ptr<Client> MakeClient(
    std::optional<std::string> target, std::optional<std::map<std::string, std::string>> labels,
    bool labels_from_environment, size_t buffer_samples, std::string client_name,
    std::optional<std::string> token_file, std::optional<std::string> token,
    std::optional<std::string> tls_ca, std::optional<std::string> tls_cert,
    std::optional<std::string> tls_key, std::optional<std::string> tls_server_name) {
  ClientOptions options;
  if (target) options.target = *target;
  // Unset ones come from TORCHMON_TOKEN_FILE, TORCHMON_TLS_* (docs/security.md).
  options.security.token_file = token_file.value_or("");
  options.security.token = token.value_or("");
  options.security.tls_ca_file = tls_ca.value_or("");
  options.security.tls_cert_file = tls_cert.value_or("");
  options.security.tls_key_file = tls_key.value_or("");
  options.security.tls_server_name = tls_server_name.value_or("");
  options.labels = LabelsFromDict(labels);
  options.labels_from_environment = labels_from_environment;
  if (buffer_samples > 0) options.stat_buffer_samples = buffer_samples;
  options.client_name = std::move(client_name);
  // Destruction happens with the GIL released (see the holder below), and
  // interpreter exit flushes explicitly first.
  return std::shared_ptr<Client>(new Client(options), [](Client* c) {
    py::gil_scoped_release release;
    delete c;
  });
}

// Converts a Python value to torch.monitor's data_value_t. bool is tested
// before int: in Python, True is an int.
EventValue ToEventValue(const std::string& key, const py::handle& value) {
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  throw py::type_error("event data[\"" + key + "\"] must be str, float, int or bool, not " +
                       std::string(py::str(value.get_type().attr("__name__"))));
}

// Flushes with the GIL released so other Python threads keep running.
bool FlushClient(Client& client, double timeout_s) {
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = client.Flush(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  }
  return status.ok();
}

}  // namespace

PYBIND11_MODULE(_torchmon, m) {
  m.doc() = "Native core of torchmon: the C++ client, bound with pybind11.";

  py::enum_<Aggregation>(m, "Aggregation",
                         "Aggregations computed over each window (torch.monitor.Aggregation).")
      .value("VALUE", Aggregation::VALUE, "The last value added in the window.")
      .value("MEAN", Aggregation::MEAN, "The arithmetic mean of the values added.")
      .value("COUNT", Aggregation::COUNT, "The number of values added.")
      .value("SUM", Aggregation::SUM, "The sum of the values added.")
      .value("MAX", Aggregation::MAX, "The largest value added (NaN if any was NaN).")
      .value("MIN", Aggregation::MIN, "The smallest value added (NaN if any was NaN).");

  py::class_<Client, std::shared_ptr<Client>>(m, "Client",
                                              "A connection to torchmond and its sender thread.")
      .def(py::init(&MakeClient), py::arg("target") = py::none(), py::arg("labels") = py::none(),
           py::arg("labels_from_environment") = true, py::arg("buffer_samples") = 0,
           py::arg("client_name") = "torchmon-python", py::arg("token_file") = py::none(),
           py::arg("token") = py::none(), py::arg("tls_ca") = py::none(),
           py::arg("tls_cert") = py::none(), py::arg("tls_key") = py::none(),
           py::arg("tls_server_name") = py::none())
      .def("flush", &FlushClient, py::arg("timeout"),
           "Waits (GIL released) until everything recorded so far is acknowledged by the "
           "daemon, at most `timeout` seconds. Returns True if it was.")
      .def(
          "log_event",
          [](Client& client, const std::string& name, int64_t timestamp_us, const py::dict& data,
             std::optional<std::map<std::string, std::string>> labels) {
            Event event;
            event.name = name;
            event.timestamp = std::chrono::system_clock::time_point(
                std::chrono::microseconds(timestamp_us));
            for (const auto& [k, v] : data) {
              const std::string key = py::str(k);
              event.data.emplace(key, ToEventValue(key, v));
            }
            event.labels = LabelsFromDict(labels);
            client.LogEvent(event);
          },
          py::arg("name"), py::arg("timestamp_us"), py::arg("data"), py::arg("labels") = py::none())
      .def("stats",
           [](const Client& client) {
             const ClientStats s = client.Stats();
             py::dict d;
             d["samples_added"] = s.samples_added;
             d["samples_sent"] = s.samples_sent;
             d["samples_delivered"] = s.samples_delivered;
             d["samples_dropped"] = s.samples_dropped;
             d["events_logged"] = s.events_logged;
             d["events_sent"] = s.events_sent;
             d["events_delivered"] = s.events_delivered;
             d["events_dropped"] = s.events_dropped;
             d["batches_sent"] = s.batches_sent;
             d["batches_resent"] = s.batches_resent;
             d["batches_acked"] = s.batches_acked;
             d["errors"] = s.errors;
             d["connects"] = s.connects;
             d["daemon_restarts"] = s.daemon_restarts;
             return d;
           })
      .def("take_errors", &Client::TakeErrors)
      .def_property_readonly("target", &Client::target)
      .def_property_readonly("labels", [](const Client& c) {
        std::map<std::string, std::string> out(c.labels().begin(), c.labels().end());
        return out;
      });

  py::class_<PyStat>(m, "Stat")
      .def(py::init([](std::shared_ptr<Client> client, std::string name,
                       const std::vector<std::variant<Aggregation, std::string>>& aggregations,
                       std::chrono::microseconds window_size, int64_t max_samples,
                       std::optional<std::map<std::string, std::string>> labels,
                       py::object on_window) {
             // Aggregation members, or names: "mean", "p99", "p99.9".
             std::vector<Aggregation> six;
             std::vector<double> quantiles;
             for (const auto& a : aggregations) {
               if (const auto* member = std::get_if<Aggregation>(&a)) {
                 six.push_back(*member);
                 continue;
               }
               auto parsed = protocol::ParseAggregation(std::get<std::string>(a));
               if (!parsed.ok()) throw py::value_error(std::string(parsed.status().message()));
               if (parsed->aggregation == v1::QUANTILE) {
                 quantiles.push_back(parsed->quantile);
               } else {
                 six.push_back(static_cast<Aggregation>(static_cast<int>(parsed->aggregation)));
               }
             }
             return std::make_unique<PyStat>(std::move(client), std::move(name), std::move(six),
                                             quantiles, window_size, max_samples,
                                             LabelsFromDict(labels), std::move(on_window));
           }),
           py::arg("client"), py::arg("name"), py::arg("aggregations"), py::arg("window_size"),
           py::arg("max_samples"), py::arg("labels") = py::none(),
           py::arg("on_window") = py::none())
      .def("report_open_window", &PyStat::ReportOpenWindow)
      .def("add", &PyStat::add, py::arg("v"))
      .def_property_readonly("count", &PyStat::count)
      .def("get", &PyStat::get)
      .def_property_readonly("name", &PyStat::name)
      .def_property_readonly("added", &PyStat::added)
      .def_property_readonly("dropped", &PyStat::dropped);
}

}  // namespace torchmon::python

#include "stat_type.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "client_type.h"
#include "torchmon/monitor.h"
#include "torchmon/monitor_windows.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/protocol/windows.h"

namespace torchmon::python {
namespace {

// One window's aggregates as this process keeps them, torch.monitor's
// (torchmon/monitor_windows.h). The daemon's aggregation is the one that
// counts across processes (docs/semantics.md has both views).
using LocalWindows = monitor::StatWindows<double>;
using LocalWindow = LocalWindows::Values;

double Get(const LocalWindow& w, Aggregation a) {
  // QUANTILE is the daemon's alone: never mirrored here.
  if (a == Aggregation::QUANTILE) return std::numeric_limits<double>::quiet_NaN();
  return w.Get(protocol::AggregationAs<monitor::Aggregation>(a));
}

const char* AggregationLowerName(Aggregation a) {
  return a == Aggregation::QUANTILE
             ? "quantile"
             : monitor::aggregationName(protocol::AggregationAs<monitor::Aggregation>(a));
}

// The aggregations get() and the window events carry, in the order given,
// each once (a dict keeps a repeated key's first place, and its value is
// the same): inline, where a std::vector cost 56 bytes a stat.
class ReportedAggregations {
 public:
  ReportedAggregations(const std::vector<Aggregation>& aggregations, bool report_value) {
    for (Aggregation a : aggregations) {
      if (a == Aggregation::VALUE && !report_value) continue;
      const auto code = static_cast<uint8_t>(a);
      if (std::find(codes_, codes_ + n_, code) == codes_ + n_ && n_ < kMax) codes_[n_++] = code;
    }
  }
  class Iterator {
   public:
    explicit Iterator(const uint8_t* p) : p_(p) {}
    Aggregation operator*() const { return static_cast<Aggregation>(*p_); }
    Iterator& operator++() {
      ++p_;
      return *this;
    }
    bool operator!=(const Iterator& o) const { return p_ != o.p_; }

   private:
    const uint8_t* p_;
  };
  Iterator begin() const { return Iterator(codes_); }
  Iterator end() const { return Iterator(codes_ + n_); }

 private:
  // Every Aggregation there is, once each.
  static constexpr uint8_t kMax = static_cast<uint8_t>(Aggregation::QUANTILE);
  uint8_t codes_[kMax] = {};
  uint8_t n_ = 0;
};

// torch.monitor.Stat's shape over torchmon::Stat. Methods run with the GIL
// held, which is what serialises the local window bookkeeping.
class LocalStat {
 public:
  // `aggregations` are the six mirrored here; `quantiles` and `histogram`
  // only go to the daemon (a sketch per window in every training process is
  // what torchmon exists to avoid).
  // `window_us` is the local windows' length, torch.monitor's (any length
  // it takes, in whole milliseconds as it counts them); the daemon's is the
  // nearest it holds (protocol::DaemonWindowMs). `report_value`:
  // whether get() and the window events carry VALUE, as the running torch's
  // do (the package decides).
  LocalStat(ClientPtr client, std::string name, const std::vector<Aggregation>& aggregations,
            const std::vector<double>& quantiles, int64_t window_us, int64_t max_samples,
            Labels labels, bool histogram, bool report_value)
      : client_(std::move(client)),
        reported_(aggregations, report_value),
        stat_(*client_, std::move(name), StatAggregations(aggregations, quantiles),
              std::chrono::milliseconds(protocol::DaemonWindowMs(window_us / 1000)),
              Options(max_samples, std::move(labels), histogram,
                      std::max<int64_t>(window_us / 1000, 1))),
        windows_(std::chrono::milliseconds(window_us / 1000), max_samples) {}

  // torch.monitor's Stat::add (monitor_windows.h); every sample also goes
  // to the daemon, which caps by its own windows. Puts the windows logged
  // with samples, 0 to 2, in `logged`.
  void Add(double v, LocalWindows::Logged& logged) {
    windows_.Add(v, logged);
    stat_.add(v);
  }

  // Samples in the window being filled (torch.monitor.Stat.count).
  int64_t Count() const { return windows_.count(); }

  // The last logged window (torch.monitor.Stat.get()).
  const LocalWindow& LastLogged() const { return windows_.last_logged(); }

  // Logs the window being filled, as torch.monitor does when a Stat is
  // destroyed. Returns true if it held samples (logged.windows[0]).
  bool CloseOpenWindow(LocalWindows::Logged& logged) { return windows_.Close(logged) > 0; }
  // The aggregations get() and the window events carry.
  const ReportedAggregations& reported() const { return reported_; }
  const Stat& stat() const { return stat_; }

 private:
  static StatOptions Options(int64_t max_samples, Labels labels, bool histogram,
                             int64_t window_ms) {
    StatOptions options;
    // Told to the daemon where it holds another window.
    options.requested_window = std::chrono::milliseconds(window_ms);
    options.max_samples = monitor::DaemonMaxSamples(max_samples);
    options.labels = std::move(labels);
    options.histogram = histogram;
    return options;
  }

  static std::vector<StatAggregation> StatAggregations(const std::vector<Aggregation>& aggregations,
                                                       const std::vector<double>& quantiles) {
    std::vector<StatAggregation> out(aggregations.begin(), aggregations.end());
    for (double q : quantiles) out.push_back(Quantile(q));
    return out;
  }

  ClientPtr client_;  // keeps the connection alive while the Stat is
  ReportedAggregations reported_;
  Stat stat_;
  LocalWindows windows_;
};

struct StatObject {
  PyObject_HEAD
  LocalStat* stat;      // in `storage` once __init__ made it; null before
  PyObject* on_window;  // None or a callable, owned
  // Every live Stat, for report_open_windows() at exit: two pointers here
  // instead of a weak reference and a set entry per stat (about 120 bytes).
  // Changed only with the GIL held.
  StatObject* live_prev;
  StatObject* live_next;
  // The LocalStat, in the object: allocated apart, it cost each stat a
  // heap block's header and rounding on top (16 bytes).
  alignas(LocalStat) unsigned char storage[sizeof(LocalStat)];
};

StatObject* live_stats = nullptr;

void LinkLive(StatObject* obj) {
  obj->live_prev = nullptr;
  obj->live_next = live_stats;
  if (live_stats != nullptr) live_stats->live_prev = obj;
  live_stats = obj;
}

void UnlinkLive(StatObject* obj) {
  if (obj->live_prev != nullptr) {
    obj->live_prev->live_next = obj->live_next;
  } else if (live_stats == obj) {
    live_stats = obj->live_next;
  }
  if (obj->live_next != nullptr) obj->live_next->live_prev = obj->live_prev;
  obj->live_prev = obj->live_next = nullptr;
}

LocalStat& StatOf(PyObject* self) { return *reinterpret_cast<StatObject*>(self)->stat; }

// Parses the aggregations: Aggregation members (ints 1..6, as the
// package's IntEnum is) or names: "mean", "p99", "p99.9".
bool ParseAggregations(PyObject* sequence, std::vector<Aggregation>* six,
                       std::vector<double>* quantiles) {
  Ref fast(PySequence_List(sequence));
  if (!fast) {
    PyErr_SetString(PyExc_TypeError, "aggregations must be a sequence");
    return false;
  }
  const Py_ssize_t n = PyList_Size(fast.get());
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* item = PyList_GetItem(fast.get(), i);  // borrowed
    if (PyUnicode_Check(item)) {
      std::string name;
      if (!ToString(item, "an aggregation", &name)) return false;
      auto parsed = protocol::ParseAggregation(name);
      if (!parsed.ok()) {
        const std::string message(parsed.status().message());
        PyErr_SetString(PyExc_ValueError, message.c_str());
        return false;
      }
      if (parsed->aggregation == v1::QUANTILE) {
        quantiles->push_back(parsed->quantile);
      } else {
        six->push_back(protocol::AggregationAs<Aggregation>(parsed->aggregation));
      }
    } else if (PyLong_Check(item) && !PyBool_Check(item)) {
      const long value = PyLong_AsLong(item);
      if (value == -1 && PyErr_Occurred()) return false;
      if (value < static_cast<long>(Aggregation::VALUE) ||
          value > static_cast<long>(Aggregation::MIN)) {
        PyErr_Format(PyExc_ValueError, "%ld is not an Aggregation", value);
        return false;
      }
      six->push_back(static_cast<Aggregation>(value));
    } else {
      PyErr_Format(PyExc_TypeError, "aggregations must be Aggregation members or names, not %s",
                   TypeName(item).c_str());
      return false;
    }
  }
  return true;
}

// Stat(client, name, aggregations, window_us, max_samples, labels=None,
//      on_window=None, histogram=False, report_value=True).
// `on_window(data)` is called with torch.monitor.Stat's event data
// ({"<name>.<agg>": value}) each time a local window completes.
// Two steps, as a Python class's are: tp_new makes an empty object and
// tp_init gives it its stat, so that the package's Stat (and a user's
// subclass of it) does its work in __init__.
PyObject* StatNew(PyTypeObject* type, PyObject*, PyObject*) {
  PyObject* self = PyType_GenericAlloc(type, 0);
  if (self == nullptr) return nullptr;
  auto* obj = reinterpret_cast<StatObject*>(self);
  obj->stat = nullptr;
  obj->live_prev = obj->live_next = nullptr;
  Py_INCREF(Py_None);
  obj->on_window = Py_None;
  return self;
}

int StatInit(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"client",      "name",   "aggregations", "window_us",
                                   "max_samples", "labels", "on_window",    "histogram",
                                   "report_value", nullptr};
  PyObject *client = nullptr, *name = nullptr, *aggregations = nullptr, *labels = Py_None,
           *on_window = Py_None;
  long long window_us = 0, max_samples = 0;
  int histogram = 0, report_value = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!UOLL|OOpp", const_cast<char**>(keywords),
                                   client_type, &client, &name, &aggregations, &window_us,
                                   &max_samples, &labels, &on_window, &histogram,
                                   &report_value)) {
    return -1;
  }
  auto* obj = reinterpret_cast<StatObject*>(self);
  if (obj->stat != nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "this Stat is already initialized");
    return -1;
  }
  if (on_window != Py_None && !PyCallable_Check(on_window)) {
    PyErr_SetString(PyExc_TypeError, "on_window must be callable or None");
    return -1;
  }
  std::string name_string;
  std::vector<Aggregation> six;
  std::vector<double> quantiles;
  Labels label_list;
  if (!ToString(name, "name", &name_string) || !ParseAggregations(aggregations, &six, &quantiles) ||
      !ToLabels(labels, &label_list)) {
    return -1;
  }
  const ClientPtr& client_ptr = ClientPtrOf(client);
  if (!Guarded([&] {
        obj->stat = new (obj->storage)
            LocalStat(client_ptr, std::move(name_string), six, quantiles, window_us, max_samples,
                      std::move(label_list), histogram != 0, report_value != 0);
      })) {
    return -1;
  }
  PyObject* previous = obj->on_window;
  Py_INCREF(on_window);
  obj->on_window = on_window;
  Py_XDECREF(previous);
  LinkLive(obj);
  return 0;
}

// Set when a method is called on a Stat whose __init__ did not run (a
// subclass that never called it): a clear error, not a crash.
bool Initialized(PyObject* self) {
  if (reinterpret_cast<StatObject*>(self)->stat != nullptr) return true;
  PyErr_SetString(PyExc_RuntimeError,
                  "this Stat was not initialized: a subclass's __init__ must call "
                  "super().__init__(name, aggregations, window_size, ...)");
  return false;
}

void StatDealloc(PyObject* self) {
  auto* obj = reinterpret_cast<StatObject*>(self);
  UnlinkLive(obj);
  // May drop the last reference to the client, whose deleter releases the GIL.
  if (obj->stat != nullptr) obj->stat->~LocalStat();
  Py_XDECREF(obj->on_window);
  FreeObject(self);
}

// Hands a logged window to the handler (a torch.monitor.Stat event). A
// failing handler must not make add() raise: its exception is reported as
// unraisable.
void ReportWindow(PyObject* self, const LocalWindow& window) {
  auto* obj = reinterpret_cast<StatObject*>(self);
  if (obj->on_window == Py_None) return;
  const LocalStat& stat = *obj->stat;
  Ref data(PyDict_New());
  bool ok = static_cast<bool>(data);
  for (Aggregation a : stat.reported()) {
    if (!ok) break;
    const std::string key = stat.stat().name() + "." + AggregationLowerName(a);
    ok = SetItem(data.get(), key.c_str(), PyFloat_FromDouble(Get(window, a)));
  }
  if (ok) {
    Ref result(PyObject_CallFunctionObjArgs(obj->on_window, data.get(), nullptr));
    ok = static_cast<bool>(result);
  }
  if (!ok) PyErr_WriteUnraisable(obj->on_window);
}

// add(v): the hot path. METH_O, so a call is one C function call.
PyObject* StatAdd(PyObject* self, PyObject* arg) {
  // Floats, ints and anything with __float__ or __index__ (a 0-d tensor).
  const double v = PyFloat_AsDouble(arg);
  if (v == -1.0 && PyErr_Occurred()) return nullptr;
  if (!Initialized(self)) return nullptr;
  // Copies on this stack: a handler may add to this stat again.
  LocalWindows::Logged logged;
  StatOf(self).Add(v, logged);
  for (int i = 0; i < logged.count; ++i) ReportWindow(self, logged.windows[i]);
  Py_RETURN_NONE;
}

PyObject* StatReportOpenWindow(PyObject* self, PyObject*) {
  // The package's __del__ calls this, also on an object whose __init__
  // failed or never ran (no LocalStat then): nothing to report.
  if (reinterpret_cast<StatObject*>(self)->stat == nullptr) Py_RETURN_NONE;
  LocalWindows::Logged logged;
  if (StatOf(self).CloseOpenWindow(logged)) ReportWindow(self, logged.windows[0]);
  Py_RETURN_NONE;
}

// get() -> {int: float}: the package maps the keys to its Aggregation.
PyObject* StatGet(PyObject* self, PyObject*) {
  if (!Initialized(self)) return nullptr;
  const LocalStat& stat = StatOf(self);
  const LocalWindow& window = stat.LastLogged();
  Ref d(PyDict_New());
  if (!d) return nullptr;
  for (Aggregation a : stat.reported()) {
    Ref key(PyLong_FromLong(static_cast<long>(a)));
    Ref value(PyFloat_FromDouble(Get(window, a)));
    if (!key || !value || PyDict_SetItem(d.get(), key.get(), value.get()) != 0) return nullptr;
  }
  return d.release();
}

PyObject* StatGetCount(PyObject* self, void*) {
  if (!Initialized(self)) return nullptr;
  return PyLong_FromLongLong(StatOf(self).Count());
}
PyObject* StatGetName(PyObject* self, void*) {
  if (!Initialized(self)) return nullptr;
  return FromString(StatOf(self).stat().name());
}
PyObject* StatGetAdded(PyObject* self, void*) {
  if (!Initialized(self)) return nullptr;
  return PyLong_FromUnsignedLongLong(StatOf(self).stat().added());
}
PyObject* StatGetDropped(PyObject* self, void*) {
  if (!Initialized(self)) return nullptr;
  return PyLong_FromUnsignedLongLong(StatOf(self).stat().dropped());
}

PyMethodDef stat_methods[] = {
    {"add", StatAdd, METH_O, "add(v)\n\nRecords a sample; never blocks or raises on a full buffer."},
    {"get", StatGet, METH_NOARGS,
     "get() -> dict\n\nThis process's aggregates of the last completed window."},
    {"report_open_window", StatReportOpenWindow, METH_NOARGS,
     "report_open_window()\n\nCloses the local window still open and reports it."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef stat_getset[] = {
    {"count", StatGetCount, nullptr, "Samples added in the current window.", nullptr},
    {"name", StatGetName, nullptr, "The stat's name.", nullptr},
    {"added", StatGetAdded, nullptr, "Samples added through this Stat.", nullptr},
    {"dropped", StatGetDropped, nullptr, "Samples dropped before sending.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot stat_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(StatNew)},
    {Py_tp_init, reinterpret_cast<void*>(StatInit)},
    {Py_tp_dealloc, reinterpret_cast<void*>(StatDealloc)},
    {Py_tp_methods, stat_methods},
    {Py_tp_getset, stat_getset},
    {Py_tp_doc, const_cast<char*>("A stat streamed to torchmond, with torch.monitor's local "
                                  "window bookkeeping.")},
    {0, nullptr}};

// A base type: the package's Stat subclasses it, so a Stat is one object
// and add() is found on the type (no bound method per instance).
}  // namespace

// At exit. The handlers may create or drop stats, so it works on strong
// references taken first.
PyObject* ReportOpenWindows(PyObject*, PyObject*) {
  std::vector<PyObject*> stats;
  for (StatObject* obj = live_stats; obj != nullptr; obj = obj->live_next) {
    stats.push_back(reinterpret_cast<PyObject*>(obj));
    Py_INCREF(stats.back());
  }
  for (PyObject* stat : stats) {
    LocalWindows::Logged logged;
    if (StatOf(stat).CloseOpenWindow(logged)) ReportWindow(stat, logged.windows[0]);
  }
  for (PyObject* stat : stats) Py_DECREF(stat);
  Py_RETURN_NONE;
}

PyType_Spec* StatSpec() {
  static PyType_Spec stat_spec = {"torchmon._torchmon.Stat", sizeof(StatObject), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, stat_slots};
  return &stat_spec;
}

}  // namespace torchmon::python

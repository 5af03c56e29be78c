// _torchmon: the binding of the C++ client for CPython, written against the
// limited C API of Python 3.10 (Py_LIMITED_API, set by the build) so that
// one `abi3` extension serves every CPython from 3.10 on. One implementation
// for both languages; this file only adapts types, the GIL and
// torch.monitor's Python names. The Python package (torchmon/__init__.py)
// builds the public API on top of it: Aggregation is its IntEnum, and
// timedeltas arrive here as integer microseconds.
//
// Types are heap types made from specs (the limited API has no static type
// objects); C++ state lives behind one pointer per object, created in
// tp_new and destroyed in tp_dealloc. No C++ exception crosses into Python:
// each entry point that may throw converts to a Python exception.
#ifndef Py_LIMITED_API
#error "_torchmon is built against the limited C API: define Py_LIMITED_API"
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "torchmon/client.h"
#include "torchmon/monitor.h"
#include "torchmon/monitor_windows.h"
#include "torchmon/protocol/protocol.h"
#include "torchmon/protocol/windows.h"

#ifndef TORCHMON_VERSION
#error "TORCHMON_VERSION must be defined by the build"
#endif

namespace torchmon::python {
namespace {

// ---------------------------------------------------------------------------
// Small owning reference, so early returns cannot leak.
class Ref {
 public:
  Ref() = default;
  explicit Ref(PyObject* o) : o_(o) {}
  Ref(const Ref&) = delete;
  Ref& operator=(const Ref&) = delete;
  ~Ref() { Py_XDECREF(o_); }
  PyObject* get() const { return o_; }
  PyObject* release() { return std::exchange(o_, nullptr); }
  explicit operator bool() const { return o_ != nullptr; }

 private:
  PyObject* o_ = nullptr;
};

// Runs `fn` and turns a C++ exception into a Python one. Returns false if
// an exception is set.
template <typename Fn>
bool Guarded(Fn&& fn) {
  try {
    fn();
    return !PyErr_Occurred();
  } catch (const std::bad_alloc&) {
    PyErr_NoMemory();
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return false;
}

// The name of o's type, for messages (the limited API hides tp_name).
std::string TypeName(PyObject* o) {
  Ref name(PyObject_GetAttrString(reinterpret_cast<PyObject*>(Py_TYPE(o)), "__name__"));
  const char* utf8 = name ? PyUnicode_AsUTF8AndSize(name.get(), nullptr) : nullptr;
  if (utf8 == nullptr) {
    PyErr_Clear();
    return "?";
  }
  return utf8;
}

// str -> std::string. Sets TypeError naming `what` otherwise.
bool ToString(PyObject* o, const char* what, std::string* out) {
  if (!PyUnicode_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s must be str, not %s", what, TypeName(o).c_str());
    return false;
  }
  Py_ssize_t size = 0;
  const char* data = PyUnicode_AsUTF8AndSize(o, &size);
  if (data == nullptr) return false;
  out->assign(data, static_cast<size_t>(size));
  return true;
}

// None or str -> std::string ("" for None).
bool ToOptionalString(PyObject* o, const char* what, std::string* out) {
  out->clear();
  if (o == nullptr || o == Py_None) return true;
  return ToString(o, what, out);
}

// None or a mapping of str to str -> Labels, sorted by name.
bool ToLabels(PyObject* o, Labels* out) {
  out->clear();
  if (o == nullptr || o == Py_None) return true;
  if (!PyDict_Check(o)) {
    PyErr_Format(PyExc_TypeError, "labels must be a dict of str to str, not %s",
                 TypeName(o).c_str());
    return false;
  }
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  while (PyDict_Next(o, &pos, &key, &value)) {
    std::string k, v;
    if (!ToString(key, "a label name", &k) || !ToString(value, "a label value", &v)) return false;
    out->emplace_back(std::move(k), std::move(v));
  }
  std::sort(out->begin(), out->end());
  return true;
}

PyObject* FromString(const std::string& s) {
  return PyUnicode_FromStringAndSize(s.data(), static_cast<Py_ssize_t>(s.size()));
}

// Sets d[key] = value and drops the reference to value.
bool SetItem(PyObject* d, const char* key, PyObject* value) {
  if (value == nullptr) return false;
  const int rc = PyDict_SetItemString(d, key, value);
  Py_DECREF(value);
  return rc == 0;
}

// tp_free of a heap type, then the type's own reference: what every heap
// type's dealloc ends with.
void FreeObject(PyObject* self) {
  PyTypeObject* type = Py_TYPE(self);
  auto free_fn = reinterpret_cast<freefunc>(PyType_GetSlot(type, Py_tp_free));
  free_fn(self);
  Py_DECREF(type);
}

// ---------------------------------------------------------------------------
// Client

// The client is shared by the Python Client object and every Stat made on
// it; the last owner to go destroys it, with the GIL released (destruction
// flushes, bounded by ClientOptions::destructor_flush_timeout, and joins the
// sender thread).
using ClientPtr = std::shared_ptr<Client>;

struct ClientObject {
  PyObject_HEAD
  ClientPtr* client;  // never null once tp_new returned
};

PyTypeObject* client_type = nullptr;
PyTypeObject* stat_type = nullptr;

ClientPtr MakeClient(ClientOptions options) {
  return ClientPtr(new Client(std::move(options)), [](Client* c) {
    Py_BEGIN_ALLOW_THREADS
    delete c;
    Py_END_ALLOW_THREADS
  });
}

PyObject* ClientNew(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"target", "labels", "labels_from_environment",
                                   "buffer_bytes", "client_name", "token_file", "token",
                                   "tls_ca", "tls_cert", "tls_key", "tls_server_name", nullptr};
  PyObject *target = Py_None, *labels = Py_None, *token_file = Py_None, *token = Py_None,
           *tls_ca = Py_None, *tls_cert = Py_None, *tls_key = Py_None,
           *tls_server_name = Py_None, *client_name = nullptr;
  int labels_from_environment = 1;
  Py_ssize_t buffer_bytes = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OOpnUOOOOOO", const_cast<char**>(keywords),
                                   &target, &labels, &labels_from_environment, &buffer_bytes,
                                   &client_name, &token_file, &token, &tls_ca, &tls_cert,
                                   &tls_key, &tls_server_name)) {
    return nullptr;
  }
  // 0: the default. Checked here so that Python gets a ValueError naming
  // its own keyword, not the C++ field.
  if (buffer_bytes != 0 && (buffer_bytes < 0 || static_cast<size_t>(buffer_bytes) <
                                                    ClientOptions::kMinBufferBytes)) {
    PyErr_Format(PyExc_ValueError,
                 "buffer_bytes=%zd is too small: it must be at least %zu (2 MiB: one batch of "
                 "samples), or 0 for the default (%zu)",
                 buffer_bytes, ClientOptions::kMinBufferBytes, ClientOptions{}.buffer_bytes);
    return nullptr;
  }
  ClientOptions options;
  std::string target_string;
  // Unset ones come from TORCHMON_TOKEN_FILE, TORCHMON_TLS_* (docs/security.md).
  if (!ToOptionalString(target, "target", &target_string) ||
      !ToOptionalString(token_file, "token_file", &options.security.token_file) ||
      !ToOptionalString(token, "token", &options.security.token) ||
      !ToOptionalString(tls_ca, "tls_ca", &options.security.tls_ca_file) ||
      !ToOptionalString(tls_cert, "tls_cert", &options.security.tls_cert_file) ||
      !ToOptionalString(tls_key, "tls_key", &options.security.tls_key_file) ||
      !ToOptionalString(tls_server_name, "tls_server_name", &options.security.tls_server_name) ||
      !ToLabels(labels, &options.labels)) {
    return nullptr;
  }
  if (!target_string.empty()) options.target = std::move(target_string);
  options.labels_from_environment = labels_from_environment != 0;
  if (buffer_bytes > 0) options.buffer_bytes = static_cast<size_t>(buffer_bytes);
  options.client_name = "torchmon-python";
  if (client_name != nullptr && !ToString(client_name, "client_name", &options.client_name)) {
    return nullptr;
  }

  Ref self(PyType_GenericAlloc(type, 0));
  if (!self) return nullptr;
  auto* obj = reinterpret_cast<ClientObject*>(self.get());
  obj->client = nullptr;
  if (!Guarded([&] { obj->client = new ClientPtr(MakeClient(std::move(options))); })) {
    return nullptr;
  }
  return self.release();
}

void ClientDealloc(PyObject* self) {
  auto* obj = reinterpret_cast<ClientObject*>(self);
  delete obj->client;  // the deleter releases the GIL if this was the last owner
  FreeObject(self);
}

Client& ClientOf(PyObject* self) { return **reinterpret_cast<ClientObject*>(self)->client; }

// flush(timeout: float seconds) -> bool. Waits with the GIL released so
// other Python threads keep running.
PyObject* ClientFlush(PyObject* self, PyObject* arg) {
  const double timeout_s = PyFloat_AsDouble(arg);
  if (timeout_s == -1.0 && PyErr_Occurred()) return nullptr;
  if (!(timeout_s >= 0) || timeout_s > 1e9) {
    PyErr_SetString(PyExc_ValueError, "timeout must be between 0 and 1e9 seconds");
    return nullptr;
  }
  Client& client = ClientOf(self);
  bool ok = false;
  Py_BEGIN_ALLOW_THREADS
  ok = client.Flush(std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000))).ok();
  Py_END_ALLOW_THREADS
  return PyBool_FromLong(ok);
}

// Converts a Python value to torch.monitor's data_value_t. bool is tested
// before int: in Python, True is an int.
bool ToEventValue(const std::string& key, PyObject* value, EventValue* out) {
  if (PyBool_Check(value)) {
    *out = value == Py_True;
  } else if (PyLong_Check(value)) {
    const long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return false;
    *out = static_cast<int64_t>(v);
  } else if (PyFloat_Check(value)) {
    *out = PyFloat_AsDouble(value);
  } else if (PyUnicode_Check(value)) {
    std::string s;
    if (!ToString(value, "an event value", &s)) return false;
    *out = std::move(s);
  } else {
    PyErr_Format(PyExc_TypeError, "event data[\"%s\"] must be str, float, int or bool, not %s",
                 key.c_str(), TypeName(value).c_str());
    return false;
  }
  return true;
}

// log_event(name, timestamp_us, data, labels=None)
PyObject* ClientLogEvent(PyObject* self, PyObject* args, PyObject* kwargs) {
  static const char* keywords[] = {"name", "timestamp_us", "data", "labels", nullptr};
  PyObject *name = nullptr, *data = nullptr, *labels = Py_None;
  long long timestamp_us = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "ULO!|O", const_cast<char**>(keywords), &name,
                                   &timestamp_us, &PyDict_Type, &data, &labels)) {
    return nullptr;
  }
  Event event;
  if (!ToString(name, "name", &event.name) || !ToLabels(labels, &event.labels)) return nullptr;
  event.timestamp =
      std::chrono::system_clock::time_point(std::chrono::microseconds(timestamp_us));
  Py_ssize_t pos = 0;
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  while (PyDict_Next(data, &pos, &key, &value)) {
    std::string k;
    EventValue v;
    if (!ToString(key, "an event data key", &k) || !ToEventValue(k, value, &v)) return nullptr;
    event.data.emplace(std::move(k), std::move(v));
  }
  if (!Guarded([&] { ClientOf(self).LogEvent(event); })) return nullptr;
  Py_RETURN_NONE;
}

PyObject* ClientStatsDict(PyObject* self, PyObject*) {
  const ClientStats s = ClientOf(self).Stats();
  Ref d(PyDict_New());
  if (!d) return nullptr;
  const std::pair<const char*, uint64_t> fields[] = {
      {"samples_added", s.samples_added},
      {"samples_sent", s.samples_sent},
      {"samples_delivered", s.samples_delivered},
      {"samples_dropped", s.samples_dropped},
      {"events_logged", s.events_logged},
      {"events_sent", s.events_sent},
      {"events_delivered", s.events_delivered},
      {"events_dropped", s.events_dropped},
      {"batches_sent", s.batches_sent},
      {"batches_resent", s.batches_resent},
      {"batches_acked", s.batches_acked},
      {"errors", s.errors},
      {"connects", s.connects},
      {"daemon_restarts", s.daemon_restarts},
  };
  for (const auto& [key, value] : fields) {
    if (!SetItem(d.get(), key, PyLong_FromUnsignedLongLong(value))) return nullptr;
  }
  return d.release();
}

PyObject* ClientTakeErrors(PyObject* self, PyObject*) {
  std::vector<std::string> errors;
  if (!Guarded([&] { errors = ClientOf(self).TakeErrors(); })) return nullptr;
  Ref list(PyList_New(static_cast<Py_ssize_t>(errors.size())));
  if (!list) return nullptr;
  for (size_t i = 0; i < errors.size(); ++i) {
    PyObject* s = FromString(errors[i]);
    if (s == nullptr) return nullptr;
    PyList_SetItem(list.get(), static_cast<Py_ssize_t>(i), s);  // steals s
  }
  return list.release();
}

PyObject* ClientGetTarget(PyObject* self, void*) { return FromString(ClientOf(self).target()); }

PyObject* ClientGetLabels(PyObject* self, void*) {
  Ref d(PyDict_New());
  if (!d) return nullptr;
  for (const auto& [k, v] : ClientOf(self).labels()) {
    Ref value(FromString(v));
    if (!value || PyDict_SetItemString(d.get(), k.c_str(), value.get()) != 0) return nullptr;
  }
  return d.release();
}

PyMethodDef client_methods[] = {
    {"flush", ClientFlush, METH_O,
     "flush(timeout) -> bool\n\nWaits (GIL released) until everything recorded so far is "
     "acknowledged by the daemon, at most `timeout` seconds. Returns True if it was."},
    {"log_event", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(ClientLogEvent)),
     METH_VARARGS | METH_KEYWORDS,
     "log_event(name, timestamp_us, data, labels=None)\n\nSends an event to the daemon."},
    {"stats", ClientStatsDict, METH_NOARGS, "stats() -> dict\n\nCumulative counters."},
    {"take_errors", ClientTakeErrors, METH_NOARGS,
     "take_errors() -> list\n\nThe daemon's refusals not yet taken, oldest first."},
    {nullptr, nullptr, 0, nullptr}};

PyGetSetDef client_getset[] = {
    {"target", ClientGetTarget, nullptr, "The resolved target.", nullptr},
    {"labels", ClientGetLabels, nullptr, "The resolved identity labels.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyType_Slot client_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(ClientNew)},
    {Py_tp_dealloc, reinterpret_cast<void*>(ClientDealloc)},
    {Py_tp_methods, client_methods},
    {Py_tp_getset, client_getset},
    {Py_tp_doc, const_cast<char*>("A connection to torchmond and its sender thread.")},
    {0, nullptr}};

PyType_Spec client_spec = {"torchmon._torchmon.Client", sizeof(ClientObject), 0,
                           Py_TPFLAGS_DEFAULT, client_slots};

// ---------------------------------------------------------------------------
// Stat

// One window's aggregates as this process keeps them, torch.monitor's
// (torchmon/monitor_windows.h). The daemon's aggregation is the one that
// counts across processes (docs/semantics.md has both views).
using LocalWindow = monitor::StatWindows<double>::Values;

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
        reported_(Reported(aggregations, report_value)),
        stat_(*client_, std::move(name), StatAggregations(aggregations, quantiles),
              std::chrono::milliseconds(protocol::DaemonWindowMs(window_us / 1000)),
              Options(max_samples, std::move(labels), histogram,
                      std::max<int64_t>(window_us / 1000, 1))),
        windows_(std::chrono::milliseconds(window_us / 1000), max_samples) {}

  // torch.monitor's Stat::add (monitor_windows.h); every sample also goes
  // to the daemon, which caps by its own windows. Returns how many windows
  // were logged with samples, 0 to 2, in logged(0..n).
  int Add(double v) {
    const int logged = windows_.Add(v);
    stat_.add(v, WallMicros());
    return logged;
  }

  // Samples in the window being filled (torch.monitor.Stat.count).
  int64_t Count() const { return windows_.count(); }

  // The last logged window (torch.monitor.Stat.get()).
  const LocalWindow& LastLogged() const { return windows_.last_logged(); }

  // Logs the window being filled, as torch.monitor does when a Stat is
  // destroyed. Returns true if it held samples (logged(0) holds them).
  bool CloseOpenWindow() { return windows_.Close() > 0; }

  // The windows the last Add or CloseOpenWindow logged, oldest first.
  const LocalWindow& logged(int i) const { return windows_.logged(i); }
  // The aggregations get() and the window events carry.
  const std::vector<Aggregation>& reported() const { return reported_; }
  const Stat& stat() const { return stat_; }

 private:
  static std::vector<Aggregation> Reported(const std::vector<Aggregation>& aggregations,
                                           bool report_value) {
    std::vector<Aggregation> out;
    for (Aggregation a : aggregations) {
      if (a != Aggregation::VALUE || report_value) out.push_back(a);
    }
    return out;
  }

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
  std::vector<Aggregation> reported_;
  Stat stat_;
  monitor::StatWindows<double> windows_;
};

struct StatObject {
  PyObject_HEAD
  LocalStat* stat;      // never null once tp_new returned
  PyObject* on_window;  // None or a callable, owned
  // Every live Stat, for report_open_windows() at exit: two pointers here
  // instead of a weak reference and a set entry per stat (about 120 bytes).
  // Changed only with the GIL held.
  StatObject* live_prev;
  StatObject* live_next;
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
  const ClientPtr& client_ptr = *reinterpret_cast<ClientObject*>(client)->client;
  if (!Guarded([&] {
        obj->stat = new LocalStat(client_ptr, std::move(name_string), six, quantiles,
                                  window_us, max_samples, std::move(label_list), histogram != 0,
                                  report_value != 0);
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
  delete obj->stat;
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
  LocalStat& stat = StatOf(self);
  const int logged = stat.Add(v);
  if (logged == 0) Py_RETURN_NONE;
  // Copies: a handler may add to this stat again.
  const LocalWindow windows[2] = {stat.logged(0), stat.logged(1)};
  for (int i = 0; i < logged; ++i) ReportWindow(self, windows[i]);
  Py_RETURN_NONE;
}

PyObject* StatReportOpenWindow(PyObject* self, PyObject*) {
  // The package's __del__ calls this, also on an object whose __init__
  // failed or never ran (no LocalStat then): nothing to report.
  if (reinterpret_cast<StatObject*>(self)->stat == nullptr) Py_RETURN_NONE;
  if (StatOf(self).CloseOpenWindow()) ReportWindow(self, StatOf(self).logged(0));
  Py_RETURN_NONE;
}

// report_open_windows(): report_open_window() on every live Stat (at exit).
// The handlers may create or drop stats, so it works on strong references
// taken first.
PyObject* ReportOpenWindows(PyObject*, PyObject*) {
  std::vector<PyObject*> stats;
  for (StatObject* obj = live_stats; obj != nullptr; obj = obj->live_next) {
    stats.push_back(reinterpret_cast<PyObject*>(obj));
    Py_INCREF(stats.back());
  }
  for (PyObject* stat : stats) {
    if (StatOf(stat).CloseOpenWindow()) ReportWindow(stat, StatOf(stat).logged(0));
  }
  for (PyObject* stat : stats) Py_DECREF(stat);
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
PyType_Spec stat_spec = {"torchmon._torchmon.Stat", sizeof(StatObject), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, stat_slots};

PyMethodDef module_methods[] = {
    {"report_open_windows", ReportOpenWindows, METH_NOARGS,
     "report_open_windows()\n\nreport_open_window() on every live Stat."},
    {nullptr, nullptr, 0, nullptr}};

// ---------------------------------------------------------------------------
// Module

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "_torchmon",
    "Native core of torchmon: the C++ client, bound with CPython's limited C API (abi3).",
    -1,
    module_methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr};

}  // namespace
}  // namespace torchmon::python

PyMODINIT_FUNC PyInit__torchmon() {
  using namespace torchmon::python;
  Ref module(PyModule_Create(&module_def));
  if (!module) return nullptr;
  if (client_type == nullptr) {
    client_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&client_spec));
    if (client_type == nullptr) return nullptr;
  }
  if (stat_type == nullptr) {
    stat_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&stat_spec));
    if (stat_type == nullptr) return nullptr;
  }
  // PyModule_AddObjectRef (3.10) leaves our reference to the type alone.
  if (PyModule_AddObjectRef(module.get(), "Client", reinterpret_cast<PyObject*>(client_type)) < 0 ||
      PyModule_AddObjectRef(module.get(), "Stat", reinterpret_cast<PyObject*>(stat_type)) < 0 ||
      PyModule_AddStringConstant(module.get(), "__version__", TORCHMON_VERSION) < 0) {
    return nullptr;
  }
  return module.release();
}

#include "client_type.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace torchmon::python {
namespace {

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

}  // namespace

PyTypeObject* client_type = nullptr;

PyType_Spec* ClientSpec() {
  static PyType_Spec client_spec = {"torchmon._torchmon.Client", sizeof(ClientObject), 0,
                           Py_TPFLAGS_DEFAULT, client_slots};
  return &client_spec;
}

}  // namespace torchmon::python

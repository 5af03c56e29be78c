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
//
// The parts: py_support (references, conversions), client_type (Client),
// stat_type (Stat and its in-process windows), wait_counters (WaitCounter
// and the backend of torch's own); this file makes the module.
#ifndef Py_LIMITED_API
#error "_torchmon is built against the limited C API: define Py_LIMITED_API"
#endif

#include "client_type.h"
#include "py_support.h"
#include "stat_type.h"
#include "torchmon/wait_counter.h"
#include "step_hook.h"
#include "wait_counters.h"

#ifndef TORCHMON_VERSION
#error "TORCHMON_VERSION must be defined by the build"
#endif

namespace torchmon::python {
namespace {

PyMethodDef module_methods[] = {
    {"report_open_windows", ReportOpenWindows, METH_NOARGS,
     "report_open_windows()\n\nreport_open_window() on every live Stat."},
    {"wait_counter", NewWaitCounter, METH_VARARGS,
     "wait_counter(client, key)\n\nA torchmon::WaitCounter of `key` on `client`, as a capsule."},
    {"wait_counter_begin", WaitCounterBegin, METH_O,
     "wait_counter_begin(counter)\n\nA wait begins."},
    {"wait_counter_end", WaitCounterEnd, METH_VARARGS,
     "wait_counter_end(counter, waited_ns)\n\nA wait ends, having lasted waited_ns."},
    {"enable_torch_wait_counters", EnableTorchWaitCounters, METH_O,
     "enable_torch_wait_counters(client)\n\nRecord torch's wait counters on `client`."},
    {"torch_wait_counter_backend", TorchWaitCounterBackend, METH_NOARGS,
     "torch_wait_counter_backend()\n\nWhat the backend of torch's wait counters has seen."},
    {"step_interval_hook", NewStepIntervalHook, METH_VARARGS,
     "step_interval_hook(client, on_due, early, every, on_error)\n\n"
     "The optimizer step post-hook of PyTorch's own metrics (step_hook.h)."},
    {"step_split", StepSplit, METH_VARARGS,
     "step_split(hook, window_s, every_step) -> add_wait\n\n"
     "Split each step of `hook` into collective waits and the rest (step_hook.h)."},
    {"step_split_record", StepSplitRecord, METH_VARARGS,
     "step_split_record(hook, extra_waited)\n\nRecord the step that just ended (step_hook.h)."},
    {nullptr, nullptr, 0, nullptr}};

// ---------------------------------------------------------------------------
// Module

PyTypeObject* stat_type = nullptr;

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
    client_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(ClientSpec()));
    if (client_type == nullptr) return nullptr;
  }
  if (stat_type == nullptr) {
    stat_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(StatSpec()));
    if (stat_type == nullptr) return nullptr;
  }
  // PyModule_AddObjectRef (3.10) leaves our reference to the type alone.
  if (PyModule_AddObjectRef(module.get(), "Client", reinterpret_cast<PyObject*>(client_type)) < 0 ||
      PyModule_AddObjectRef(module.get(), "Stat", reinterpret_cast<PyObject*>(stat_type)) < 0 ||
      PyModule_AddStringConstant(module.get(), "__version__", TORCHMON_VERSION) < 0 ||
      // The windows of a wait counter's series, which torchmon.torch's
      // other series of PyTorch's own metrics share.
      PyModule_AddIntConstant(module.get(), "WAIT_COUNTER_WINDOW_MS",
                              static_cast<long>(torchmon::WaitCounter::kWindow.count())) < 0) {
    return nullptr;
  }
  return module.release();
}

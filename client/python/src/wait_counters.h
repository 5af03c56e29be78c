// torchmon._torchmon's wait counters: torchmon::WaitCounter for Python
// (what torchmon._WaitCounter is built on), and the backend that receives
// PyTorch's own wait counters through c10's dynamic-backend C ABI
// (torch >= 2.6; docs/torch-metrics.md).
//
// c10 looks the backend up once, with dlsym(RTLD_DEFAULT,
// "c10_monitor_wait_counter_dynamic_backend_init_v1"), when the process
// makes its first wait counter; the symbol is this module's second export
// (exports.map), found only once the module is in the global scope
// (torchmon._torch_metrics loads it so, before torch's first counter). The
// backend names each key's series with torchmon::WaitCounter, on the client
// given to enable_torch_wait_counters.
#ifndef TORCHMON_PYTHON_WAIT_COUNTERS_H_
#define TORCHMON_PYTHON_WAIT_COUNTERS_H_

#include "py_support.h"

namespace torchmon::python {

// wait_counter(client, key) -> capsule of a torchmon::WaitCounter
PyObject* NewWaitCounter(PyObject* module, PyObject* args);
// wait_counter_begin(capsule)
PyObject* WaitCounterBegin(PyObject* module, PyObject* capsule);
// wait_counter_end(capsule, waited_ns)
PyObject* WaitCounterEnd(PyObject* module, PyObject* args);
// enable_torch_wait_counters(client): the client the backend's keys record on.
PyObject* EnableTorchWaitCounters(PyObject* module, PyObject* client);
// torch_wait_counter_backend() -> {"inits": keys torch asked for,
//   "probed": whether torch asked for kProbeKey, "enabled": a client is set}
PyObject* TorchWaitCounterBackend(PyObject* module, PyObject* noargs);

// The key torchmon._torch_metrics makes a torch wait counter of to learn
// whether torch found the backend: counted, never recorded.
inline constexpr char kProbeKey[] = "torchmon.backend_probe";

}  // namespace torchmon::python

#endif  // TORCHMON_PYTHON_WAIT_COUNTERS_H_

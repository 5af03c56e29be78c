// torchmon._torchmon.step_interval_hook: the optimizer step post-hook of
// PyTorch's own metrics (docs/torch-metrics.md), in C++. torch calls it on
// the training thread after every optimizer step, where a Python hook's
// code and data are cold: measured in a 2.5 ms CPU step, the Python hook
// took 6.5 µs and slowed the step by about 0.5 % (docs/performance.md).
// This one reads the clock and adds one sample to a native torchmon::Stat:
// no Python code runs on a step but the call itself, except where DDP's
// logging data may have changed (on_due, below).
#ifndef TORCHMON_PYTHON_STEP_HOOK_H_
#define TORCHMON_PYTHON_STEP_HOOK_H_

#include "py_support.h"

namespace torchmon::python {

// step_interval_hook(client, on_due, early, every, on_error, min_gap_s=0) -> hook
//
// `hook(optimizer, args, kwargs)` records, per optimizer object, the wall
// time since its previous step as a sample of
// torch.optim.step_interval_s{optimizer=<its class name>} on `client`
// (count, mean, max and a native histogram, in torchmon::WaitCounter's
// windows). Then, counting the steps of every optimizer, it calls
// `on_due()` at steps 1 to `early` and after them at every `every`-th
// step that comes at least `min_gap_s` seconds after the last call. Never
// raises into the step: an error (an optimizer that takes no weak
// reference, no memory) calls `on_error(exception)` once and turns the
// hook off. Optimizers are held weakly. Call with the GIL held.
PyObject* NewStepIntervalHook(PyObject* module, PyObject* args);

// step_split(hook, window_s, every_step) -> add_wait
//
// The straggler split of docs/torch-metrics.md on `hook` (a
// step_interval_hook): per step of the first optimizer that stepped, the
// seconds waited in collectives as a sample of torch.dist.wait_s and the
// rest of the step's interval as one of torch.dist.compute_s (count, mean
// and sum, in windows of `window_s`). `add_wait(seconds)`, cheap, adds to
// what the current step waited; any thread may call it with the GIL held.
// every_step false: a step's split is recorded only by step_split_record,
// for jobs whose waits are measured per sampled step elsewhere (DDP).
// Called again, only changes every_step.
PyObject* StepSplit(PyObject* module, PyObject* args);

// step_split_record(hook, extra_waited): records the step that just ended
// (once), with `extra_waited` seconds of waits added to what add_wait saw.
PyObject* StepSplitRecord(PyObject* module, PyObject* args);

}  // namespace torchmon::python

#endif  // TORCHMON_PYTHON_STEP_HOOK_H_

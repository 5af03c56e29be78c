#include "step_hook.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client_type.h"
#include "torchmon/wait_counter.h"

namespace torchmon::python {
namespace {

constexpr char kStepHookCapsule[] = "torchmon.step_interval_hook";

struct StepHook {
  struct Optimizer {
    Ref ref;  // a weak reference to the optimizer
    std::chrono::steady_clock::time_point last;
    std::unique_ptr<Stat> stat;
  };

  ClientPtr client;
  Ref on_due;
  Ref on_error;
  uint64_t early = 0;
  uint64_t every = 1;
  // After the early steps, on_due runs no more often than this: a step of
  // a few ms would otherwise run Python code on the training thread
  // hundreds of times a second.
  std::chrono::steady_clock::duration min_gap{0};
  std::chrono::steady_clock::time_point last_due{};
  uint64_t steps = 0;
  bool on = true;
  // The straggler split (step_split, step_hook.h): per step of the primary
  // optimizer (the first of `optimizers`), the seconds the process waited
  // in collectives and the rest. Touched with the GIL held only.
  struct Split {
    bool on = false;
    bool every_step = true;  // false: a step's split is recorded by step_split_record
    double waited = 0;       // since the primary optimizer's last step
    double step_s = -1;      // the step that just ended (-1: none to record)
    double step_waited = 0;  // what was waited in it
    std::unique_ptr<Stat> compute, wait;
  } split;
  // Most jobs step one optimizer (a GAN two): a vector scanned in order.
  std::vector<Optimizer> optimizers;
};

StepHook& HookOf(PyObject* capsule) {
  return *static_cast<StepHook*>(PyCapsule_GetPointer(capsule, kStepHookCapsule));
}

// Reports the pending exception to on_error once and turns the hook off.
void Fail(StepHook& hook) {
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  PyErr_NormalizeException(&type, &value, &traceback);
  Ref owned_type(type), exception(value), owned_traceback(traceback);
  hook.on = false;
  if (hook.on_error && exception) {
    Ref result(PyObject_CallFunctionObjArgs(hook.on_error.get(), exception.get(), nullptr));
    if (!result) PyErr_Clear();  // the step goes on whatever on_error does
  }
}

// The optimizer's entry, made at its first step; null with an exception set
// on failure. `made` says whether it was made now. Nothing here lets
// another thread run between the scan and the insertion (no Python code
// runs once the entry is built), so the entry returned stays valid until
// the caller calls into Python.
StepHook::Optimizer* EntryOf(StepHook& hook, PyObject* optimizer, bool* made) {
  *made = false;
  for (StepHook::Optimizer& entry : hook.optimizers) {
    if (PyWeakref_GetObject(entry.ref.get()) == optimizer) return &entry;
  }
  // Python code may run here (a class's __name__, a weakref): built first,
  // inserted after.
  const std::string optimizer_class = TypeName(optimizer);
  StepHook::Optimizer entry;
  entry.ref = Ref(PyWeakref_NewRef(optimizer, nullptr));
  if (!entry.ref) return nullptr;
  const bool ok = Guarded([&] {
    StatOptions options;
    options.histogram = true;
    options.labels = {{"optimizer", optimizer_class}};
    entry.stat = std::make_unique<Stat>(
        *hook.client, "torch.optim.step_interval_s",
        std::vector<StatAggregation>{Aggregation::COUNT, Aggregation::MEAN, Aggregation::MAX},
        WaitCounter::kWindow, std::move(options));
  });
  if (!ok) return nullptr;
  for (auto it = hook.optimizers.begin(); it != hook.optimizers.end();) {
    // Forget optimizers that are gone.
    it = PyWeakref_GetObject(it->ref.get()) == Py_None ? hook.optimizers.erase(it) : it + 1;
  }
  *made = true;
  return &hook.optimizers.emplace_back(std::move(entry));
}

// Records the step that just ended, if any and not yet recorded: waited
// in it (plus `extra_waited`, what was waited where no Python code sees it)
// and the rest of its interval.
void RecordSplit(StepHook::Split& split, double extra_waited) {
  if (split.step_s < 0) return;
  const double waited = std::min(split.step_waited + extra_waited, split.step_s);
  split.wait->add(waited);
  split.compute->add(split.step_s - waited);
  split.step_s = -1;
}

PyObject* CallHook(PyObject* capsule, PyObject* args) {
  StepHook& hook = HookOf(capsule);
  if (!hook.on) Py_RETURN_NONE;
  const auto now = std::chrono::steady_clock::now();
  if (PyTuple_Size(args) < 1) {
    PyErr_SetString(PyExc_TypeError, "step hook: expected (optimizer, args, kwargs)");
    return nullptr;
  }
  PyObject* optimizer = PyTuple_GetItem(args, 0);
  bool made = false;
  StepHook::Optimizer* entry = EntryOf(hook, optimizer, &made);
  if (entry == nullptr) {
    Fail(hook);
    Py_RETURN_NONE;
  }
  const double interval = std::chrono::duration<double>(now - entry->last).count();
  if (!made) entry->stat->add(interval);
  entry->last = now;
  if (hook.split.on && entry == &hook.optimizers.front()) {
    StepHook::Split& split = hook.split;
    split.step_s = made ? -1 : interval;
    split.step_waited = split.waited;
    split.waited = 0;
    if (split.every_step) RecordSplit(split, 0);
  }
  ++hook.steps;
  if (hook.on_due && (hook.steps <= hook.early ||
                      (hook.steps % hook.every == 0 && now - hook.last_due >= hook.min_gap))) {
    hook.last_due = now;
    Ref result(PyObject_CallNoArgs(hook.on_due.get()));
    if (!result) Fail(hook);
  }
  Py_RETURN_NONE;
}

PyMethodDef hook_def = {
    "step_post_hook", CallHook, METH_VARARGS,
    "step_post_hook(optimizer, args, kwargs)\n\n"
    "torchmon's optimizer step post-hook: records the time since this optimizer's last step."};

void DeleteHook(PyObject* capsule) {
  delete static_cast<StepHook*>(PyCapsule_GetPointer(capsule, kStepHookCapsule));
}

StepHook* HookOfCallable(PyObject* hook) {
  PyObject* capsule = PyCFunction_Check(hook) ? PyCFunction_GetSelf(hook) : nullptr;
  if (capsule == nullptr || !PyCapsule_IsValid(capsule, kStepHookCapsule)) {
    PyErr_Format(PyExc_TypeError, "expected a step_interval_hook, not %s",
                 TypeName(hook).c_str());
    return nullptr;
  }
  return &HookOf(capsule);
}

PyObject* AddWait(PyObject* capsule, PyObject* seconds) {
  const double s = PyFloat_AsDouble(seconds);
  if (s == -1.0 && PyErr_Occurred()) return nullptr;
  if (s > 0) HookOf(capsule).split.waited += s;
  Py_RETURN_NONE;
}

PyMethodDef add_wait_def = {
    "add_wait", AddWait, METH_O,
    "add_wait(seconds)\n\nThe process waited `seconds` in a collective."};

}  // namespace

PyObject* StepSplit(PyObject*, PyObject* args) {
  PyObject* callable;
  double window_s;
  int every_step;
  if (!PyArg_ParseTuple(args, "Odp:step_split", &callable, &window_s, &every_step)) {
    return nullptr;
  }
  StepHook* hook = HookOfCallable(callable);
  if (hook == nullptr) return nullptr;
  if (!(window_s >= 0.001 && window_s <= 86400)) {
    PyErr_Format(PyExc_ValueError, "step_split(): a window of %R s is outside 0.001 to 86400",
                 PyTuple_GetItem(args, 1));
    return nullptr;
  }
  StepHook::Split& split = hook->split;
  if (!split.on) {
    const auto window = std::chrono::milliseconds(std::llround(window_s * 1000));
    const bool ok = Guarded([&] {
      const std::vector<StatAggregation> aggregations{Aggregation::COUNT, Aggregation::MEAN,
                                                      Aggregation::SUM};
      split.compute = std::make_unique<Stat>(*hook->client, "torch.dist.compute_s",
                                             aggregations, window);
      split.wait = std::make_unique<Stat>(*hook->client, "torch.dist.wait_s", aggregations,
                                          window);
    });
    if (!ok) return nullptr;
    split.on = true;
  }
  split.every_step = every_step != 0;
  return PyCFunction_NewEx(&add_wait_def, PyCFunction_GetSelf(callable), nullptr);
}

PyObject* StepSplitRecord(PyObject*, PyObject* args) {
  PyObject* callable;
  double extra_waited;
  if (!PyArg_ParseTuple(args, "Od:step_split_record", &callable, &extra_waited)) return nullptr;
  StepHook* hook = HookOfCallable(callable);
  if (hook == nullptr) return nullptr;
  if (hook->split.on) RecordSplit(hook->split, std::max(extra_waited, 0.0));
  Py_RETURN_NONE;
}

PyObject* NewStepIntervalHook(PyObject*, PyObject* args) {
  PyObject *client, *on_due, *on_error;
  unsigned long long early, every;
  double min_gap_s = 0;
  if (!PyArg_ParseTuple(args, "OOKKO|d:step_interval_hook", &client, &on_due, &early, &every,
                        &on_error, &min_gap_s)) {
    return nullptr;
  }
  if (!PyObject_TypeCheck(client, client_type)) {
    PyErr_Format(PyExc_TypeError, "step_interval_hook(): expected a Client, not %s",
                 TypeName(client).c_str());
    return nullptr;
  }
  if (every == 0) {
    PyErr_SetString(PyExc_ValueError, "step_interval_hook(): every must be at least 1");
    return nullptr;
  }
  if (!(min_gap_s >= 0 && min_gap_s <= 3600)) {
    PyErr_Format(PyExc_ValueError, "step_interval_hook(): a min_gap of %R s is outside 0 to 3600",
                 PyTuple_GetItem(args, 5));
    return nullptr;
  }
  auto hook = std::make_unique<StepHook>();
  hook->client = ClientPtrOf(client);
  if (on_due != Py_None) hook->on_due = Ref((Py_INCREF(on_due), on_due));
  if (on_error != Py_None) hook->on_error = Ref((Py_INCREF(on_error), on_error));
  hook->early = early;
  hook->every = every;
  hook->min_gap = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(min_gap_s));
  Ref capsule(PyCapsule_New(hook.get(), kStepHookCapsule, DeleteHook));
  if (!capsule) return nullptr;
  hook.release();  // the capsule owns it now
  // Named for the module that installs it, as a Python hook of it would be.
  Ref module(PyUnicode_FromString("torchmon._torch_metrics"));
  if (!module) return nullptr;
  return PyCFunction_NewEx(&hook_def, capsule.get(), module.get());
}

}  // namespace torchmon::python

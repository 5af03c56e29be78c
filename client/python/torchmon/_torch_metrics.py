"""PyTorch's own metrics, with no code (docs/torch-metrics.md).

``torchmon.torch.enable_metrics()`` (or ``TORCHMON_TORCH_METRICS=1`` in the
environment, read by the ``torchmon-torch-metrics.pth`` the wheel installs)
reports, per process and window, what PyTorch measures itself:

- c10's wait counters (torch >= 2.6), through the backend in ``_torchmon``;
- torch.compile's compilations, their seconds, failures, graph breaks and
  guards (torch >= 2.0);
- DDP's sampled forward compute, backward compute, backward communication
  and overlap times (``DistributedDataParallel._get_ddp_logging_data()``);
- optimizer steps: the wall time between steps, per optimizer class
  (torch >= 2.0's global step hooks);
- the straggler split of each step (torch >= 2.0): how long the process
  waited in torch.distributed's collectives and how long it did anything
  else, which tells the rank that holds a synchronous job back from the
  ranks that wait for it (docs/torch-metrics.md, "Stragglers");
- CUDA memory: allocated, reserved and peak bytes per device, and
  out-of-memory events, where CUDA is in use.

What the running torch lacks is reported once on stderr, never per call;
CUDA is left out without a word where torch has none.

This module does not import torch at import: ``boot()``, run at interpreter
start by the .pth file, only puts the backend where c10 finds it and waits
for torch to be imported.
"""

from __future__ import annotations

import datetime as _dt
import importlib
import importlib.abc
import importlib.util
import os
import sys
import threading
import time
import weakref
from typing import Any, Callable, Dict, Iterable, List, Optional

from . import _torchmon

ENV_SWITCH = "TORCHMON_TORCH_METRICS"
# The windows of every series here: the wait counters' (torchmon::WaitCounter).
WINDOW = _dt.timedelta(milliseconds=_torchmon.WAIT_COUNTER_WINDOW_MS)

# c10 asks for this key's backend once torchmon probes it (wait_counters.h):
# whether it asked tells whether torch found the backend.
_PROBE_KEY = "torchmon.backend_probe"

# DDP refreshes its logging data at iterations 1..10 and then every
# DDP_SAMPLE_RATE (torch's kDDPRuntimeLoggingSampleRate); reading it costs
# microseconds, so it is read only where it may have changed.
_DDP_EARLY_ITERATIONS = 12
_DDP_POLL_EVERY = 4
# The rate at which DDP samples its timings on CPU (torch's default: every
# 100th iteration), so that the straggler split of DDP's gradient
# all-reduce, which no Python code waits for, is recorded every 4th step.
# On CPU its timer reads the clock; on CUDA it would synchronize events,
# and the split comes from NCCL's completion hook instead.
_DDP_CPU_SAMPLE_RATE = _DDP_POLL_EVERY

# The windows of the straggler split's series: short enough to name a
# straggler within seconds, long enough to hold many steps.
DIST_WINDOW_ENV = "TORCHMON_TORCH_DIST_WINDOW_S"
_DIST_WINDOW_S = 10.0
# After the first steps, the Python code of the optimizer step hook (DDP's
# data read, the split of a sampled DDP step recorded, NCCL groups hooked)
# runs at most this many times a split window: every 4th step of 3.6 ms
# cost 1 to 2 % of the step on CPU (docs/performance.md); 100 samples a
# window are plenty for a mean.
_DUE_PER_DIST_WINDOW = 100


def _ddp_may_have_changed(calls: int) -> bool:
    """Whether DDP's logging data may hold a new iteration at the
    `calls`-th forward or step."""
    return calls <= _DDP_EARLY_ITERATIONS or calls % _DDP_POLL_EVERY == 0


_DDP_TIMES = (
    ("forward_compute_time", "torch.ddp.forward_compute_s"),
    ("backward_compute_time", "torch.ddp.backward_compute_s"),
    ("backward_comm_time", "torch.ddp.backward_comm_s"),
    ("backward_compute_comm_overlap_time", "torch.ddp.backward_overlap_s"),
)

_CUDA_SAMPLE_EVERY_S = 1.0

_lock = threading.Lock()
_metrics: Optional["_Metrics"] = None
_finder: Optional["_PostImportFinder"] = None
_booted = False


def _report(message: str) -> None:
    print(f"torchmon: {message}", file=sys.stderr, flush=True)


def _make_backend_global() -> None:
    """Puts _torchmon in the process's global symbol scope, where c10's
    dlsym(RTLD_DEFAULT, ...) finds the wait-counter backend it exports.
    Python loaded it RTLD_LOCAL; dlopen of the same file with RTLD_NOLOAD |
    RTLD_GLOBAL promotes it without loading anything."""
    import ctypes
    ctypes.CDLL(_torchmon.__file__, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)


def boot() -> None:
    """Run by torchmon-torch-metrics.pth at interpreter start when the
    switch is set: the backend goes global now, before torch can make its
    first wait counter, and the rest is enabled once torch is imported.
    Never raises: a failure is reported once and the process goes on.
    Runs once, however often `site` is asked to process the .pth."""
    global _finder, _booted
    if _booted:
        return
    _booted = True
    try:
        _make_backend_global()
        # NCCL times its collectives (the straggler split, _hook_nccl_groups)
        # only if asked before a process group is made.
        os.environ.setdefault("TORCH_NCCL_ENABLE_TIMING", "1")
        if "torch" in sys.modules:
            enable()
            return
        _finder = _PostImportFinder({"torch": lambda _module: enable()})
        sys.meta_path.insert(0, _finder)
    except Exception as e:  # noqa: BLE001 - never break the interpreter's start
        _report(f"{ENV_SWITCH}: PyTorch's metrics are off: {type(e).__name__}: {e}")


def enable(client: Any = None) -> Dict[str, str]:
    """Reports PyTorch's own metrics on ``client`` (default: torchmon's
    default client) from now on; see the module's docstring. Idempotent: a
    second call changes nothing and returns the same status. Returns what
    is reported: source -> "on", or why not."""
    global _metrics
    with _lock:
        if _metrics is None:
            from . import default_client
            _make_backend_global()
            _metrics = _Metrics(client if client is not None else default_client())
            _metrics.install()
        return dict(_metrics.status)


def status() -> Dict[str, str]:
    """What enable() reported: source -> "on", or why not ({} before)."""
    with _lock:
        return dict(_metrics.status) if _metrics is not None else {}


class _PostImportFinder(importlib.abc.MetaPathFinder):
    """Calls hooks[name](module) once the module `name` has been executed,
    however it is imported. Sits first in sys.meta_path, finds the spec
    through the finders after it and wraps the loader's exec_module."""

    def __init__(self, hooks: Dict[str, Callable[[Any], None]]) -> None:
        self._hooks = dict(hooks)
        self._busy = threading.local()

    def add(self, name: str, hook: Callable[[Any], None]) -> None:
        self._hooks[name] = hook

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        hook = self._hooks.get(fullname)
        if hook is None or getattr(self._busy, "name", None) == fullname:
            return None
        self._busy.name = fullname
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._busy.name = None
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return None
        del self._hooks[fullname]
        loader = spec.loader
        original = loader.exec_module

        def exec_module(module: Any) -> None:
            original(module)
            try:
                hook(module)
            except Exception as e:  # noqa: BLE001 - an import must not fail for us
                _report(f"after importing {fullname}: {type(e).__name__}: {e}")

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


class _Once:
    """A source that failed while running: reported once, then off."""

    def __init__(self, status: Dict[str, str], source: str) -> None:
        self._status, self._source = status, source
        self.on = True

    def fail(self, e: BaseException) -> None:
        if self.on:
            self.on = False
            self._status[self._source] = f"off after an error: {type(e).__name__}: {e}"
            _report(f"{self._source} metrics stopped: {type(e).__name__}: {e}")


class _Metrics:
    """The hooks of one process. Installed once, under _lock."""

    def __init__(self, client: Any, torch: Any = None) -> None:
        if torch is None:
            import torch
        self._torch = torch
        self._client = client
        self._stats: Dict[Any, Any] = {}
        self._stats_lock = threading.Lock()
        self.status: Dict[str, str] = {}
        # Ends the CUDA sampler (tests; a process just exits).
        self.stopped = threading.Event()
        # DDP's logging data is read from the optimizer step hook once it
        # has run (it runs every step anyway), else from a forward pre-hook
        # on each DDP module (see _install_ddp): _ddp_read_all reads every
        # DDP module's.
        self._ddp_read_all: Optional[Callable[[], None]] = None
        self._steps_seen = False
        # The optimizer step hook (step_hook.h) and, once the straggler
        # split is on, its window, its add_wait and the NCCL process groups
        # given a completion hook.
        self._step_hook: Any = None
        self._dist_window_s = _DIST_WINDOW_S
        self._dist_window_error: Optional[str] = None
        window = os.environ.get(DIST_WINDOW_ENV, "").strip()
        if window:
            try:
                self._dist_window_s = float(window)
            except ValueError:
                self._dist_window_error = f"{DIST_WINDOW_ENV}={window!r} is no number of seconds"
        self._add_wait: Optional[Callable[[float], None]] = None
        self._nccl_timing = False
        self._nccl_groups: set = set()  # id() of each group seen: groups take no weak reference

    # --- helpers -----------------------------------------------------------

    def _stat(self, name: str, aggregations: Iterable[str], labels: Optional[Dict[str, str]] = None,
              histogram: bool = False) -> Any:
        """The stat of this name and labels, made at first use."""
        key = (name, tuple(sorted((labels or {}).items())))
        stat = self._stats.get(key)
        if stat is None:
            from . import Stat
            with self._stats_lock:
                stat = self._stats.get(key)
                if stat is None:
                    stat = self._stats[key] = Stat(name, list(aggregations), WINDOW,
                                                   labels=labels, client=self._client,
                                                   histogram=histogram)
        return stat

    def _version(self) -> str:
        return str(self._torch.__version__)

    def _at_least(self, major: int, minor: int) -> bool:
        numbers: List[int] = []
        for part in self._version().split("+")[0].split(".")[:2]:
            digits = "".join(c for c in part if c.isdigit())
            numbers.append(int(digits) if digits else 0)
        return tuple(numbers) >= (major, minor)

    def install(self) -> None:
        for source, install in (("wait_counters", self._install_wait_counters),
                                ("compile", self._install_compile),
                                ("ddp", self._install_ddp),
                                ("optimizer", self._install_optimizer),
                                ("dist", self._install_dist),
                                ("cuda", self._install_cuda)):
            try:
                self.status[source] = install()
            except Exception as e:  # noqa: BLE001 - one source failing leaves the others
                self.status[source] = f"off: {type(e).__name__}: {e}"
        missing = [f"{source} ({why})" for source, why in self.status.items()
                   if why != "on" and source != "cuda"]
        if missing:
            _report(f"torch {self._version()}: not reported: " + "; ".join(missing))

    # --- wait counters -----------------------------------------------------

    def _install_wait_counters(self) -> str:
        _torchmon.enable_torch_wait_counters(self._client._native)
        monitor = getattr(self._torch._C, "_monitor", None)
        counter = getattr(monitor, "_WaitCounter", None)
        if counter is None or not self._at_least(2, 6):
            return "needs torch >= 2.6"
        # c10 looks the backend up once, at the process's first counter:
        # making one now tells whether that lookup found it.
        counter(_PROBE_KEY)
        if _torchmon.torch_wait_counter_backend()["probed"]:
            return "on"
        return ("torch made its first wait counter before torchmon was loaded: set "
                f"{ENV_SWITCH}=1, or call enable_metrics() before torch.distributed or "
                "torch.compile run")

    # --- torch.compile ----------------------------------------------------

    def _install_compile(self) -> str:
        if importlib.util.find_spec("torch._dynamo") is None:
            return "needs torch >= 2.0 (torch.compile)"
        utils = sys.modules.get("torch._dynamo.utils")
        if utils is not None:
            return self._hook_compile(utils)
        # torch._dynamo is heavy and imported by torch.compile's first use:
        # hook it then rather than import it now.
        global _finder
        if _finder is None:
            _finder = _PostImportFinder({})
            sys.meta_path.insert(0, _finder)
        _finder.add("torch._dynamo.utils", self._hook_compile)
        return "on"

    def _hook_compile(self, utils: Any) -> str:
        original = getattr(utils, "log_compilation_event", None)
        if original is None:
            self.status["compile"] = "this torch._dynamo has no log_compilation_event"
            _report(f"torch {self._version()}: not reported: compile ({self.status['compile']})")
            return self.status["compile"]
        once = _Once(self.status, "compile")
        counters = utils.counters
        seen_breaks = [sum(counters["graph_break"].values())]

        def log_compilation_event(metrics: Any) -> None:
            original(metrics)
            if not once.on:
                return
            try:
                self._record_compilation(metrics, counters, seen_breaks)
            except Exception as e:  # noqa: BLE001
                once.fail(e)

        utils.log_compilation_event = log_compilation_event
        return "on"

    def _record_compilation(self, metrics: Any, counters: Any, seen_breaks: List[int]) -> None:
        duration_us = getattr(metrics, "duration_us", None)
        seconds = (duration_us / 1e6 if duration_us is not None
                   else getattr(metrics, "entire_frame_compile_time_s", None) or 0.0)
        breaks = sum(counters["graph_break"].values())
        new_breaks, seen_breaks[0] = breaks - seen_breaks[0], breaks
        failed = getattr(metrics, "fail_type", None) is not None
        self._stat("torch.compile.time_s", ("count", "sum", "max"), histogram=True).add(seconds)
        self._stat("torch.compile.failures", ("sum",)).add(1.0 if failed else 0.0)
        self._stat("torch.compile.graph_breaks", ("sum",)).add(float(max(new_breaks, 0)))
        guards = getattr(metrics, "guard_count", None)
        if guards is not None:
            self._stat("torch.compile.guards", ("mean", "max")).add(float(guards))

    # --- DDP -----------------------------------------------------------------

    def _install_ddp(self) -> str:
        parallel = getattr(self._torch.nn, "parallel", None)
        ddp = getattr(parallel, "DistributedDataParallel", None)
        if ddp is None or not hasattr(ddp, "_get_ddp_logging_data"):
            return "this torch's DistributedDataParallel has no logging data"
        once = _Once(self.status, "ddp")
        # The DDP modules made since, weakly: a job's model lives as long as
        # the job, a test's does not.
        modules: List["weakref.ReferenceType[Any]"] = []

        def read_all() -> None:
            if not once.on:
                return
            try:
                exposed: Optional[float] = None
                for ref in modules:
                    module = ref()
                    if module is not None:
                        waited = self._read_ddp(module)
                        if waited is not None:
                            exposed = (exposed or 0.0) + waited
                if exposed is not None and self._add_wait is not None:
                    _torchmon.step_split_record(self._step_hook, exposed)
            except Exception as e:  # noqa: BLE001
                once.fail(e)

        def forward_pre_hook(module: Any, _inputs: Any) -> None:
            # Until an optimizer step hook has run: a job that steps a
            # torch.optim optimizer has DDP polled from that hook, which
            # runs each step anyway, and this hook leaves: any forward
            # pre-hook puts every forward of the module on nn.Module's
            # slower path for hooks, a cost measured at 0.4 to 0.7 % of a
            # 2.5 ms step (docs/performance.md).
            if self._steps_seen:
                module._torchmon_ddp_hook.remove()
                return
            if once.on:
                try:
                    state = module._torchmon_ddp
                    state[0] += 1
                    if _ddp_may_have_changed(state[0]):
                        self._read_ddp(module)
                except Exception as e:  # noqa: BLE001
                    once.fail(e)

        original_init = ddp.__init__

        def __init__(module: Any, *args: Any, **kwargs: Any) -> None:
            original_init(module, *args, **kwargs)
            module._torchmon_ddp = [0, None]  # forwards seen, the iteration recorded
            try:
                on_cpu = next(module.parameters()).device.type == "cpu"
            except StopIteration:
                on_cpu = False
            if on_cpu and self._add_wait is not None:
                # DDP's reducer waits for its all-reduce in C++: on CPU, its
                # sampled timings say how long (see _read_ddp), and a step's
                # split is recorded where they do.
                module._set_ddp_runtime_logging_sample_rate(_DDP_CPU_SAMPLE_RATE)
                _torchmon.step_split(self._step_hook, self._dist_window_s, False)
                module._torchmon_ddp.append(True)
            if not self._steps_seen:
                module._torchmon_ddp_hook = module.register_forward_pre_hook(forward_pre_hook)
            modules[:] = [ref for ref in modules if ref() is not None]
            modules.append(weakref.ref(module))

        __init__.__wrapped__ = original_init  # type: ignore[attr-defined]
        ddp.__init__ = __init__
        self._ddp_read_all = read_all
        return "on"

    def _read_ddp(self, module: Any) -> Optional[float]:
        """Records `module`'s DDP logging data if it holds an iteration not
        recorded yet. Returns, for a module on CPU, how long that iteration
        waited for its gradients' all-reduce after its backward computed
        (communication less its overlap with computation), else None."""
        state = module._torchmon_ddp
        data = module._get_ddp_logging_data()
        iteration = data.get("iteration")
        if not iteration or iteration == state[1]:
            return None
        state[1] = iteration
        for field, name in _DDP_TIMES:
            value = data.get(field)
            if isinstance(value, int):
                self._stat(name, ("value", "mean", "max")).add(value / 1e9)
        if len(state) < 3:
            return None
        comm = data.get("backward_comm_time")
        overlap = data.get("backward_compute_comm_overlap_time")
        if not isinstance(comm, int) or not isinstance(overlap, int):
            return None
        return max(comm - overlap, 0) / 1e9

    # --- optimizer steps ----------------------------------------------------

    def _install_optimizer(self) -> str:
        try:
            optimizer = importlib.import_module("torch.optim.optimizer")
        except ImportError:
            optimizer = None
        register = getattr(optimizer, "register_optimizer_step_post_hook", None)
        if register is None:
            return "needs torch >= 2.0 (global optimizer step hooks)"
        once = _Once(self.status, "optimizer")
        ddp_read_all = self._ddp_read_all

        def on_due() -> None:
            # Steps 1 to 12, then every 4th at most _DUE_PER_DIST_WINDOW
            # times a window: the first one tells DDP's forward pre-hooks
            # to leave.
            self._steps_seen = True
            if ddp_read_all is not None:
                ddp_read_all()
            if self._add_wait is not None and self._nccl_timing:
                self._hook_nccl_groups()

        # Native (step_hook.h): it runs on the training thread after every
        # step, where Python code is cold and costs microseconds.
        step_post_hook = _torchmon.step_interval_hook(
            self._client._native, on_due, _DDP_EARLY_ITERATIONS, _DDP_POLL_EVERY, once.fail,
            self._due_gap_s())
        register(step_post_hook)
        self._step_hook = step_post_hook
        return "on"

    def _due_gap_s(self) -> float:
        """The least time between two calls of on_due after the first steps:
        a share of the split's window (one step_split accepts; else the
        default's, and _install_dist reports the window)."""
        window = self._dist_window_s
        if not 0.001 <= window <= 86400:  # NaN too
            window = _DIST_WINDOW_S
        return window / _DUE_PER_DIST_WINDOW

    # --- the straggler split --------------------------------------------------

    def _install_dist(self) -> str:
        """Each step's seconds waited in collectives and the rest (step_hook.h):
        torch.distributed's Python collectives, sync and async, wait for
        their Work in Work.wait, which is timed here; DDP's reducer waits in
        C++, measured by its own timings (_read_ddp); on NCCL a wait only
        orders streams, and the GPU's time in each collective comes from
        the process group's completion hook (_hook_nccl_groups)."""
        if self._step_hook is None:
            return "needs torch >= 2.0 (global optimizer step hooks)"
        distributed = getattr(self._torch, "distributed", None)
        if distributed is None or not distributed.is_available():
            return "this torch has no torch.distributed"
        c10d = getattr(self._torch._C, "_distributed_c10d", None)
        work = getattr(c10d, "Work", None)
        if work is None or not callable(getattr(work, "wait", None)):
            return "this torch.distributed has no Work.wait"
        if self._dist_window_error:
            return self._dist_window_error
        try:
            add_wait = _torchmon.step_split(self._step_hook, self._dist_window_s, True)
        except ValueError as e:
            return f"{DIST_WINDOW_ENV}: {e}"
        original = work.wait
        clock = time.perf_counter

        def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
            start = clock()
            try:
                return original(self, *args, **kwargs)
            finally:
                add_wait(clock() - start)

        wait.__wrapped__ = original  # type: ignore[attr-defined]
        wait.__doc__ = original.__doc__
        work.wait = wait
        self._add_wait = add_wait
        # NCCL measures a collective's GPU time only where asked before its
        # process group is made (boot() asks, as the switch is read).
        self._nccl_timing = os.environ.get("TORCH_NCCL_ENABLE_TIMING", "") in ("1", "true")
        return "on"

    def _hook_nccl_groups(self) -> None:
        """Gives each NCCL process group not seen yet a completion hook that
        adds the GPU time of each of its collectives to the step's waits.
        Run at due steps: a group made since is hooked within 4 steps."""
        c10d = self._torch.distributed.distributed_c10d
        world = getattr(c10d, "_world", None)
        groups = list(getattr(world, "pg_map", {}) or ())
        add_wait = self._add_wait

        def completed(info: Any) -> None:
            add_wait(info.active_duration.total_seconds())

        for group in groups:
            if id(group) in self._nccl_groups:
                continue
            self._nccl_groups.add(id(group))
            try:
                if "nccl" not in str(c10d.get_backend(group)):
                    continue
                group._register_on_completion_hook(completed)
            except Exception as e:  # noqa: BLE001 - e.g. the job registered its own
                _report(f"torch.dist.wait_s: an NCCL process group's collectives are not "
                        f"timed: {type(e).__name__}: {e}")

    # --- CUDA memory ------------------------------------------------------------

    def _install_cuda(self) -> str:
        cuda = self._torch.cuda
        if not cuda.is_available():
            return "no CUDA"
        threading.Thread(target=self._sample_cuda, name="torchmon-cuda-memory",
                         daemon=True).start()
        return "on"

    def _sample_cuda(self, every_s: float = _CUDA_SAMPLE_EVERY_S) -> None:
        cuda = self._torch.cuda
        once = _Once(self.status, "cuda")
        observing = False
        while once.on and not self.stopped.wait(every_s):
            try:
                if not cuda.is_initialized():
                    continue  # never made here: CUDA is the job's to start
                if not observing:
                    observing = True
                    attach = getattr(self._torch._C, "_cuda_attach_out_of_memory_observer", None)
                    if attach is not None:
                        attach(self._out_of_memory)
                for device in range(cuda.device_count()):
                    reserved = cuda.memory_reserved(device)
                    if reserved == 0:
                        continue  # a device this process does not use
                    labels = {"device": str(device)}
                    self._stat("torch.cuda.memory.allocated_bytes", ("value", "max"),
                               labels).add(float(cuda.memory_allocated(device)))
                    self._stat("torch.cuda.memory.reserved_bytes", ("value", "max"),
                               labels).add(float(reserved))
                    self._stat("torch.cuda.memory.peak_allocated_bytes", ("value", "max"),
                               labels).add(float(cuda.max_memory_allocated(device)))
            except Exception as e:  # noqa: BLE001
                once.fail(e)

    def _out_of_memory(self, device: int, alloc: int, device_allocated: int,
                       device_free: int) -> None:
        from . import Event
        self._stat("torch.cuda.out_of_memory_bytes", ("count", "max"),
                   {"device": str(device)}).add(float(alloc))
        self._client.log_event(Event("torch.cuda.out_of_memory", _dt.datetime.now(), {
            "device": int(device), "requested_bytes": int(alloc),
            "allocated_bytes": int(device_allocated), "free_bytes": int(device_free)}))

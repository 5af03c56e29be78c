"""PyTorch's own metrics with no code (torchmon.torch.enable_metrics and the
TORCHMON_TORCH_METRICS switch; docs/torch-metrics.md).

The suite runs this file against bookworm's torch 1.13, where wait counters,
torch.compile and global optimizer step hooks do not exist: what exists
(DDP's timings) must work and the rest be reported once. test_torch26.py
runs it in a Debian trixie root against torch 2.6 with the portable wheel
pip-installed (so the switch's .pth runs as `site` finds it there), where
every source must report.

Each case runs real training code in child processes (the hooks are
process-wide) against a real daemon: TCPStore operations, a two-rank gloo
job wrapping a model in DDP, torch.compile with a graph break.
"""

import json
import re
import subprocess
import sys
import textwrap
import threading
import time
import types
import urllib.request

import pytest
import torch
from conftest import PYTHON_DIR
from torchmond import free_tcp_port

TORCH_2_6 = tuple(int(p) for p in re.findall(r"\d+", torch.__version__)[:2]) >= (2, 6)
WINDOW_S = 10  # every series of torchmon._torch_metrics

# A child's first lines: `site` as it runs at start for an installed wheel.
# The build tree is no site directory, so its .pth is processed here as
# site would; the wheel's already ran at interpreter start.
PRELUDE = textwrap.dedent(f"""\
    import site, sys
    if {PYTHON_DIR!r} not in site.getsitepackages():
        site.addsitedir({PYTHON_DIR!r})
    """)


def child_env(python_env, switch, **extra):
    env = dict(python_env, USE_LIBUV="0", **extra)
    env.pop("TORCHMON_TORCH_METRICS", None)
    if switch:
        env["TORCHMON_TORCH_METRICS"] = "1"
    return env


def script(*parts):
    """A child's code: the prelude, then each part dedented on its own."""
    return PRELUDE + "".join(textwrap.dedent(part) for part in parts)


def run_child(*parts, env, timeout=180):
    return subprocess.run([sys.executable, "-c", script(*parts)], env=env, capture_output=True,
                          text=True, timeout=timeout)


def accepted(daemon, stat):
    return sum(s["counters"]["accepted"] for s in daemon.series(stat))


# A TCPStore server on a free port. Debian's torch 2.6 has no libuv, which
# its TCPStore asks for by default (USE_LIBUV=0 only reaches rendezvous).
MAKE_STORE = """
    import datetime
    import torch.distributed as dist
    def make_store():
        args = ("127.0.0.1", 0, 1, True, datetime.timedelta(seconds=30))
        try:
            return dist.TCPStore(*args, use_libuv=False)
        except TypeError:  # torch < 2.2: no libuv to refuse
            return dist.TCPStore(*args)
"""

# Makes a TCPStore (c10d's rendezvous store) and uses it: set, get, wait,
# add, each a wait counter in torch 2.6. Then 5 optimizer steps.
STORE_AND_STEPS = MAKE_STORE + """
    store = make_store()
    store.set("key", "value")
    assert store.get("key") == b"value"
    store.wait(["key"])
    store.add("count", 1)
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        model(torch.randn(2, 4)).sum().backward()
        optimizer.step()
    import torchmon, torchmon.torch
    print("status", torchmon.torch.metrics_status())
    assert torchmon.flush(10)
    print("errors", torchmon.default_client().errors())
"""

TCPSTORE_KEYS = ("pytorch.wait_counter.TCPStore__set", "pytorch.wait_counter.TCPStore__get",
                 "pytorch.wait_counter.TCPStore__wait")


def assert_reported_once(stderr):
    """What this torch lacks: one line, naming each missing source."""
    lines = [line for line in stderr.splitlines() if "not reported" in line]
    if TORCH_2_6:
        assert lines == [], stderr
        return
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"torchmon: torch {torch.__version__}: not reported: "), lines
    for missing in ("wait_counters (needs torch >= 2.6)", "compile (needs torch >= 2.0",
                    "optimizer (needs torch >= 2.0", "dist (needs torch >= 2.0"):
        assert missing in lines[0], lines


def assert_store_and_steps_recorded(daemon, out):
    assert out.returncode == 0, out.stderr
    assert "errors []" in out.stdout, out.stdout
    assert_reported_once(out.stderr)
    steps = daemon.series("torch.optim.step_interval_s")
    if TORCH_2_6:
        for key in TCPSTORE_KEYS:
            (wait,) = daemon.series(key + ".wait_s")
            assert wait["counters"]["accepted"] >= 1, (key, wait)
            assert wait["aggregations"] == ["count", "sum", "max"], wait
            assert wait["histogram"], wait
            (active,) = daemon.series(key + ".active")
            assert active["counters"]["accepted"] == 2 * wait["counters"]["accepted"], active
        # 5 steps, 4 intervals between them, labelled with the optimizer.
        (step,) = steps
        assert step["labels"]["optimizer"] == "SGD", step
        assert step["counters"]["accepted"] == 4, step
        # The straggler split of those 4 steps (no collective among them).
        for stat in ("torch.dist.compute_s", "torch.dist.wait_s"):
            (split,) = daemon.series(stat)
            assert split["counters"]["accepted"] == 4, split
    else:
        assert daemon.series("pytorch.wait_counter.*") == []
        assert steps == []
    # The probe that tells whether torch found the backend is no series.
    assert daemon.series("torchmon.*") == []


def test_without_the_switch_nothing_is_loaded(daemon, python_env):
    out = run_child("""
        import torch, torch.distributed, torch.optim
        assert "torchmon" not in sys.modules, [m for m in sys.modules if "torchmon" in m]
        model = torch.nn.Linear(4, 4)
        torch.optim.SGD(model.parameters(), lr=0.1).step()
        print("clean")
        """, env=child_env(python_env, switch=False))
    assert out.returncode == 0 and "clean" in out.stdout, out.stderr
    assert out.stderr == ""
    assert daemon.ctl("series")["series"] == []


def test_the_switch_alone_reports_torch_imported_first(daemon, python_env):
    # The job's code never imports torchmon before torch: the .pth did.
    out = run_child("import torch\n", STORE_AND_STEPS,
                    env=child_env(python_env, switch=True))
    assert_store_and_steps_recorded(daemon, out)
    status = re.search(r"^status (.*)$", out.stdout, re.M).group(1)
    if TORCH_2_6:
        assert "'wait_counters': 'on'" in status and "'optimizer': 'on'" in status, status


def test_enable_metrics_after_importing_torch(daemon, python_env):
    out = run_child("""
        import torch
        import torchmon.torch
        torchmon.torch.enable_metrics()
        """, STORE_AND_STEPS, env=child_env(python_env, switch=False))
    assert_store_and_steps_recorded(daemon, out)


def test_enable_metrics_before_importing_torch_distributed(daemon, python_env):
    out = run_child("""
        import torchmon.torch
        state = torchmon.torch.enable_metrics()
        assert torchmon.torch.enable_metrics() == state  # idempotent
        import torch
        """, STORE_AND_STEPS, env=child_env(python_env, switch=False))
    assert_store_and_steps_recorded(daemon, out)


@pytest.mark.skipif(not TORCH_2_6, reason="torch 1.13 has no wait counters to miss")
def test_enabling_after_torchs_first_wait_counter_says_so(daemon, python_env):
    # c10 looks the backend up once, at its first counter: too late now,
    # and the status and one stderr line say what to do instead.
    out = run_child(MAKE_STORE, """
        import torch
        store = make_store()
        store.set("key", "value")
        import torchmon, torchmon.torch
        print("status", torchmon.torch.enable_metrics()["wait_counters"])
        store.set("key", "again")
        assert torchmon.flush(10)
        """, env=child_env(python_env, switch=False))
    assert out.returncode == 0, out.stderr
    assert "status torch made its first wait counter before torchmon was loaded" in out.stdout
    lines = [line for line in out.stderr.splitlines() if "not reported" in line]
    assert len(lines) == 1 and "TORCHMON_TORCH_METRICS=1" in lines[0], out.stderr
    assert daemon.series("pytorch.wait_counter.*") == []


def test_the_native_step_hook_records_each_optimizers_intervals_and_calls_on_due(
        daemon, default_client_for):
    # The hook torch calls after every optimizer step (step_hook.h), called
    # here as torch calls it, with stand-in optimizers: any torch.
    import torchmon._torchmon as native

    class SGD:
        pass

    class Adam:
        pass

    due, errors = [], []
    hook = native.step_interval_hook(default_client_for._native, lambda: due.append(1), 2, 3,
                                     errors.append)
    assert hook.__module__ == "torchmon._torch_metrics"
    sgd, adam = SGD(), Adam()
    for _ in range(4):
        hook(sgd, (), {})
        hook(adam, (), {})
    # 8 steps counted: on_due at steps 1 and 2, then 3 and 6.
    assert len(due) == 4
    gone = SGD()
    hook(gone, (), {})
    del gone  # held weakly: a new optimizer at the same address is new
    hook(SGD(), (), {})
    assert default_client_for.flush(10)
    series = {s["labels"]["optimizer"]: s for s in daemon.series("torch.optim.step_interval_s")}
    # Per optimizer: its steps less the first; one series per class.
    assert series["SGD"]["counters"]["accepted"] == 3, series
    assert series["Adam"]["counters"]["accepted"] == 3, series
    assert series["SGD"]["histogram"], series
    assert sorted(series["SGD"]["aggregations"]) == ["count", "max", "mean"], series
    assert errors == []
    # An optimizer that takes no weak reference: reported once, the hook off,
    # and the step is not disturbed.
    hook(object(), (), {})
    hook(object(), (), {})
    assert len(errors) == 1 and isinstance(errors[0], TypeError), errors

    # A least gap between due calls after the early steps: steps faster
    # than it call on_due once per gap, however many there are.
    gapped = []
    hook = native.step_interval_hook(default_client_for._native, lambda: gapped.append(1), 2, 1,
                                     None, 0.5)
    for _ in range(1000):
        hook(sgd, (), {})
    assert len(gapped) == 2  # steps 1 and 2, the early ones; the gap holds from the last
    time.sleep(0.55)
    for _ in range(1000):
        hook(sgd, (), {})
    assert len(gapped) == 3
    with pytest.raises(ValueError, match="min_gap"):
        native.step_interval_hook(default_client_for._native, None, 0, 1, None, -1.0)
    with pytest.raises(ValueError, match="min_gap"):
        native.step_interval_hook(default_client_for._native, None, 0, 1, None, float("nan"))


def test_the_straggler_split_records_each_step_of_the_first_optimizer(daemon, default_client_for):
    # step_split on the native step hook, driven as torch and the Work.wait
    # wrapper drive it: waits added during a step are that step's
    # torch.dist.wait_s, the rest of its interval its torch.dist.compute_s.
    import time

    import torchmon._torchmon as native

    class SGD:
        pass

    class Adam:
        pass

    hook = native.step_interval_hook(default_client_for._native, None, 0, 1, None)
    add_wait = native.step_split(hook, 10.0, True)
    # Every sample in one 10 s window: the steps below take 0.2 s.
    while time.time() % 10 > 9:
        time.sleep(0.05)
    sgd, adam = SGD(), Adam()
    hook(sgd, (), {})  # the first step of the first optimizer: no interval yet
    intervals = []
    for waited in (0.01, 0.02, 0.0):
        started = time.monotonic()
        time.sleep(0.05)
        add_wait(waited / 2)
        add_wait(waited / 2)
        hook(adam, (), {})  # another optimizer's step ends no step of the split
        hook(sgd, (), {})
        intervals.append(time.monotonic() - started)
    # A wait longer than its step is the step: compute 0, never negative.
    add_wait(5.0)
    hook(sgd, (), {})
    assert default_client_for.flush(10)
    closed = daemon.windows_when(lambda w: len(w) == 2, "torch.dist.*_s", timeout=30)
    windows = {w["stat"]: w for w in closed}
    assert len(windows) == 2, closed
    wait, compute = windows["torch.dist.wait_s"], windows["torch.dist.compute_s"]
    assert wait["aggregates"]["count"] == compute["aggregates"]["count"] == 4
    # Seconds waited: 0.01 + 0.02 + 0 + the last step's whole interval.
    last = wait["aggregates"]["sum"] - 0.03
    assert 0 < last < 1.0, wait
    # compute + wait of each step is its interval: the three timed steps'
    # compute is what they did not wait, within the clock reads around them.
    assert abs(compute["aggregates"]["sum"] - (sum(intervals) - 0.03)) < 0.01, (compute, intervals)
    # The window: as asked, and the two stats' aggregations.
    assert wait["end_ms"] - wait["start_ms"] == 10000
    assert sorted(wait["aggregates"]) == ["count", "mean", "sum"]
    # Bad input: a window out of range, something that is no hook.
    with pytest.raises(ValueError, match="window"):
        native.step_split(hook, 0.0, True)
    with pytest.raises(TypeError, match="step_interval_hook"):
        native.step_split(print, 10.0, True)
    with pytest.raises(TypeError):
        add_wait("a while")


DDP_RANK = """
    import os, time, torch, torch.distributed as dist
    dist.init_process_group("gloo", init_method=os.environ["INIT_METHOD"],
                            rank=int(os.environ["RANK"]), world_size=2)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(50):
        optimizer.zero_grad()
        model(torch.randn(32, 64)).square().mean().backward()
        optimizer.step()
        time.sleep(0.004)  # 4 steps outlast the 2 ms between reads of a 0.2 s window
    dist.barrier()
    dist.destroy_process_group()
    import torchmon
    assert torchmon.flush(10)
    print("errors", torchmon.default_client().errors())
    print("ddp forward hooks", sum(getattr(h, "__module__", "") == "torchmon._torch_metrics"
                                   for h in model._forward_pre_hooks.values()))
"""

C10D_INIT = "pytorch.wait_counter.c10d.init_process_group"

DDP_STATS = ("torch.ddp.forward_compute_s", "torch.ddp.backward_compute_s",
             "torch.ddp.backward_comm_s", "torch.ddp.backward_overlap_s")


def run_ranks(tmp_path, code, world, timeout, **env):
    """`world` processes of `code`, ranks 0.. of one job (RANK, WORLD_SIZE,
    and INIT_METHOD: a TCPStore, whose waits torch 2.6 counts and the test
    checks, on a port free when chosen), each's output in files; waited for
    with one deadline. A rank that fails ends the others, which would wait
    for it until the deadline: its stderr is the test's failure. The port
    can be taken between its choice and rank 0's bind (CI's ASan suite saw
    "Address already in use", a daemon of another test on it): then the job
    starts again on another port, three times at most, as nothing of it
    ran past the rendezvous."""
    deadline = time.monotonic() + timeout
    for attempt in range(3):
        port = free_tcp_port()
        outputs = run_ranks_once(tmp_path, code, world, deadline,
                                 INIT_METHOD=f"tcp://127.0.0.1:{port}", **env)
        if not any(returncode != 0 and f"{port} (errno: 98 - Address already in use)" in stderr
                   for returncode, _, stderr in outputs):
            break
    for rank, (returncode, _, stderr) in enumerate(outputs):
        assert returncode == 0, f"rank {rank} ended with {returncode}:\n{stderr}"
    return outputs


def run_ranks_once(tmp_path, code, world, deadline, **env):
    """run_ranks' job once, until `deadline` (time.monotonic()): each rank's
    (returncode, stdout, stderr)."""
    ranks = []
    for rank in range(world):
        out, err = (open(tmp_path / f"rank{rank}.{name}", "w+") for name in ("out", "err"))
        ranks.append((subprocess.Popen(
            [sys.executable, "-c", code],
            env={**env, "RANK": str(rank), "WORLD_SIZE": str(world)},
            stdout=out, stderr=err, text=True), out, err))
    while any(p.poll() is None for p, _, _ in ranks) and time.monotonic() < deadline and \
            all(p.returncode in (None, 0) for p, _, _ in ranks):
        time.sleep(0.1)
    outputs = []
    for p, out, err in ranks:
        if p.poll() is None:
            p.kill()
            p.wait()
        out.seek(0)
        err.seek(0)
        outputs.append((p.returncode, out.read(), err.read()))
        out.close()
        err.close()
    return outputs


def test_a_two_rank_ddp_job_shows_each_ranks_times_on_metrics_and_in_ranks(daemon, python_env,
                                                                            tmp_path):
    outputs = run_ranks(tmp_path, script(DDP_RANK), 2, 300,
                        **child_env(python_env, switch=True, TORCHMON_TORCH_DIST_WINDOW_S="0.2"))
    for _, stdout, stderr in outputs:
        assert "errors []" in stdout, stdout
        assert_reported_once(stderr)
        # Where the optimizer step hook reads DDP's data (torch >= 2.0), the
        # forward pre-hook, which slows every forward, has left.
        global_step_hooks = hasattr(torch.optim.Optimizer, "register_step_post_hook")
        assert f"ddp forward hooks {0 if global_step_hooks else 1}" in stdout, stdout

    # DDP samples its timings at iterations 1 to 10, then every 100th
    # (torch 1.13: each rank's 10 samples of each, labelled with its rank).
    # Where the straggler split is on (global step hooks, torch >= 2.0),
    # torchmon makes a CPU module sample every 4th iteration and reads it
    # at the steps that may hold a new one (1 to 12, then every 4th, at
    # least a hundredth of the split's window apart: 2 ms here): in
    # 50 steps, iterations 1 to 10 and 12, 16, ... 44 (48 is logged at the
    # 49th forward, after the last read), 19 samples; one either side for
    # the phase of DDP's count against the steps'.
    split = hasattr(torch.optim.Optimizer, "register_step_post_hook")
    for stat in DDP_STATS:
        series = daemon.series(stat)
        assert sorted(s["labels"]["rank"] for s in series) == ["0", "1"], (stat, series)
        for s in series:
            accepted = s["counters"]["accepted"]
            assert (18 <= accepted <= 20) if split else accepted == 10, (stat, series)
    if split:
        # Each such read records the step's split: what DDP's reducer waited
        # for its all-reduce after the backward computed, and the rest.
        for stat in ("torch.dist.compute_s", "torch.dist.wait_s"):
            series = daemon.series(stat)
            assert sorted(s["labels"]["rank"] for s in series) == ["0", "1"], (stat, series)
            assert all(17 <= s["counters"]["accepted"] <= 20 for s in series), (stat, series)
    else:
        assert daemon.series("torch.dist.*") == []
    steps = daemon.series("torch.optim.step_interval_s")
    if TORCH_2_6:
        assert sorted(s["labels"]["rank"] for s in steps) == ["0", "1"], steps
        assert all(s["counters"]["accepted"] == 49 for s in steps), steps
        # c10d's own waits: the rendezvous through the TCPStore, and the
        # process group's creation.
        keys = {s["stat"] for s in daemon.series("pytorch.wait_counter.*")}
        assert {k + ".wait_s" for k in TCPSTORE_KEYS + (C10D_INIT,)} <= keys, sorted(keys)
    else:
        assert steps == []

    # Both ranks' windows close; then the straggler view compares them.
    daemon.windows_when(lambda w: {x["labels"]["rank"] for x in w} == {"0", "1"},
                        "torch.ddp.backward_comm_s", timeout=3 * WINDOW_S)
    comparison = daemon.ctl("ranks", "torch.ddp.backward_comm_s")["comparisons"]
    assert comparison, comparison
    assert sorted(r["rank"] for r in comparison[0]["ranks"]) == ["0", "1"], comparison
    assert all(r["value"] > 0 for r in comparison[0]["ranks"]), comparison
    # The live page's stragglers panel asks the same of /api/ranks.
    with urllib.request.urlopen(f"http://{daemon.metrics}/api/ranks?stat=torch.ddp.backward_comm_s",
                                timeout=10) as r:
        panel = json.load(r)["comparisons"]
    assert [sorted(x["rank"] for x in c["ranks"]) for c in panel] == [["0", "1"]], panel
    assert panel[0]["slowest_rank"] in ("0", "1"), panel
    scrape = daemon.scrape()

    def scraped(metric, stat, rank, agg=None):
        labels = rf'(?=[^}}]*stat="{re.escape(stat)}")(?=[^}}]*rank="{rank}")'
        if agg:
            labels += rf'(?=[^}}]*agg="{agg}")'
        found = re.search(rf'^{metric}\{{{labels}[^}}]*\}} ([0-9.e+-]+)$', scrape, re.M)
        assert found, (metric, stat, rank, agg)
        return float(found.group(1))

    for rank in ("0", "1"):
        for stat in DDP_STATS:
            mean = scraped("torchmon_stat", stat, rank, "mean")
            # Overlap may be nothing; compute and communication take time.
            assert mean >= 0 if stat == "torch.ddp.backward_overlap_s" else mean > 0, (stat, mean)
        if TORCH_2_6:
            # The step rate's counter, and c10d's wait of that rank.
            assert scraped("torchmon_samples_accepted_total", "torch.optim.step_interval_s",
                           rank) == 49
            assert scraped("torchmon_samples_accepted_total", C10D_INIT + ".wait_s", rank) == 1
    if TORCH_2_6:
        steps = daemon.ctl("ranks", "torch.optim.step_interval_s")["comparisons"]
        assert steps and sorted(r["rank"] for r in steps[0]["ranks"]) == ["0", "1"], steps


def test_torch_compile_with_a_graph_break_gives_the_compile_series(daemon, python_env):
    out = run_child("""
        import torch
        import torchmon.torch
        print("status", torchmon.torch.enable_metrics()["compile"])
        if hasattr(torch, "compile"):
            def f(x):
                x = x * 2
                torch._dynamo.graph_break()
                return x + 1
            compiled = torch.compile(f, backend="eager")
            for _ in range(3):
                compiled(torch.randn(3))
        assert torchmon.flush(10)
        print("errors", torchmon.default_client().errors())
        """, env=child_env(python_env, switch=False))
    assert out.returncode == 0, out.stderr
    assert "errors []" in out.stdout, out.stdout
    assert_reported_once(out.stderr)
    if not TORCH_2_6:
        assert "status needs torch >= 2.0 (torch.compile)" in out.stdout, out.stdout
        assert daemon.series("torch.compile.*") == []
        return
    assert "status on" in out.stdout, out.stdout
    # Two frames compiled (f up to the break, and its resumption), once each.
    assert accepted(daemon, "torch.compile.time_s") == 2
    (time_s,) = daemon.series("torch.compile.time_s")
    assert time_s["histogram"], time_s
    windows = daemon.windows_when(lambda w: sum(x["aggregates"]["count"] for x in w) == 2,
                                  "torch.compile.time_s", timeout=3 * WINDOW_S)
    assert sum(w["aggregates"]["sum"] for w in windows) > 0, windows
    breaks = daemon.windows_when(lambda w: len(w) > 0, "torch.compile.graph_breaks",
                                 timeout=3 * WINDOW_S)
    assert sum(w["aggregates"]["sum"] for w in breaks) == 1, breaks
    failures = daemon.windows_when(lambda w: len(w) > 0, "torch.compile.failures",
                                   timeout=3 * WINDOW_S)
    assert sum(w["aggregates"]["sum"] for w in failures) == 0, failures


class StandInCuda:
    """torch.cuda's figures on a machine with no GPU (this one): two
    devices, the second unused; CUDA initialized by the job only from the
    third look on. A stand-in, because the real allocator cannot run here;
    tests/gpu has the check on a GPU host."""

    def __init__(self):
        self.looks = 0
        self.lock = threading.Lock()

    def is_available(self):
        return True

    def is_initialized(self):
        with self.lock:
            self.looks += 1
            return self.looks > 2

    def device_count(self):
        return 2

    def memory_reserved(self, device):
        return 4 << 20 if device == 0 else 0

    def memory_allocated(self, device):
        return 1 << 20

    def max_memory_allocated(self, device):
        return 3 << 20


def test_cuda_memory_is_sampled_per_device_in_use_and_out_of_memory_is_counted(
        daemon, default_client_for):
    from torchmon import _torch_metrics
    from torchmon_testing import wait_for
    observers = []
    cuda = StandInCuda()
    torch_stand_in = types.SimpleNamespace(
        cuda=cuda, _C=types.SimpleNamespace(_cuda_attach_out_of_memory_observer=observers.append))
    metrics = _torch_metrics._Metrics(default_client_for, torch_stand_in)
    sampler = threading.Thread(target=metrics._sample_cuda, args=(0.02,))
    sampler.start()
    try:
        # Nothing before the job initialized CUDA; then the observer, once.
        assert wait_for(lambda: cuda.looks >= 6, 10)
        assert len(observers) == 1
        observers[0](0, 1 << 40, 1 << 20, 5 << 20)  # as the allocator calls it
    finally:
        metrics.stopped.set()
        sampler.join(timeout=10)
    assert not sampler.is_alive()
    assert default_client_for.flush(5)
    assert default_client_for.errors() == []
    for stat in ("torch.cuda.memory.allocated_bytes", "torch.cuda.memory.reserved_bytes",
                 "torch.cuda.memory.peak_allocated_bytes"):
        (series,) = daemon.series(stat)  # device 1 reserves nothing: no series
        assert series["labels"]["device"] == "0", series
        assert series["aggregations"] == ["value", "max"], series
        assert series["counters"]["accepted"] >= 3, series
    windows = daemon.windows_when(lambda w: len(w) > 0, "torch.cuda.memory.peak_allocated_bytes",
                                  timeout=3 * WINDOW_S)
    assert windows[-1]["aggregates"]["max"] == 3 << 20, windows
    (oom,) = daemon.series("torch.cuda.out_of_memory_bytes")
    assert oom["counters"]["accepted"] == 1 and oom["labels"]["device"] == "0", oom
    events = daemon.ctl("events", "torch.cuda.out_of_memory")["events"]
    assert len(events) == 1, events
    assert events[0]["data"]["requested_bytes"] == 1 << 40, events
    assert events[0]["data"]["free_bytes"] == 5 << 20, events

#!/usr/bin/env python3
"""What PyTorch's own metrics cost a training loop (issue 35; target: at most
1 % of step time), and what each of torch's wait counters costs once torchmon
records it.

Each round runs the same training process three times, in a random order:
without torchmon (off), with torchmon's client and one stat but not the
switch (client: its sender thread and the rest), and with
TORCHMON_TORCH_METRICS=1 in its environment (on). The process
trains an MLP wrapped in DistributedDataParallel (a one-rank gloo group:
DDP's forward hook runs, as it does per rank in a real job) with SGD (the
optimizer step hook runs), warms up, then times each step; it reports its
median step. The switch cannot be undone inside a process, hence a process
per run; a round's runs are back to back, so the machine's drift falls
out of their ratio.

Reported:
  step        median over rounds of the runs' median step, per mode, and
              the median of the rounds' ratios client/off and on/off (with
              their range): on/off - client/off is what the switch adds to
              a job that already uses torchmon;
  hooks       the hooks' own cost per step, timed on their own: an optimizer
              step with nothing to update, off and on (the step post hook),
              and torchmon's forward pre-hook on the DDP module; as a share
              of the step: what the ratio above measures, without the
              machine's noise;
  wait pair   torch.monitor._WaitCounter(key).guard() entered and left,
              ns per pair, off and on (torch >= 2.6 only: c10's counter
              with torchmon's backend behind it, against none).

    /usr/bin/python3 tests/bench/torch_metrics_overhead.py [--rounds 15] [--steps 400]
        [--torchmond PATH] [--python-dir DIR] [--pin]

--pin puts each training process's main thread alone on CPU 0 once it has
warmed up, and every other thread (torchmon's, gloo's, gRPC's) and the
daemon on the last CPU, as on a GPU node where a rank's training thread
has a core of its own.

--python-dir is where torchmon is imported from (default: the build tree;
a site-packages where the wheel is installed runs its .pth at start, as a
user's does). The daemon is started here, on a temp Unix socket.
"""

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from torchmond import LaunchedDaemon, free_tcp_port  # noqa: E402

CHILD = """
import site, sys
if {python_dir!r} not in site.getsitepackages():
    site.addsitedir({python_dir!r})
import os, statistics, time
import torch, torch.distributed as dist, torch.monitor
torch.set_num_threads(1)
if {client_only}:  # torchmon's client and its threads, without the switch
    import datetime, torchmon
    kept = torchmon.Stat("bench.client", [torchmon.Aggregation.MEAN], datetime.timedelta(seconds=10))
    kept.add(1.0)
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128)))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(32, 128)

def step():
    optimizer.zero_grad()
    model(data).square().mean().backward()
    optimizer.step()

for _ in range(50):
    step()
if {pin}:  # the training thread alone on CPU 0, every other thread on the last CPU
    main = __import__("threading").get_native_id()
    last = os.cpu_count() - 1
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {{0}} if int(tid) == main else {{last}})
times = []
for _ in range({steps}):
    start = time.perf_counter_ns()
    step()
    times.append(time.perf_counter_ns() - start)
print("step_ns", statistics.median(times))
# The hooks' own cost per step, which machine noise cannot hide: an
# optimizer step with nothing to update (its post hooks run), and
# torchmon's forward pre-hook on the DDP module called as DDP's forward
# calls it (none without the switch).
calls = 20000
idle = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
start = time.perf_counter_ns()
for _ in range(calls):
    idle.step()
print("idle_step_ns", (time.perf_counter_ns() - start) / calls)
hooks = [h for h in model._forward_pre_hooks.values()
         if getattr(h, "__module__", "") == "torchmon._torch_metrics"]
start = time.perf_counter_ns()
for _ in range(calls):
    for hook in hooks:
        hook(model, ())
print("ddp_hook_ns", (time.perf_counter_ns() - start) / calls)
counter = getattr(torch.monitor, "_WaitCounter", None)
if counter is not None:
    guard = counter("bench.torch_metrics_overhead")
    pairs = 20000
    start = time.perf_counter_ns()
    for _ in range(pairs):
        with guard.guard():
            pass
    print("pair_ns", (time.perf_counter_ns() - start) / pairs)
dist.destroy_process_group()
if "torchmon" in sys.modules:
    import torchmon
    print("status", __import__("torchmon.torch").torch.metrics_status())
    torchmon.flush(10)
"""


MODES = ("off", "client", "on")


def run(mode, args, target):
    env = dict(os.environ, TORCHMON_TARGET=target, USE_LIBUV="0")
    env.pop("TORCHMON_TORCH_METRICS", None)
    if mode == "on":
        env["TORCHMON_TORCH_METRICS"] = "1"
    code = textwrap.dedent(CHILD).format(python_dir=args.python_dir, port=free_tcp_port(),
                                         steps=args.steps, client_only=mode == "client",
                                         pin=args.pin)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        sys.exit(f"training run ({mode}) failed:\n{out.stderr}")
    values = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    if mode == "on" and "'ddp': 'on'" not in values.get("status", ""):
        sys.exit(f"the switch did not enable the metrics: {out.stdout}{out.stderr}")
    return {key: float(values[key]) for key in ("step_ns", "pair_ns", "idle_step_ns", "ddp_hook_ns")
            if key in values}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--torchmond", default=os.path.join(BUILD, "server", "torchmond"))
    p.add_argument("--python-dir", default=os.path.join(BUILD, "client", "python"))
    p.add_argument("--pin", action="store_true",
                   help="training thread alone on CPU 0; the daemon and every other thread "
                        "on the last CPU")
    args = p.parse_args()

    import torch
    runs = {mode: [] for mode in MODES}
    ratios = {mode: [] for mode in MODES if mode != "off"}
    with tempfile.TemporaryDirectory(prefix="torchmon-bench.") as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        daemon = LaunchedDaemon([args.torchmond, "--listen", "unix://" + sock],
                                stderr=subprocess.DEVNULL)
        if args.pin:
            last = os.cpu_count() - 1
            for tid in os.listdir(f"/proc/{daemon.proc.pid}/task"):
                os.sched_setaffinity(int(tid), {last})
        try:
            for _ in range(args.rounds):
                order = list(MODES)
                random.shuffle(order)
                got = {mode: run(mode, args, "unix://" + sock) for mode in order}
                for mode in MODES:
                    runs[mode].append(got[mode])
                for mode in ratios:
                    ratios[mode].append(got[mode]["step_ns"] / got["off"]["step_ns"])
        finally:
            daemon.stop(timeout=10)

    def median(mode, key):
        return statistics.median(r[key] for r in runs[mode])

    print(f"torch {torch.__version__}, {args.rounds} rounds of {args.steps} steps, "
          f"python {sys.version.split()[0]}{', pinned' if args.pin else ''}")
    print("step, median over rounds: " + ", ".join(
        f"{mode} {median(mode, 'step_ns') / 1e6:.3f} ms" for mode in MODES))
    for mode, r in ratios.items():
        print(f"ratio {mode}/off, median of rounds: {statistics.median(r):.4f} "
              f"(min {min(r):.4f}, max {max(r):.4f})")
    optimizer_hook = median("on", "idle_step_ns") - median("off", "idle_step_ns")
    ddp_hook = median("on", "ddp_hook_ns")
    direct = optimizer_hook + ddp_hook
    print(f"hooks per step: optimizer {optimizer_hook:.0f} ns (idle step off "
          f"{median('off', 'idle_step_ns'):.0f}, on {median('on', 'idle_step_ns'):.0f}), "
          f"DDP forward {ddp_hook:.0f} ns; {direct:.0f} ns = "
          f"{100 * direct / median('off', 'step_ns'):.3f} % of the step")
    if "pair_ns" in runs["off"][0]:
        print(f"_WaitCounter guard pair: off {median('off', 'pair_ns'):.0f} ns, "
              f"on {median('on', 'pair_ns'):.0f} ns")


if __name__ == "__main__":
    main()

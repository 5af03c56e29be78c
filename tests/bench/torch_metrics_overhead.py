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
  CPU         the same for the CPU time the training thread itself spends
              in a step (time.thread_time_ns): what torchmon adds to the
              training thread's work, without the time it waits for a core
              that other threads hold;
  blocks      in each process, after the timed steps, --blocks blocks of 50
              steps with torchmon's per-step hooks (the optimizer step
              post-hook, which also reads DDP's logging data; the DDP
              forward pre-hook only where no optimizer step ran before, as
              on torch < 2.0) detached and attached
              in a random order; the ratio of the two kinds' median step. In the on
              process that is what the hooks add to a step, free of the
              variance between processes; in off and client, which have no
              hooks, the same alternation is the control and reads ~1;
  hooks       the hooks' own cost per step, timed on their own: an optimizer
              step with nothing to update, off and on (the step post hook),
              and torchmon's forward pre-hook on the DDP module where it
              is still there (torch < 2.0); as a share
              of the step: what the ratio above measures, without the
              machine's noise;
  all_reduce  a one-rank sync dist.all_reduce of one float, ns per call,
              off and on: on, its Work.wait goes through the straggler
              split's timing wrapper, which every Python collective of a
              job (FSDP's, plain ones) pays; and in the on process, the
              wrapper taken off and put back in random-order blocks: its
              cost per collective without the variance between processes;
  wait pair   torch.monitor._WaitCounter(key).guard() entered and left,
              ns per pair, off and on (torch >= 2.6 only: c10's counter
              with torchmon's backend behind it, against none).

    /usr/bin/python3 tests/bench/torch_metrics_overhead.py [--rounds 15] [--steps 400]
        [--torchmond PATH] [--python-dir DIR] [--pin] [--device cuda]

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
cuda = {device!r} == "cuda"
dist.init_process_group("nccl" if cuda else "gloo", init_method="tcp://127.0.0.1:{port}",
                        rank=0, world_size=1)
torch.manual_seed(0)
width = 4096 if cuda else 256  # a step of a few ms either way
model = torch.nn.Sequential(torch.nn.Linear(width // 2, width), torch.nn.ReLU(),
                            torch.nn.Linear(width, width // 2)).to({device!r})
model = torch.nn.parallel.DistributedDataParallel(model)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.randn(2048 if cuda else 32, width // 2, device={device!r})

def step():
    optimizer.zero_grad()
    model(data).square().mean().backward()
    optimizer.step()
    if cuda:  # the step's wall time, its kernels included
        torch.cuda.synchronize()

for _ in range(50):
    step()
if {pin}:  # the training thread alone on CPU 0, every other thread on the last CPU
    main = __import__("threading").get_native_id()
    last = os.cpu_count() - 1
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {{0}} if int(tid) == main else {{last}})
times, cpu_times = [], []
for _ in range({steps}):
    start, cpu_start = time.perf_counter_ns(), time.thread_time_ns()
    step()
    cpu_times.append(time.thread_time_ns() - cpu_start)
    times.append(time.perf_counter_ns() - start)
print("step_ns", statistics.median(times))
print("step_cpu_ns", statistics.median(cpu_times))
# The same process with torchmon's per-step hooks detached and attached
# again, in alternating blocks: what they add to a step, without the
# process-to-process variance of the runs above (address layout, which
# core, the machine's drift). Without hooks (off, client) both kinds of
# block are the same steps: the control, whose ratio must read ~1.
def ours(hooks):
    return {{k: h for k, h in hooks.items()
            if getattr(h, "__module__", "") == "torchmon._torch_metrics"}}
global_post = getattr(__import__("importlib").import_module("torch.optim.optimizer"),
                      "_global_optimizer_post_hooks", {{}})
attached = {{"ddp": ours(model._forward_pre_hooks), "optimizer": ours(global_post)}}
blocks = {{True: [], False: []}}
# In a random order, as many of each: a strict alternation that always
# starts attached read 1 to 1.5 % in the on process while the hook itself
# took 0.5 to 1.2 µs of a 3 ms step.
order = [True, False] * ({blocks} // 2)
__import__("random").shuffle(order)
for on in order:
    for hooks, mine in ((model._forward_pre_hooks, attached["ddp"]),
                        (global_post, attached["optimizer"])):
        for k, h in mine.items():
            if on:
                hooks[k] = h
            else:
                hooks.pop(k, None)
    for _ in range(50):
        start = time.perf_counter_ns()
        step()
        blocks[on].append(time.perf_counter_ns() - start)
for hooks, mine in ((model._forward_pre_hooks, attached["ddp"]), (global_post, attached["optimizer"])):
    hooks.update(mine)
print("blocks_ratio", statistics.median(blocks[True]) / statistics.median(blocks[False]))
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
# A Python collective, sync: with the switch its Work.wait goes through
# torchmon's timing wrapper (the straggler split), whose cost this is
# against off. One rank: the all-reduce itself is short.
one = torch.zeros(1, device={device!r})
for _ in range(200):
    dist.all_reduce(one)
start = time.perf_counter_ns()
for _ in range(calls):
    dist.all_reduce(one)
print("allreduce_ns", (time.perf_counter_ns() - start) / calls)
# And in this process, the wrapper taken off and put back in a random
# order of blocks (on only: off has no wrapper): its cost per collective
# without the variance between processes.
Work = torch._C._distributed_c10d.Work
wrapped = Work.wait
if hasattr(wrapped, "__wrapped__"):
    per = {{True: [], False: []}}
    order = [True, False] * 8
    __import__("random").shuffle(order)
    for timed in order:
        Work.wait = wrapped if timed else wrapped.__wrapped__
        start = time.perf_counter_ns()
        for _ in range(calls // 8):
            dist.all_reduce(one)
        per[timed].append((time.perf_counter_ns() - start) / (calls // 8))
    Work.wait = wrapped
    print("wait_wrapper_ns", statistics.median(per[True]) - statistics.median(per[False]))
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
                                         pin=args.pin, device=args.device, blocks=args.blocks)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        sys.exit(f"training run ({mode}) failed:\n{out.stderr}")
    values = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    if mode == "on" and "'ddp': 'on'" not in values.get("status", ""):
        sys.exit(f"the switch did not enable the metrics: {out.stdout}{out.stderr}")
    return {key: float(values[key]) for key in ("step_ns", "step_cpu_ns", "pair_ns", "idle_step_ns",
                                                 "ddp_hook_ns", "blocks_ratio", "allreduce_ns",
                                                 "wait_wrapper_ns")
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
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="where the model trains (cuda: one-rank NCCL group, a step's wall time "
                        "with its kernels)")
    p.add_argument("--blocks", type=int, default=16,
                   help="blocks of 50 steps per process, hooks attached and detached in turn")
    args = p.parse_args()

    import torch
    runs = {mode: [] for mode in MODES}
    ratios = {mode: [] for mode in MODES if mode != "off"}
    cpu_ratios = {mode: [] for mode in MODES if mode != "off"}
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
                    cpu_ratios[mode].append(got[mode]["step_cpu_ns"] / got["off"]["step_cpu_ns"])
        finally:
            daemon.stop(timeout=10)

    def median(mode, key):
        return statistics.median(r[key] for r in runs[mode])

    print(f"torch {torch.__version__}, {args.rounds} rounds of {args.steps} steps, "
          f"python {sys.version.split()[0]}, {args.device}{', pinned' if args.pin else ''}")
    print("step, median over rounds: " + ", ".join(
        f"{mode} {median(mode, 'step_ns') / 1e6:.3f} ms" for mode in MODES))
    def interval(r):
        """95 % bootstrap interval of the median of r: how far this run's
        rounds pin it down."""
        rng = random.Random(0)
        medians = sorted(statistics.median(rng.choices(r, k=len(r))) for _ in range(2000))
        return f"95 % interval of the median {medians[50]:.4f} .. {medians[1949]:.4f}"

    for mode, r in ratios.items():
        print(f"ratio {mode}/off, median of rounds: {statistics.median(r):.4f} "
              f"(min {min(r):.4f}, max {max(r):.4f}; {interval(r)})")
    print("training thread's CPU time per step, median over rounds: " + ", ".join(
        f"{mode} {median(mode, 'step_cpu_ns') / 1e6:.3f} ms" for mode in MODES))
    for mode, r in cpu_ratios.items():
        print(f"CPU ratio {mode}/off, median of rounds: {statistics.median(r):.4f} "
              f"(min {min(r):.4f}, max {max(r):.4f})")
    for mode in MODES:
        r = [run["blocks_ratio"] for run in runs[mode]]
        print(f"blocks with/without torchmon's hooks in one process, {mode}: median of rounds "
              f"{statistics.median(r):.4f} (min {min(r):.4f}, max {max(r):.4f})"
              + ("" if mode == "on" else " (no hooks: the control)"))
    optimizer_hook = median("on", "idle_step_ns") - median("off", "idle_step_ns")
    ddp_hook = median("on", "ddp_hook_ns")
    direct = optimizer_hook + ddp_hook
    print(f"hooks per step: optimizer {optimizer_hook:.0f} ns (idle step off "
          f"{median('off', 'idle_step_ns'):.0f}, on {median('on', 'idle_step_ns'):.0f}), "
          f"DDP forward {ddp_hook:.0f} ns; {direct:.0f} ns = "
          f"{100 * direct / median('off', 'step_ns'):.3f} % of the step")
    print(f"a one-rank sync all_reduce (its Work.wait timed with the switch): off "
          f"{median('off', 'allreduce_ns'):.0f} ns, on {median('on', 'allreduce_ns'):.0f} ns, "
          f"+{median('on', 'allreduce_ns') - median('off', 'allreduce_ns'):.0f} ns per collective")
    if "wait_wrapper_ns" in runs["on"][0]:
        print(f"the Work.wait wrapper in one process, taken off and put back: "
              f"+{median('on', 'wait_wrapper_ns'):.0f} ns per collective (median of rounds)")
    if "pair_ns" in runs["off"][0]:
        print(f"_WaitCounter guard pair: off {median('off', 'pair_ns'):.0f} ns, "
              f"on {median('on', 'pair_ns'):.0f} ns")


if __name__ == "__main__":
    main()

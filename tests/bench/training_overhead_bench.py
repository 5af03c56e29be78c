#!/usr/bin/env python3
"""Overhead of torchmon on a real PyTorch training step with 20 stats/step.

The same training step (an MLP on synthetic data: forward, backward,
optimizer step; on CUDA when available) runs in short blocks: without
stats, with 20 torchmon.Stat.add calls per step (delivered to a real
torchmond started here), and with 20 torch.monitor.Stat.add calls per step
(in process, for comparison). Each round runs one block of each kind in a
rotating order, so slow drift of the machine cancels out of the
differences within a round.

Reported (target in DESIGN.md: <= 0.5 %):
  wall overhead  median over rounds of (with - without) / without, with a
                 95 % bootstrap interval: what the training loop feels,
                 sender thread included when it competes for a core;
  CPU overhead   the same for process CPU time (every thread, so the
                 sender thread's work is counted even when it runs on an
                 idle core);
  add cost       the 20 add() calls timed on their own, per step: the
                 direct cost on the training thread, which machine noise
                 cannot hide (torchmon's and torch.monitor's);
  background     CPU of every other thread of the process (torchmon's
                 sender and ack threads, gRPC's) over the measured phase,
                 per step that recorded stats, and the daemon's CPU the
                 same way: what torchmon costs on the cores beside it.

    /usr/bin/python3 tests/bench/training_overhead_bench.py [--rounds 200] [--steps 10] [--pin]

--pin puts the training thread alone on CPU 0 and the daemon and every
other thread of this process (torchmon's sender and ack threads, gRPC's) on
the last CPU, as on a GPU node where a rank's training thread has a core and
the rest runs beside it. Without it everything shares every CPU.
"""

import argparse
import datetime
import os
import random
import statistics
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
sys.path.insert(0, os.path.join(BUILD, "client", "python"))

import torch  # noqa: E402
import torch.monitor  # noqa: E402
from torch import nn  # noqa: E402

import torchmon  # noqa: E402
from bench_children import LaunchedDaemon, machine_line  # noqa: E402

STATS_PER_STEP = 20
def thread_cpu_seconds(pid, exclude_tid=None):
    """Time on CPU of every thread of `pid` (but `exclude_tid`), seconds, from
    schedstat (nanoseconds; /proc/.../stat counts only 10 ms ticks)."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        if exclude_tid is not None and int(tid) == exclude_tid:
            continue
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except FileNotFoundError:
            continue  # the thread ended
    return total / 1e9


def pin_apart(daemon_pid):
    """Training thread on CPU 0; the daemon and our other threads on the last."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        sys.exit("--pin needs at least 2 CPUs")
    main_tid = threading.get_native_id()
    os.sched_setaffinity(main_tid, {cpus[0]})
    for tid in os.listdir("/proc/%d/task" % os.getpid()):
        if int(tid) != main_tid:
            os.sched_setaffinity(int(tid), {cpus[-1]})
    for tid in os.listdir("/proc/%d/task" % daemon_pid):
        os.sched_setaffinity(int(tid), {cpus[-1]})
    return cpus[0], cpus[-1]


def thread_names(pid):
    names = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/comm" % (pid, tid)) as f:
            names.append(f.read().strip())
    return sorted(names)


def bootstrap_median_ci(values, rounds=2000, seed=1):
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values)))
                     for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200,
                        help="rounds of three blocks (none, torchmon, torch.monitor)")
    parser.add_argument("--steps", type=int, default=10, help="training steps per block")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--pin", action="store_true",
                        help="training thread alone on CPU 0, everything else on the last CPU")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        # One core for training, as a rank pinned to its core; the other is
        # left to the daemon and the client's sender thread.
        torch.set_num_threads(1)

    with tempfile.TemporaryDirectory(prefix="torchmon-overhead.") as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        daemon = LaunchedDaemon([os.path.join(BUILD, "server", "torchmond"), "--listen",
                                 "unix://" + sock, "--metrics-listen", "127.0.0.1:0"])
        try:
            client = torchmon.Client(target="unix://" + sock, labels_from_environment=False)
            window = datetime.timedelta(seconds=10)
            stats = [torchmon.Stat(f"train.stat{i}", [torchmon.MEAN, torchmon.MAX], window,
                                   client=client) for i in range(STATS_PER_STEP)]
            monitor_stats = [torch.monitor.Stat(f"train.stat{i}", [torch.monitor.Aggregation.MEAN,
                                                                  torch.monitor.Aggregation.MAX],
                                                window) for i in range(STATS_PER_STEP)]
            kinds = {"none": [], "torchmon": [s.add for s in stats],
                     "torch.monitor": [s.add for s in monitor_stats]}

            torch.manual_seed(0)
            model = nn.Sequential(nn.Linear(64, args.hidden), nn.ReLU(),
                                  nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                                  nn.Linear(args.hidden, 1)).to(device)
            opt = torch.optim.SGD(model.parameters(), lr=1e-3)
            x = torch.randn(args.batch_size, 64, device=device)
            y = torch.randn(args.batch_size, 1, device=device)
            add_seconds = {k: 0.0 for k in kinds}

            def block(kind):
                adds = kinds[kind]
                if device.type == "cuda":
                    torch.cuda.synchronize()
                wall, cpu = time.perf_counter(), time.process_time()
                for step in range(args.steps):
                    opt.zero_grad(set_to_none=True)
                    loss = nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    opt.step()
                    if adds:
                        t = time.perf_counter()
                        v = float(step)
                        for add in adds:
                            add(v)
                        add_seconds[kind] += time.perf_counter() - t
                if device.type == "cuda":
                    torch.cuda.synchronize()
                return ((time.perf_counter() - wall) / args.steps,
                        (time.process_time() - cpu) / args.steps)

            client.flush(10)  # connected: every thread of the client exists now
            pinned = pin_apart(daemon.pid) if args.pin else None
            order = list(kinds)
            for _ in range(max(3, args.rounds // 20)):  # warm-up, every kind
                for kind in order:
                    block(kind)
            add_seconds = {k: 0.0 for k in kinds}
            me = os.getpid()
            background_before = thread_cpu_seconds(me, exclude_tid=threading.get_native_id())
            daemon_before = thread_cpu_seconds(daemon.pid)
            wall = {k: [] for k in kinds}
            cpu = {k: [] for k in kinds}
            for r in range(args.rounds):
                for kind in order[r % 3:] + order[:r % 3]:
                    w, c = block(kind)
                    wall[kind].append(w)
                    cpu[kind].append(c)
            flushed = client.flush(10)
            background = thread_cpu_seconds(me, exclude_tid=threading.get_native_id()) - \
                background_before
            daemon_cpu = thread_cpu_seconds(daemon.pid) - daemon_before
            threads = thread_names(me)
            client_stats = client.stats()
        finally:
            daemon.stop(timeout=10)

    steps_recorded = args.rounds * args.steps
    step = statistics.median(wall["none"])
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (1 thread)"
    print(f"machine: {machine_line()}")
    print(f"device {name}, torch {torch.__version__}; {args.rounds} rounds x {args.steps} steps, "
          f"batch {args.batch_size}, hidden {args.hidden}, {STATS_PER_STEP} stats/step; "
          + (f"training thread on CPU {pinned[0]}, the rest on CPU {pinned[1]}" if pinned
             else "threads not pinned"))
    print(f"  step without stats      {step * 1e6:10.1f} us wall, "
          f"{statistics.median(cpu['none']) * 1e6:10.1f} us CPU (medians)")
    for kind in ("torchmon", "torch.monitor"):
        wall_rel = [(a - b) / b for a, b in zip(wall[kind], wall["none"])]
        cpu_rel = [(a - b) / b for a, b in zip(cpu[kind], cpu["none"])]
        wall_lo, wall_hi = bootstrap_median_ci(wall_rel)
        cpu_lo, cpu_hi = bootstrap_median_ci(cpu_rel)
        add_per_step = add_seconds[kind] / steps_recorded
        print(f"  {kind}:")
        print(f"    wall overhead         {100 * statistics.median(wall_rel):+.3f} % "
              f"(95% CI {100 * wall_lo:+.3f} .. {100 * wall_hi:+.3f} %)")
        print(f"    CPU overhead          {100 * statistics.median(cpu_rel):+.3f} % "
              f"(95% CI {100 * cpu_lo:+.3f} .. {100 * cpu_hi:+.3f} %)")
        print(f"    add cost              {add_per_step * 1e6:.2f} us per step "
              f"({add_per_step / STATS_PER_STEP * 1e9:.0f} ns per add) = "
              f"{100 * add_per_step / step:.3f} % of the step")
    bg_step = background / steps_recorded
    daemon_step = daemon_cpu / steps_recorded
    print(f"  torchmon background threads {bg_step * 1e6:.2f} us CPU per torchmon step "
          f"= {100 * bg_step / step:.3f} % of the step "
          f"({background:.3f} s over the phase; threads: {', '.join(threads)})")
    print(f"  torchmond                   {daemon_step * 1e6:.2f} us CPU per torchmon step "
          f"= {100 * daemon_step / step:.3f} % of the step")
    print(f"  delivered: flush {'ok' if flushed else 'FAILED'}, "
          f"samples added {client_stats['samples_added']}, "
          f"dropped by the client {client_stats['samples_dropped']}")


if __name__ == "__main__":
    main()

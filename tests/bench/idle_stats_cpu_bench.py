#!/usr/bin/env python3
"""CPU of the client's sender thread in a process whose stats add nothing.

A child process defines N stats (default 10,000) on a client connected to a
real torchmond started here, flushes (the definitions reach the daemon),
then adds nothing for --seconds while the CPU time of its "torchmon-send"
and "torchmon-acks" threads is read from /proc/self/task/*/stat. Prints the
share of one core each took, over --repeats children (medians). Target
(issue 16): the sender <= 1 % of a core with 10,000 idle stats.

    /usr/bin/python3 tests/bench/idle_stats_cpu_bench.py [--stats 10000] [--seconds 10]
"""

import argparse
import statistics

from bench_children import PYTHON_DIR, machine_line, run_child, torchmond

CHILD = r"""
import datetime, json, os, sys, time
sys.path.insert(0, {python_dir!r})
import torchmon

def thread_cpu():
    ticks = os.sysconf("SC_CLK_TCK")
    out = {{}}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{{tid}}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{{tid}}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / ticks
    return out

client = torchmon.Client(target={target!r}, labels_from_environment=False)
window = datetime.timedelta(seconds=10)
stats = [torchmon.Stat(f"idle.s{{i}}", [torchmon.MEAN], window, client=client)
         for i in range({n})]
assert client.flush(60), "definitions not delivered"
time.sleep(1.0)
before, t0 = thread_cpu(), time.monotonic()
time.sleep({seconds})
after, t1 = thread_cpu(), time.monotonic()
wall = t1 - t0
print(json.dumps({{k: (after.get(k, 0.0) - before.get(k, 0.0)) / wall
                   for k in ("torchmon-send", "torchmon-acks")}}))
"""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats", type=int, default=10_000)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shares = {"torchmon-send": [], "torchmon-acks": []}
    with torchmond("torchmon-idlebench.") as target:
        for _ in range(args.repeats):
            code = CHILD.format(python_dir=PYTHON_DIR, target=target, n=args.stats,
                                seconds=args.seconds)
            result = run_child(code, "idle stats", timeout=args.seconds * 4 + 300)
            for k in shares:
                shares[k].append(result[k])
    print(f"machine: {machine_line()}")
    print(f"{args.stats} defined stats adding nothing, {args.seconds:g} s x {args.repeats} "
          f"children, CPU share of one core (medians; 10 ms tick resolution):")
    for k, v in shares.items():
        print(f"  {k:14s} {100 * statistics.median(v):6.3f} %   "
              f"(runs: {', '.join(f'{100 * x:.3f}' for x in v)})")


if __name__ == "__main__":
    main()

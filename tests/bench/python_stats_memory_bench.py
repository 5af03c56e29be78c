#!/usr/bin/env python3
"""RSS of a Python process that defines many stats: torchmon vs torch.monitor.

Each measurement is a fresh child process that imports torch (and torchmon),
reads its RSS, creates N stats with the same aggregations and window, reads
its RSS (the idle stats' cost), adds one sample to each, and reads its RSS
again; the differences are what the stats cost. torchmon's stats send to a real torchmond started here and the
child flushes before measuring, so the samples really went through the
client. Children alternate between the two modules for --repeats rounds;
medians are printed, with the cost per stat and the difference.

    /usr/bin/python3 tests/bench/python_stats_memory_bench.py [--stats 10000] [--repeats 3]

TORCHMON_PYTHON_DIR imports torchmon from elsewhere than the build tree (as
in python_add_bench.py).
"""

import argparse
import statistics

from bench_children import PYTHON_DIR, machine_line, run_child, torchmond

CHILD = r"""
import datetime, json, sys
sys.path.insert(0, {python_dir!r})
import torch, torch.monitor, torchmon

def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

which, n, target = {which!r}, {n}, {target!r}
window = datetime.timedelta(seconds=60)
if which == "torchmon":
    client = torchmon.Client(target=target, labels_from_environment=False)
    aggs = [torchmon.MEAN, torchmon.MAX]
    make = lambda i: torchmon.Stat(f"mem.s{{i}}", aggs, window, client=client)
else:
    aggs = [torch.monitor.Aggregation.MEAN, torch.monitor.Aggregation.MAX]
    make = lambda i: torch.monitor.Stat(f"mem.s{{i}}", aggs, window)
before = rss_bytes()
stats = [make(i) for i in range(n)]
idle = rss_bytes()
for s in stats:
    s.add(1.0)
if which == "torchmon":
    assert client.flush(60), "not delivered"
after = rss_bytes()
print(json.dumps({{"before": before, "idle": idle, "after": after}}))
"""


def measure(which, n, target):
    code = CHILD.format(python_dir=PYTHON_DIR, which=which, n=n, target=target)
    result = run_child(code, which, timeout=600)
    return result["idle"] - result["before"], result["after"] - result["before"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    growth = {"torch.monitor": [], "torchmon": []}
    idle = {"torch.monitor": [], "torchmon": []}
    with torchmond("torchmon-membench.") as target:
        for _ in range(args.repeats):
            for which in ("torch.monitor", "torchmon"):
                defined, added = measure(which, args.stats, target)
                idle[which].append(defined)
                growth[which].append(added)

    mib = 1 << 20
    med = {k: statistics.median(v) for k, v in growth.items()}
    print(f"machine: {machine_line()}")
    print(f"{args.stats} stats, one add each, {args.repeats} alternating rounds, "
          f"RSS growth (medians):")
    for which in ("torch.monitor", "torchmon"):
        print(f"  {which:14s} {med[which] / mib:9.1f} MiB  ({med[which] / args.stats:9.0f} B per stat;"
              f" rounds: {', '.join(f'{v / mib:.1f}' for v in growth[which])} MiB)")
    print(f"torchmon - torch.monitor: {(med['torchmon'] - med['torch.monitor']) / mib:.1f} MiB "
          f"(target: <= 10 MiB)")
    print("defined, before any add (medians):")
    for which in ("torch.monitor", "torchmon"):
        m = statistics.median(idle[which])
        print(f"  {which:14s} {m / mib:9.1f} MiB  ({m / args.stats:9.0f} B per idle stat)")


if __name__ == "__main__":
    main()

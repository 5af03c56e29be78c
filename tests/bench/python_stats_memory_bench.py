#!/usr/bin/env python3
"""RSS of a Python process that defines many stats: torchmon vs torch.monitor.

Each measurement is a fresh child process that imports torch (and torchmon)
and reads its RSS; for torchmon it then makes a client, connected, with one
stat whose sample was delivered (what a user's first Stat costs), and reads
again; then it creates N stats with the same aggregations and window (the
idle stats' cost), adds one sample to each, and reads its RSS again. The
headline is the growth from the imports on, the client included: what a
training process pays. torchmon's stats send to a real torchmond started
here and the child flushes before measuring, so the samples really went
through the client. Beside each RSS figure, its anonymous part (the rest
is library code and data paged in, shared between processes) and the C
heap's bytes in use (glibc's mallinfo2) say what kind of memory it is.
Children alternate between the two modules for --repeats rounds; medians
are printed, with the cost per stat and the difference.

    /usr/bin/python3 tests/bench/python_stats_memory_bench.py [--stats 10000] [--repeats 3]

TORCHMON_PYTHON_DIR imports torchmon from elsewhere than the build tree (as
in python_add_bench.py).
"""

import argparse
import statistics

from bench_children import PYTHON_DIR, machine_line, run_child, torchmond

CHILD = r"""
import ctypes, datetime, json, sys
sys.path.insert(0, {python_dir!r})
import torch, torch.monitor, torchmon

class MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]
libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2

def point():
    # Resident bytes; of them, anonymous ones (the rest are pages of files
    # mapped: the libraries' code and data, shared with every process that
    # maps them); and the C heap's bytes in use (malloc'd and not freed,
    # every arena and mmapped block).
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * 4096
    with open("/proc/self/status") as f:
        anon = next(int(l.split()[1]) * 1024 for l in f if l.startswith("RssAnon:"))
    m = libc.mallinfo2()
    return {{"rss": rss, "anon": anon, "heap": m.uordblks + m.hblkhd}}

which, n, target = {which!r}, {n}, {target!r}
window = datetime.timedelta(seconds=60)
result = {{"before": point()}}
if which == "torchmon":
    # The client as a user's first Stat makes it: connected, with a stat
    # defined and a sample delivered.
    client = torchmon.Client(target=target, labels_from_environment=False)
    aggs = [torchmon.MEAN, torchmon.MAX]
    first = torchmon.Stat("mem.first", aggs, window, client=client)
    first.add(1.0)
    assert client.flush(60), "not delivered"
    make = lambda i: torchmon.Stat(f"mem.s{{i}}", aggs, window, client=client)
else:
    aggs = [torch.monitor.Aggregation.MEAN, torch.monitor.Aggregation.MAX]
    make = lambda i: torch.monitor.Stat(f"mem.s{{i}}", aggs, window)
result["client"] = point()
stats = [make(i) for i in range(n)]
result["idle"] = point()
for s in stats:
    s.add(1.0)
if which == "torchmon":
    assert client.flush(60), "not delivered"
result["after"] = point()
print(json.dumps(result))
"""


def measure(which, n, target):
    """One child's points: {before, client, idle, after: {rss, anon, heap}}."""
    code = CHILD.format(python_dir=PYTHON_DIR, which=which, n=n, target=target)
    return run_child(code, which, timeout=600)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--stats", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    modules = ("torch.monitor", "torchmon")
    runs = {m: [] for m in modules}
    with torchmond("torchmon-membench.") as target:
        for _ in range(args.repeats):
            for which in modules:
                runs[which].append(measure(which, args.stats, target))

    mib = 1 << 20
    # (label, later point, earlier point, per stat or in all)
    parts = (("the client, connected, one stat delivered", "client", "before", False),
             ("per idle stat", "idle", "client", True),
             ("per stat, one add each, delivered", "after", "idle", True))

    def grew(r, later, earlier, kind="rss"):
        return r[later][kind] - r[earlier][kind]

    def med(which, later, earlier, kind="rss"):
        return statistics.median(grew(r, later, earlier, kind) for r in runs[which])

    growth = {m: med(m, "after", "before") for m in modules}
    print(f"machine: {machine_line()}")
    print(f"{args.stats} stats, one add each, {args.repeats} alternating rounds, "
          f"RSS growth from the imports on (medians):")
    for which in modules:
        rounds = ", ".join(f"{grew(r, 'after', 'before') / mib:.1f}" for r in runs[which])
        print(f"  {which:14s} {growth[which] / mib:9.1f} MiB  (rounds: {rounds} MiB)")
        if which == "torchmon":
            # Each round's parts (client, idle stats, first samples), to
            # tell which of them the rounds differ in.
            print("  " + " " * 14 + " rounds' parts (client | idle | first samples, MiB): " + "; ".join(
                " | ".join(f"{grew(r, later, earlier) / mib:.1f}" for _, later, earlier, _ in parts)
                for r in runs[which]))
    diff = growth["torchmon"] - growth["torch.monitor"]
    print(f"torchmon - torch.monitor: {diff / mib:.1f} MiB (target: <= 10 MiB; "
          f"margin {10 - diff / mib:.1f} MiB)")
    print("where it goes (medians; RSS, of it anonymous, and the C heap in use):")
    for which in modules:
        for label, later, earlier, per_stat in parts:
            if which == "torch.monitor" and later == "client":
                continue
            rss, anon, heap = (med(which, later, earlier, k) for k in ("rss", "anon", "heap"))
            if per_stat:
                n = args.stats
                print(f"  {which:14s} {label:42s} {rss / n:6.0f} B, anon {anon / n:6.0f} B, "
                      f"heap {heap / n:6.0f} B")
            else:
                print(f"  {which:14s} {label:42s} {rss / mib:6.2f} MiB, anon {anon / mib:5.2f} MiB, "
                      f"heap {heap / mib:5.2f} MiB")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""torchmon.Stat.add vs torch.monitor.Stat.add, side by side in one run.

Both stats are created with the same aggregations and a 60 s window (so
neither logs a window event during the measurement). Rounds alternate
between the two so machine noise hits both alike; each round times N calls
through a local bound method, and the empty-loop cost is measured the same
way so it can be subtracted. Prints medians and the ratio (target in
DESIGN.md: torchmon <= 1.0x torch.monitor).

torchmon's stat sends to a real torchmond started here (from the build
tree), with default client options; a round adds no more than one stat may
buffer from its first add (its first 8 chunks hold about 58,000 samples),
whatever the sender manages meanwhile, so no sample is dropped; drops are
reported.

    /usr/bin/python3 tests/bench/python_add_bench.py [--calls 32768] [--rounds 61]

TORCHMON_PYTHON_DIR imports torchmon from elsewhere than the build tree: the
site-packages of a venv the wheel is installed in, or another build's
client/python to compare bindings (one per process: two copies of the
client would register torchmon.proto twice with one libprotobuf).

The "empty loop" calls `callable`, the cheapest C function there is (METH_O,
no allocation), so "net" is what a call costs beyond any C call.
"""

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
sys.path.insert(0, os.environ.get("TORCHMON_PYTHON_DIR", os.path.join(BUILD, "client", "python")))

import torch  # noqa: E402
import torch.monitor  # noqa: E402
import torchmon  # noqa: E402
from bench_children import LaunchedDaemon, machine_line  # noqa: E402


def time_calls(fn, calls):
    start = time.perf_counter_ns()
    for _ in range(calls):
        fn(1.5)
    return (time.perf_counter_ns() - start) / calls


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=1 << 15)
    parser.add_argument("--rounds", type=int, default=61)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="torchmon-bench.") as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        daemon = LaunchedDaemon(
            [os.path.join(BUILD, "server", "torchmond"), "--listen", "unix://" + sock,
             "--metrics-listen", "127.0.0.1:0"])
        try:
            client = torchmon.Client(target="unix://" + sock, labels_from_environment=False)
            aggs_tm = [torchmon.MEAN, torchmon.MAX]
            aggs_torch = [torch.monitor.Aggregation.MEAN, torch.monitor.Aggregation.MAX]
            window = datetime.timedelta(seconds=60)
            ours = torchmon.Stat("bench.add", aggs_tm, window, client=client)
            theirs = torch.monitor.Stat("bench.add", aggs_torch, window)
            noop = callable

            samples = {"torchmon": [], "torch.monitor": [], "empty loop": []}
            for _ in range(args.rounds):
                samples["torch.monitor"].append(time_calls(theirs.add, args.calls))
                samples["torchmon"].append(time_calls(ours.add, args.calls))
                samples["empty loop"].append(time_calls(noop, args.calls))
                client.flush(10)  # keep the buffer from filling between rounds
            delivered = client.flush(30)
            stats = client.stats()
        finally:
            daemon.stop(timeout=10)

    med = {k: statistics.median(v) for k, v in samples.items()}
    print(f"machine: {machine_line()}")
    print(f"torch {torch.__version__}, python {sys.version.split()[0]}, "
          f"{args.rounds} rounds x {args.calls} calls, medians (ns per call):")
    for name in ("torch.monitor", "torchmon", "empty loop"):
        v = samples[name]
        print(f"  {name:14s} {med[name]:7.1f}   (min {min(v):.1f}, max {max(v):.1f})")
    net_ours = med["torchmon"] - med["empty loop"]
    net_theirs = med["torch.monitor"] - med["empty loop"]
    print(f"ratio torchmon / torch.monitor: {med['torchmon'] / med['torch.monitor']:.2f}x "
          f"(calls incl. loop), {net_ours / net_theirs:.2f}x (net of the empty loop)")
    print(f"samples added {stats['samples_added']}, dropped by the client "
          f"{stats['samples_dropped']}, all acknowledged: {delivered}")


if __name__ == "__main__":
    main()

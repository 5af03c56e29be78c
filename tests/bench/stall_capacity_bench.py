#!/usr/bin/env python3
"""What a client holds while its daemon does not answer, measured directly.

A real torchmond is started and stopped (SIGSTOP) once the client has
delivered a first sample; one thread then adds to one stat as fast as
Python goes, and the client's counters are read every --step samples. At
the first drop it reports where the samples it held were:

  in the thread's log   added - sent - dropped (taken by no batch yet)
  with the sender       sent - delivered (in batches written or being
                        written, unacknowledged)

and how long the stop had lasted, so that the stall a budget absorbs at a
given rate can be read off. The daemon is then continued, the client
flushes, and the accounting must close (added = delivered + dropped).
Each --buffer-bytes is measured in its own child process, --repeats times,
alternating.

    /usr/bin/python3 tests/bench/stall_capacity_bench.py [--buffer-bytes 33554432 134217728]
"""

import argparse
import os
import signal
import statistics

from bench_children import PYTHON_DIR, machine_line, run_child, torchmond_process

CHILD = r"""
import datetime, json, os, signal, sys, time
sys.path.insert(0, {python_dir!r})
import torchmon
client = torchmon.Client(target={target!r}, labels_from_environment=False,
                         buffer_bytes={buffer_bytes})
stat = torchmon.Stat("stall.capacity", [torchmon.MEAN], datetime.timedelta(seconds=1),
                     client=client)
stat.add(0.0)
assert client.flush(60), "not delivered"
os.kill({daemon_pid}, signal.SIGSTOP)
try:
    add, step, limit = stat.add, {step}, {limit}
    start = time.monotonic()
    first = None
    while first is None:
        for _ in range(step):
            add(1.0)
        s = client.stats()
        if s["samples_dropped"] > 0 or s["samples_added"] > limit:
            first = dict(s, seconds=time.monotonic() - start)
finally:
    os.kill({daemon_pid}, signal.SIGCONT)
assert client.flush(120), "not flushed"
end = client.stats()
assert end["samples_added"] == end["samples_delivered"] + end["samples_dropped"], end
print(json.dumps(first))
"""


def measure(buffer_bytes, step, limit):
    with torchmond_process("torchmon-stall.") as (target, daemon):
        code = CHILD.format(python_dir=PYTHON_DIR, target=target, buffer_bytes=buffer_bytes,
                            daemon_pid=daemon.pid, step=step, limit=limit)
        try:
            return run_child(code, f"buffer_bytes={buffer_bytes}", timeout=600)
        finally:
            # A child that failed while the daemon was stopped left it so;
            # a stopped daemon would not stop.
            try:
                os.kill(daemon.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--buffer-bytes", type=int, nargs="+", default=[32 << 20, 128 << 20])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step", type=int, default=20_000,
                        help="samples added between two reads of the counters")
    parser.add_argument("--limit", type=int, default=200_000_000,
                        help="stop here if nothing has dropped by then")
    args = parser.parse_args()
    runs = {b: [] for b in args.buffer_bytes}
    for _ in range(args.repeats):
        for b in args.buffer_bytes:
            runs[b].append(measure(b, args.step, args.limit))
    print(f"machine: {machine_line()}")
    print(f"daemon stopped, one thread adding; at the first drop (medians of {args.repeats}; "
          f"samples of 24 bytes in a log):")
    for b, rs in runs.items():
        def med(f):
            return statistics.median(f(r) for r in rs)
        added = med(lambda r: r["samples_added"])
        log = med(lambda r: r["samples_added"] - r["samples_sent"] - r["samples_dropped"])
        sender = med(lambda r: r["samples_sent"] - r["samples_delivered"])
        seconds = med(lambda r: r["seconds"])
        print(f"  budget {b / (1 << 20):6.0f} MiB: added {added / 1e6:6.2f} M in {seconds * 1e3:6.0f} ms"
              f" ({added / seconds / 1e6:4.1f} M/s); held in the log {log / 1e6:5.2f} M"
              f" ({log * 24 / (1 << 20):5.1f} MiB), with the sender {sender / 1e6:5.2f} M")
        print("      rounds (added, in the log, with the sender, M): " + "; ".join(
            f"{r['samples_added'] / 1e6:.2f}, "
            f"{(r['samples_added'] - r['samples_sent'] - r['samples_dropped']) / 1e6:.2f}, "
            f"{(r['samples_sent'] - r['samples_delivered']) / 1e6:.2f}" for r in rs))


if __name__ == "__main__":
    main()

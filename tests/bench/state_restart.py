#!/usr/bin/env python3
"""What --state-dir costs at restart: how long torchmond takes from exec to
its ready line with N series in its state, after a stop (SIGTERM: a
snapshot, nothing to replay) and after a kill (SIGKILL: the journal since
the last snapshot replayed), and how large the state is on disk per series
and per window of history.

    /usr/bin/python3 tests/bench/state_restart.py [--series 100000] [--repeats 3]

The state is made by the real path: torchmon-loadgen, 4 ranks, drives the
daemon for --seconds with windows of 1 s, so each series has an open window
and --seconds of history. Each restart is timed from the exec of the new
daemon to its ready line (which it prints once the state is restored and a
snapshot of it written); the daemon's own "state: restored ..." line gives
the restore alone. Medians of --repeats.
"""

import argparse
import glob
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from bench_children import LaunchedDaemon, machine_line

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
TORCHMOND = os.path.join(BUILD, "server", "torchmond")
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")
RANKS = 4


def daemon_argv(sock, state):
    return [TORCHMOND, "--listen", "unix://" + sock, "--metrics-listen", "127.0.0.1:0",
            "--state-dir", state, "--grace", "1s", "--max-series", "2000000",
            "--max-series-per-client", "1000000"]


def state_bytes(state):
    sizes = {"snapshot": 0, "journal": 0}
    for path in glob.glob(os.path.join(state, "*-*")):
        kind = os.path.basename(path).split("-")[0]
        if kind in sizes:
            sizes[kind] = max(sizes[kind], os.path.getsize(path))
    return sizes


def newest_journal_bytes(state):
    """The size of the journal the next restore replays (the newest)."""
    journals = sorted(glob.glob(os.path.join(state, "journal-*")))
    return os.path.getsize(journals[-1]) if journals else 0


def start_timed(argv, log):
    """Starts the daemon; returns it and the seconds from exec to ready."""
    t0 = time.monotonic()
    daemon = LaunchedDaemon(argv, stderr=log, timeout=120.0)
    return daemon, time.monotonic() - t0


def restored_in(daemon):
    """The restore's own duration, from the daemon's log line."""
    text = daemon.read_stderr()
    m = re.findall(r"state: restored (\d+) series .* (\d+) journal records replayed, in ([^;]+);",
                   text)
    return m[-1] if m else None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=100000)
    parser.add_argument("--seconds", type=int, default=10, help="load (and history) per series")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="torchmon-state-restart.") as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        state = os.path.join(tmp, "state")
        log = open(os.path.join(tmp, "daemon.log"), "w+")
        daemon = LaunchedDaemon(daemon_argv(sock, state), stderr=log, timeout=30.0)
        rate = args.series * 2  # two samples a second per series
        subprocess.run([LOADGEN, "--target", "unix://" + sock, "--ranks", str(RANKS),
                        "--stats", str(args.series // RANKS), "--rate", str(rate),
                        "--duration", "%ds" % args.seconds, "--window", "1s",
                        "--aggs", "mean,max,min,count", "--query-timeout", "120s",
                        "--flush-timeout", "120s"],
                       check=True, stdout=subprocess.DEVNULL, timeout=600)
        time.sleep(1.5)  # every window but the open one closed
        # Killed as the load left it: the journal since the last snapshot
        # (up to twice the snapshot's size) is replayed, the slowest restart.
        journal = newest_journal_bytes(state)
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.proc.wait(timeout=30)
        daemon, took = start_timed(daemon_argv(sock, state), log)
        late = restored_in(daemon)
        print(f"restart after SIGKILL with the load's journal ({journal / 1e6:.0f} MB since the "
              f"last snapshot): {took:.2f} s exec to ready; restore: "
              f"{'%s series, %s records in %s' % late if late else '?'}")
        daemon.stop(timeout=60)
        sizes = state_bytes(state)
        windows = args.seconds
        print(f"state of {args.series} series, {windows} windows of history each: snapshot "
              f"{sizes['snapshot'] / 1e6:.1f} MB = {sizes['snapshot'] / args.series:.0f} B per "
              f"series ({sizes['snapshot'] / args.series / max(windows, 1):.0f} B per series "
              f"and window of history)")
        results = {"stop": [], "kill": []}
        restore = {"stop": [], "kill": []}
        for i in range(args.repeats):
            for how in ("stop", "kill"):
                daemon, took = start_timed(daemon_argv(sock, state), log)
                results[how].append(took)
                restore[how].append(restored_in(daemon))
                if how == "stop":
                    # A batch of samples after the snapshot: the kill leaves
                    # them in the journal only.
                    subprocess.run([LOADGEN, "--target", "unix://" + sock, "--ranks", "1",
                                    "--stats", "1000", "--rate", "100000", "--duration", "1s",
                                    "--query-timeout", "60s"],
                                   check=True, stdout=subprocess.DEVNULL, timeout=300)
                    os.kill(daemon.pid, signal.SIGKILL)
                    daemon.proc.wait(timeout=30)
                else:
                    daemon.stop(timeout=60)
        for how, label in (("stop", "after SIGTERM"), ("kill", "after SIGKILL")):
            print(f"restart {label}: median {statistics.median(results[how]):.2f} s exec to "
                  f"ready (runs: {', '.join('%.2f' % t for t in results[how])}); "
                  f"restores: {', '.join('%s series, %s records in %s' % r if r else '?' for r in restore[how])}")
        log.close()


if __name__ == "__main__":
    sys.exit(main())

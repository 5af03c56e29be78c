#!/usr/bin/env python3
"""What --state-dir costs at restart: how long torchmond takes from exec to
its ready line with N series in its state, after a stop (SIGTERM: a
snapshot, nothing to replay), after a kill just after a snapshot, and after
a kill just before one (SIGKILL with the most journal a restart replays),
and how large the state is on disk per series and per window of history.

    /usr/bin/python3 tests/bench/state_restart.py [--series 100000] [--repeats 3]

The state is made by the real path: torchmon-loadgen, 4 ranks, drives the
daemon for --seconds with windows of 1 s, so each series has an open window
and --seconds of history. Near the load's end the daemon is killed once the
journal since its last snapshot is 95 % of what makes the next one due
(half the last snapshot's size, 8 MiB at least): the worst kill. Each
restart is timed from the exec of the new daemon to its ready line (which
it prints once the state is restored); the daemon's own "state: restored
..." line gives the restore alone. Medians of --repeats.
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
    """The newest snapshot's size, and the history files' in all."""
    snapshots = sorted(glob.glob(os.path.join(state, "snapshot-*")))
    history = sum(os.path.getsize(p) for p in glob.glob(os.path.join(state, "history-*")))
    return (os.path.getsize(snapshots[-1]) if snapshots else 0), history


def write_bytes(pid):
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def kill_before_snapshot(daemon, state, deadline):
    """SIGKILLs the daemon once the journal since its last snapshot nears
    what makes the next one due; returns that journal's size."""
    while time.monotonic() < deadline:
        snapshots = sorted(glob.glob(os.path.join(state, "snapshot-*")))
        due = max(8 << 20, os.path.getsize(snapshots[-1]) // 2) if snapshots else 8 << 20
        journal = newest_journal_bytes(state)
        if journal >= 0.95 * due:
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.proc.wait(timeout=30)
            return journal
        time.sleep(0.02)
    os.kill(daemon.pid, signal.SIGKILL)
    daemon.proc.wait(timeout=30)
    return newest_journal_bytes(state)


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
        # The load runs a little longer than --seconds; the kill comes in
        # its last seconds, while it streams.
        load = subprocess.Popen([LOADGEN, "--target", "unix://" + sock, "--ranks", str(RANKS),
                                 "--stats", str(args.series // RANKS), "--rate", str(rate),
                                 "--duration", "%ds" % (args.seconds + 20), "--window", "1s",
                                 "--aggs", "mean,max,min,count", "--query-timeout", "120s",
                                 "--flush-timeout", "2s"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # What the daemon writes while it streams (journal, snapshots and
        # history files), from its second half on: the history is long by
        # then and the copies of it are written in full.
        time.sleep(args.seconds / 2)
        written0, t0 = write_bytes(daemon.pid), time.monotonic()
        time.sleep(args.seconds / 2)
        written = (write_bytes(daemon.pid) - written0) / (time.monotonic() - t0)
        journal = kill_before_snapshot(daemon, state, time.monotonic() + 15)
        load.kill()
        load.wait()
        snapshot, history = state_bytes(state)
        daemon, took = start_timed(daemon_argv(sock, state), log)
        late = restored_in(daemon)
        print(f"restart after SIGKILL just before a snapshot ({journal / 1e6:.1f} MB of journal "
              f"since the last, {snapshot / 1e6:.1f} MB snapshot): {took:.2f} s exec to ready; "
              f"restore: {'%s series, %s records in %s' % late if late else '?'}")
        daemon.stop(timeout=60)
        print(f"written while streaming {rate} samples/s: {written / 1e6:.1f} MB/s (journal, "
              f"snapshots and history files; /proc/PID/io write_bytes)")
        snapshot, history = state_bytes(state)
        windows = args.seconds
        print(f"state of {args.series} series, about {windows} windows of history each: snapshot "
              f"{snapshot / 1e6:.1f} MB ({snapshot / args.series:.0f} B per series), history files "
              f"{history / 1e6:.1f} MB in all ({history / args.series / max(windows, 1):.0f} B per "
              f"series and window of history)")
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

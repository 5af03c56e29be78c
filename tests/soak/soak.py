#!/usr/bin/env python3
"""A bounded soak of torchmond: steady load from several clients, periodic
scrapes and queries, a daemon SIGKILL/restart midway, for a few minutes.

It samples the daemon's RSS and open file descriptors, and at the end checks
the accounting of every series exactly (see docs/reliability.md):

  client side: added = delivered + dropped, and every drop was reported;
  daemon side: accepted + capped + late + skewed + client_dropped of each
               series = what the running daemon process acknowledged.

Usage (from the repository root, after building into build/):
  /usr/bin/python3 tests/soak/soak.py [--minutes 3] [--clients 4] [--rate 50000]
Exit status 0 if every check holds; the figures are printed as a table.
Only the standard library is used.
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from torchmond import LaunchedDaemon  # noqa: E402  (the one launcher)


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def open_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class Daemon:
    def __init__(self, build, workdir, socket):
        try:
            launched = LaunchedDaemon(
                [os.path.join(build, "server/torchmond"), "--listen", f"unix://{socket}",
                 "--metrics-listen", "127.0.0.1:0", "--grace", "1s", "--series-ttl", "1m"],
                stderr=open(os.path.join(workdir, "torchmond.stderr"), "a+"))
        except RuntimeError as e:
            raise SystemExit(str(e))
        self.proc = launched.proc
        self.metrics = launched.ready.metrics

    def scrape(self):
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as r:
            return r.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--stats", type=int, default=8, help="stats per client")
    ap.add_argument("--rate", type=int, default=50_000, help="samples/s per client")
    ap.add_argument("--sample-every", type=float, default=5.0, help="seconds between checks")
    ap.add_argument("--no-kill", action="store_true", help="skip the SIGKILL/restart midway")
    args = ap.parse_args()

    workdir = tempfile.mkdtemp(prefix="torchmon-soak-")
    socket = os.path.join(workdir, "torchmond.sock")
    target = f"unix://{socket}"
    ctl = os.path.join(args.build, "client/cli/torchmonctl")
    load = os.path.join(args.build, "tests/integration/torchmon_load_client")

    daemon = Daemon(args.build, workdir, socket)
    clients = [subprocess.Popen([load, "--target", target, "--rank", str(r), "--stats",
                                 str(args.stats), "--rate", str(args.rate), "--window-ms", "100"],
                                stdout=subprocess.PIPE, text=True)
               for r in range(args.clients)]
    for c in clients:
        assert c.stdout.readline().strip() == "ready"

    duration = args.minutes * 60
    start = time.monotonic()
    kill_at = None if args.no_kill else duration / 2
    samples = []  # (elapsed s, rss KiB, fds, scrape ms, scrape bytes)
    scrapes = queries = 0
    restarts = 0
    while time.monotonic() - start < duration:
        time.sleep(args.sample_every)
        elapsed = time.monotonic() - start
        if kill_at is not None and elapsed >= kill_at:
            daemon.proc.kill()
            daemon.proc.wait()
            time.sleep(1.0)  # the outage
            daemon = Daemon(args.build, workdir, socket)
            kill_at = None
            restarts += 1
            samples.append(None)  # a new process: RSS and fds start over
            continue
        t0 = time.monotonic()
        body = daemon.scrape()
        scrape_ms = (time.monotonic() - t0) * 1000
        scrapes += 1
        subprocess.run([ctl, "--target", target, "--json", "series"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run([ctl, "--target", target, "--json", "windows", "load.s0", "--last", "5"],
                       check=True, stdout=subprocess.DEVNULL)
        queries += 2
        samples.append((elapsed, rss_kib(daemon.proc.pid), open_fds(daemon.proc.pid), scrape_ms,
                        len(body)))
        print(f"{elapsed:7.1f}s  rss {samples[-1][1]:7d} KiB  fds {samples[-1][2]:3d}  "
              f"scrape {scrape_ms:6.1f} ms {len(body):8d} B", flush=True)

    # Stop the clients: they flush and report.
    reports = {}
    for rank, c in enumerate(clients):
        c.send_signal(signal.SIGTERM)
        out, _ = c.communicate(timeout=60)
        reports[rank] = out
    series = json.loads(subprocess.run([ctl, "--target", target, "--json", "series"], check=True,
                                       capture_output=True, text=True).stdout)["series"]
    by_key = {(s["labels"].get("rank"), s["stat"]): s["counters"] for s in series}

    failures = []
    totals = dict(added=0, delivered=0, dropped=0)
    for rank, out in reports.items():
        if "client flush=OK" not in out:
            failures.append(f"rank {rank}: final flush failed:\n{out}")
        for line in out.splitlines():
            if not line.startswith("stat "):
                continue
            name = line.split()[1]
            f = dict(kv.split("=") for kv in line.split()[2:])
            f = {k: int(v) for k, v in f.items()}
            for k in totals:
                totals[k] += f[k]
            if f["added"] != f["delivered"] + f["dropped"]:
                failures.append(f"rank {rank} {name}: added != delivered + dropped: {f}")
            if f["dropped"] != f["drops_reported"]:
                failures.append(f"rank {rank} {name}: drops not all reported: {f}")
            c = by_key.get((str(rank), name))
            if c is None:
                failures.append(f"rank {rank} {name}: no series on the daemon")
                continue
            daemon_sent = sum(c[k] for k in ("accepted", "capped", "late", "skewed",
                                             "client_dropped"))
            if daemon_sent != f["current_delivered"] + f["current_drops"]:
                failures.append(f"rank {rank} {name}: daemon counts {c}, client {f}")

    # Flatness: within the last daemon process, compare the first and last
    # thirds of the samples (after a warm-up sample).
    last_run = samples[len(samples) - samples[::-1].index(None):] if None in samples else samples
    last_run = last_run[1:]
    third = max(1, len(last_run) // 3)
    rss_early = statistics.median(s[1] for s in last_run[:third])
    rss_late = statistics.median(s[1] for s in last_run[-third:])
    fds_early = max(s[2] for s in last_run[:third])
    fds_late = max(s[2] for s in last_run[-third:])
    if rss_late > rss_early * 1.10 + 2048:
        failures.append(f"RSS grew: median {rss_early} KiB early, {rss_late} KiB late")
    if fds_late > fds_early + 2:
        failures.append(f"open fds grew: {fds_early} early, {fds_late} late")
    daemon.proc.send_signal(signal.SIGTERM)
    daemon.proc.wait(timeout=30)

    print()
    print(f"duration            {duration:.0f} s, {args.clients} clients x {args.stats} stats, "
          f"{args.rate} samples/s each ({args.clients * args.rate} samples/s offered)")
    print(f"daemon SIGKILLs     {restarts} (restarted after 1 s)")
    print(f"scrapes / queries   {scrapes} / {queries}")
    print(f"samples added       {totals['added']}")
    print(f"  delivered         {totals['delivered']}")
    print(f"  dropped (counted) {totals['dropped']}")
    print(f"RSS (last process)  median {rss_early} KiB in the first third, {rss_late} KiB in the "
          f"last")
    print(f"open fds            {fds_early} -> {fds_late}")
    print(f"scrape time         median "
          f"{statistics.median(s[3] for s in samples if s):.1f} ms")
    if failures:
        print("\nFAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print("\nall checks passed: accounting exact for every series, RSS and fds flat")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""How torchmond's cost grows with series and with clients.

For each configuration a fresh torchmond is started (temporary Unix socket,
metrics on a free loopback port), torchmon-loadgen drives it through the real
client, then, once the run's windows have closed, /metrics is scraped with
curl and the daemon's resident memory is read from /proc. Each configuration
runs --repeats times; the table shows medians.

    /usr/bin/python3 tests/bench/scaling.py [--axis series|clients|both] [--repeats 3]

Columns:
  accepted/s    samples the daemon aggregated per second (drain included)
  lost          client_dropped + capped + late + skewed (all counted; the
                run fails if the accounting is not exact)
  daemon CPU    daemon CPU seconds per million samples sent
  client CPU    load generator CPU seconds per million samples sent
  RSS/series    (daemon RSS after the run - RSS before it) / series; an upper
                bound on what a series costs (it includes malloc's retained
                free memory and the closed windows of the run, --history 1)
  scrape        wall time of `curl /metrics` (HTTP/1.1, read to the end),
                median of 5, and per 1000 series
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from bench_children import LaunchedDaemon, machine_line, rss_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
TORCHMOND = os.path.join(BUILD, "server", "torchmond")
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")

WINDOW_S = 2
GRACE_S = 1


def run_one(series, clients, rate, duration_s):
    stats_per_client = series // clients
    with tempfile.TemporaryDirectory(prefix="torchmon-scaling.") as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        daemon = LaunchedDaemon(
            [TORCHMOND, "--listen", "unix://" + sock, "--metrics-listen", "127.0.0.1:0",
             "--grace", "%ds" % GRACE_S, "--history", "1"])
        try:
            metrics = daemon.ready.metrics
            time.sleep(0.2)
            rss_before = rss_bytes(daemon.pid)
            cmd = [LOADGEN, "--target", "unix://" + sock, "--daemon-pid", str(daemon.pid),
                   "--ranks", str(clients), "--stats", str(stats_per_client),
                   "--rate", str(rate), "--duration", "%ds" % duration_s,
                   "--window", "%ds" % WINDOW_S, "--aggs", "mean,max,min",
                   "--query-timeout", "120s", "--flush-timeout", "120s", "--json"]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s * 10 + 300)
            try:
                j = json.loads(out.stdout.strip().splitlines()[-1])
            except (ValueError, IndexError):
                raise RuntimeError("loadgen (exit %d): %s" % (out.returncode, out.stderr[-2000:]))
            if out.returncode != 0 or not j["exact"]:
                raise RuntimeError("loadgen reported inexact accounting: " + out.stdout[-2000:])
            # Let the run's last windows close, so the scrape shows them.
            time.sleep(WINDOW_S + GRACE_S + 1.5)
            scrapes = []
            size = 0
            for _ in range(5):
                c = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w",
                                    "%{time_total} %{size_download} %{http_code}",
                                    "http://%s/metrics" % metrics],
                                   capture_output=True, text=True, timeout=120)
                t, size, code = c.stdout.split()
                if code != "200":
                    raise RuntimeError("scrape answered HTTP " + code)
                scrapes.append(float(t))
            rss_after = rss_bytes(daemon.pid)
        finally:
            daemon.stop(timeout=60)
    lost = j["client_dropped"] + j["capped"] + j["late"] + j["skewed"]
    return {
        "accepted_per_s": j["accepted_per_second"],
        "lost": lost,
        "sent": j["sent"],
        "daemon_cpu_per_m": j["daemon_cpu_seconds_per_million"],
        "client_cpu_per_m": j["client_cpu_seconds_per_million"],
        "rss_per_series": (rss_after - rss_before) / series,
        "scrape_s": statistics.median(scrapes),
        "scrape_bytes": int(size),
    }


def fmt(v, unit=""):
    if v >= 1e6:
        return "%.2fM%s" % (v / 1e6, unit)
    if v >= 1e3:
        return "%.1fk%s" % (v / 1e3, unit)
    return "%.0f%s" % (v, unit)


def table(title, rows):
    print()
    print(title)
    print("| series | clients | offered/s | accepted/s | lost | daemon CPU s/M | client CPU s/M "
          "| RSS/series | scrape | scrape per 1k series |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (series, clients, rate), rs in rows:
        m = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        print("| %s | %d | %s | %s | %d | %.4f | %.4f | %.0f B | %.1f ms (%s) | %.2f ms |" % (
            fmt(series), clients, fmt(rate), fmt(m["accepted_per_s"]), max(r["lost"] for r in rs),
            m["daemon_cpu_per_m"], m["client_cpu_per_m"], m["rss_per_series"],
            m["scrape_s"] * 1e3, fmt(m["scrape_bytes"], "B"), m["scrape_s"] * 1e6 / series))
    sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--axis", choices=["series", "clients", "both"], default="both")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--duration", type=int, default=10, help="seconds per run")
    p.add_argument("--series-rate", type=float, default=2e6,
                   help="samples/s offered on the series axis")
    p.add_argument("--clients-rate", type=float, default=10e6,
                   help="samples/s offered on the clients axis")
    p.add_argument("--clients-series", type=int, default=6400,
                   help="series on the clients axis (divisible by every client count)")
    p.add_argument("--max-series", type=int, default=1_000_000)
    args = p.parse_args()
    for path in (TORCHMOND, LOADGEN):
        if not os.access(path, os.X_OK):
            sys.exit("%s missing: build first (cmake --build build)" % path)
    print("machine: %s; load %s" % (machine_line(), open("/proc/loadavg").read().split()[:3]))
    print("runs: %d s each, window %d s, grace %d s, aggs mean,max,min, --history 1; "
          "medians of %d" % (args.duration, WINDOW_S, GRACE_S, args.repeats))
    if args.axis in ("series", "both"):
        rows = []
        for series in (1_000, 10_000, 100_000, 1_000_000):
            if series > args.max_series:
                continue
            rs = [run_one(series, 4, args.series_rate, args.duration)
                  for _ in range(args.repeats)]
            rows.append(((series, 4, args.series_rate), rs))
            print("  done: %d series" % series, file=sys.stderr, flush=True)
        table("Series axis (4 clients as threads, %s samples/s offered)"
              % fmt(args.series_rate), rows)
    if args.axis in ("clients", "both"):
        rows = []
        for clients in (1, 4, 16, 64):
            rs = [run_one(args.clients_series, clients, args.clients_rate, args.duration)
                  for _ in range(args.repeats)]
            rows.append(((args.clients_series, clients, args.clients_rate), rs))
            print("  done: %d clients" % clients, file=sys.stderr, flush=True)
        table("Clients axis (%d series, %s samples/s offered)"
              % (args.clients_series, fmt(args.clients_rate)), rows)


if __name__ == "__main__":
    main()

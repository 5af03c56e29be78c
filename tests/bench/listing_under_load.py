#!/usr/bin/env python3
"""A full listing of a million series, and what it does to ingestion.

A fresh torchmond (temporary Unix socket) is filled by torchmon-loadgen with
--ranks x --stats series (default 4 x 250,000 = 1,000,000) while it keeps
ingesting --rate samples/s into them. Then, side by side in one run:

  phase "idle":    torchmon-ingest-probe measures ingest latency (one
                   sample, Flush, which returns once the daemon applied and
                   acknowledged it) with only the load generator beside it;
  phase "listing": the same probe while `torchmonctl series --json | wc -l`
                   lists every series, page after page.

Throughout, the daemon's RSS is read from /proc every 50 ms. Printed: the
lines the listing wrote (every series, plus the document's 2 lines), its
wall time and bytes, the probe's latency percentiles in both phases, and the
daemon's RSS (max in each phase: a listing that held its answer would jump
by its size, ~0.5 GB).

    /usr/bin/python3 tests/bench/listing_under_load.py [--ranks 4] [--stats 250000]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench_children import LaunchedDaemon, machine_line, rss_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
TORCHMOND = os.path.join(BUILD, "server", "torchmond")
TORCHMONCTL = os.path.join(BUILD, "client", "cli", "torchmonctl")
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")
PROBE = os.path.join(BUILD, "tests", "bench", "torchmon-ingest-probe")


class RssSampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.phase, self.max = pid, None, {}
        self.stop = threading.Event()

    def run(self):
        while not self.stop.wait(0.05):
            if self.phase is not None:
                r = rss_bytes(self.pid)
                self.max[self.phase] = max(self.max.get(self.phase, 0), r)


def probe(target, seconds):
    out = subprocess.run([PROBE, "--target", target, "--duration-ms", str(int(seconds * 1000))],
                         capture_output=True, text=True, timeout=seconds + 60)
    if out.returncode != 0:
        raise RuntimeError("probe failed: " + out.stderr)
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--stats", type=int, default=250000)
    ap.add_argument("--rate", type=int, default=200000)
    ap.add_argument("--probe-seconds", type=float, default=15)
    args = ap.parse_args()
    series = args.ranks * args.stats
    with tempfile.TemporaryDirectory(prefix="torchmon-listing.") as tmp:
        os.chmod(tmp, 0o700)
        sock = os.path.join(tmp, "torchmond.sock")
        target = "unix://" + sock
        daemon = LaunchedDaemon(
            [TORCHMOND, "--listen", target, "--metrics-listen", "127.0.0.1:0",
             "--grace", "1s", "--history", "1", "--max-series", str(series + 1000),
             "--max-series-per-client", str(args.stats + 1000)])
        loadgen = None
        try:
            sampler = RssSampler(daemon.pid)
            sampler.start()
            # Long enough to outlast both phases and the filling.
            loadgen = subprocess.Popen(
                [LOADGEN, "--target", target, "--ranks", str(args.ranks), "--stats",
                 str(args.stats), "--rate", str(args.rate), "--duration", "600s", "--window", "2s",
                 "--query-timeout", "120s", "--flush-timeout", "120s"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            # Filled: every series has been defined and has closed a window.
            started = time.time()
            while True:
                time.sleep(5)
                c = subprocess.run([TORCHMONCTL, "--target", target, "--timeout", "60s",
                                    "series", "--stat", "loadgen*", "--label", "rank=%d" %
                                    (args.ranks - 1), "--json"], capture_output=True, text=True)
                n = c.stdout.count('"stat":"loadgen') if c.returncode == 0 else 0
                # Every element carries its last window's stat too: 2 per series.
                if n >= 2 * args.stats:
                    break
                if time.time() - started > 600:
                    raise RuntimeError("the daemon never reached %d series" % series)
            fill_s = time.time() - started

            sampler.phase = "idle"
            idle = probe(target, args.probe_seconds)
            sampler.phase = "listing"
            # The probe runs exactly as long as the listing does.
            prober = subprocess.Popen([PROBE, "--target", target, "--duration-ms", "3600000"],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)
            t0 = time.time()
            p = subprocess.run("%s --target %s --timeout 60s series --json | tee >(wc -c >%s/bytes) | wc -l"
                               % (TORCHMONCTL, target, tmp), shell=True, executable="/bin/bash",
                               capture_output=True, text=True)
            result = {"seconds": time.time() - t0, "lines": int(p.stdout.strip() or 0),
                      "rc": p.returncode}
            prober.send_signal(signal.SIGTERM)
            out, err = prober.communicate(timeout=60)
            if prober.returncode != 0:
                raise RuntimeError("probe failed: " + err)
            during = json.loads(out)
            sampler.phase = "after"
            time.sleep(1)
            sampler.stop.set()
            time.sleep(0.5)  # the tee's wc
            with open(os.path.join(tmp, "bytes")) as f:
                result["bytes"] = int(f.read().strip())
        finally:
            if loadgen is not None:
                loadgen.send_signal(signal.SIGTERM)
                try:
                    loadgen.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    loadgen.kill()
            daemon.stop(timeout=120)
    print("machine: %s" % machine_line())
    print("series: %d (%d ranks x %d), filled in %.0f s, loadgen at %d samples/s throughout"
          % (series, args.ranks, args.stats, fill_s, args.rate))
    print("listing: `torchmonctl series --json | wc -l` = %d lines (rc %d) in %.1f s, %.0f MB"
          % (result["lines"], result["rc"], result["seconds"], result["bytes"] / 1e6))
    print("ingest latency (add + Flush), us:   p50    p90    p99    max  flushes")
    for name, p in (("idle (loadgen only)", idle), ("during the listing", during)):
        print("  %-22s %7d %6d %6d %6d %8d" % (name, p["p50_us"], p["p90_us"], p["p99_us"],
                                                p["max_us"], p["flushes"]))
    print("daemon RSS max, MB: idle %.0f, during listing %.0f, after %.0f"
          % tuple(sampler.max.get(k, 0) / 1e6 for k in ("idle", "listing", "after")))
    return 0 if result["lines"] >= series + 2 else 1


if __name__ == "__main__":
    sys.exit(main())

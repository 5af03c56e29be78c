#!/usr/bin/env python3
"""What a push queue costs on disk with --state-dir: bytes per queued series
window and per window end, for remote-write and OTLP, while the endpoint is
away.

    /usr/bin/python3 tests/bench/push_queue_disk.py [--series 10000] [--seconds 10]

torchmon-loadgen, 4 ranks, drives a daemon whose two endpoints (one of each
protocol) point at a loopback port nothing listens on, with windows of 1 s
and four aggregations per series; once the last window closed, each
endpoint's folder under STATE-DIR/push is measured (the files' sizes, not
the blocks they take) against the series windows its queue holds
(torchmon_export_queue_length on /metrics, times the series).
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

from bench_children import machine_line

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from torchmond import LaunchedDaemon  # noqa: E402

BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
TORCHMOND = os.path.join(BUILD, "server", "torchmond")
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")
RANKS = 4


def dead_port():
    """A loopback port nothing listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def queue_lengths(metrics):
    body = urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10).read().decode()
    out = {}
    for line in body.splitlines():
        if line.startswith("torchmon_export_queue_length{"):
            exporter = line.split('exporter="')[1].split('"')[0]
            out[exporter] = int(float(line.rsplit(" ", 1)[1]))
    return out


def folder_bytes(path):
    total = files = 0
    for name in os.listdir(path):
        if name[0] in "0123456789abcdef" and "-" in name:
            total += os.path.getsize(os.path.join(path, name))
            files += 1
    return total, files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--series", type=int, default=10000)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    print(machine_line())
    with tempfile.TemporaryDirectory(prefix="torchmon-push-queue.") as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        state = os.path.join(tmp, "state")
        port = dead_port()
        log = open(os.path.join(tmp, "daemon.log"), "w+")
        daemon = LaunchedDaemon(
            [TORCHMOND, "--listen", "unix://" + sock, "--metrics-listen", "127.0.0.1:0",
             "--state-dir", state, "--grace", "500ms", "--max-series", "2000000",
             "--max-series-per-client", "1000000",
             "--remote-write-url", f"http://127.0.0.1:{port}/api/v1/write",
             "--otlp-endpoint", f"http://127.0.0.1:{port}/v1/metrics"],
            stderr=log, timeout=30.0)
        try:
            subprocess.run([LOADGEN, "--target", "unix://" + sock, "--ranks", str(RANKS),
                            "--stats", str(args.series // RANKS), "--rate", str(args.series * 2),
                            "--duration", "%ds" % args.seconds, "--window", "1s",
                            "--aggs", "mean,max,min,count", "--query-timeout", "120s",
                            "--flush-timeout", "120s"],
                           check=True, stdout=subprocess.DEVNULL, timeout=600)
            time.sleep(2.0)  # the last window's end + grace
            lengths = queue_lengths(daemon.ready.metrics)
            push = os.path.join(state, "push")
            for folder in sorted(os.listdir(push)):
                path = os.path.join(push, folder)
                if not os.path.isdir(path):
                    continue
                exporter = folder.rsplit("-", 1)[0]
                ends = lengths.get(exporter, 0)
                size, files = folder_bytes(path)
                windows = ends * args.series
                print(f"{exporter}: {ends} window ends of {args.series} series queued on disk in "
                      f"{files} files, {size / 1e6:.1f} MB: {size / max(windows, 1):.1f} B per "
                      f"series window, {size / max(ends, 1) / 1e6:.2f} MB per window end")
        finally:
            daemon.stop(timeout=60)
            log.close()


if __name__ == "__main__":
    sys.exit(main())

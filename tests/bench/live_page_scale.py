#!/usr/bin/env python3
"""The live page at scale: a daemon holding --ranks x --stats series (default
4 x 25,000 = 100,000, fed by torchmon-loadgen while it runs), its page loaded
in Debian's headless Chromium through playwright-core (installed with npm
into the build tree on first use). Prints the time to the first full render,
the tab's JS heap and DOM nodes after a few refreshes, and the bytes of the
first refresh's /api/* answers.

    /usr/bin/python3 tests/bench/live_page_scale.py [--ranks 4] [--stats 25000]
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
TORCHMOND = os.path.join(BUILD, "server", "torchmond")
TORCHMONCTL = os.path.join(BUILD, "client", "cli", "torchmonctl")
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")
NODE_DIR = os.path.join(BUILD, "tests", "bench", "live_page_node")


def ensure_playwright():
    if not os.path.isdir(os.path.join(NODE_DIR, "node_modules", "playwright-core")):
        os.makedirs(NODE_DIR, exist_ok=True)
        subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix", NODE_DIR,
                        "playwright-core@1"], check=True, stdout=subprocess.DEVNULL)
    # Node resolves packages next to the script: run a copy from NODE_DIR.
    script = os.path.join(NODE_DIR, "live_page_scale.mjs")
    with open(os.path.join(HERE, "live_page_scale.mjs")) as src, open(script, "w") as dst:
        dst.write(src.read())
    return script


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--stats", type=int, default=25000)
    ap.add_argument("--rate", type=int, default=200000)
    args = ap.parse_args()
    script = ensure_playwright()
    series = args.ranks * args.stats
    with tempfile.TemporaryDirectory(prefix="torchmon-livepage.") as tmp:
        os.chmod(tmp, 0o700)
        target = "unix://" + os.path.join(tmp, "torchmond.sock")
        daemon = subprocess.Popen(
            [TORCHMOND, "--listen", target, "--metrics-listen", "127.0.0.1:0", "--grace", "1s",
             "--max-series", str(series + 1000), "--max-series-per-client", str(args.stats + 1000)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        loadgen = None
        try:
            ready = daemon.stdout.readline()
            metrics = dict(f.split("=", 1) for f in ready.split()[2:])["metrics"]
            loadgen = subprocess.Popen(
                [LOADGEN, "--target", target, "--ranks", str(args.ranks), "--stats",
                 str(args.stats), "--rate", str(args.rate), "--duration", "600s", "--window", "2s",
                 "--aggs", "mean,max,min"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            started = time.time()
            while True:
                time.sleep(3)
                c = subprocess.run([TORCHMONCTL, "--target", target, "series", "--stat",
                                    "loadgen*", "--label", "rank=%d" % (args.ranks - 1), "--json"],
                                   capture_output=True, text=True)
                if c.stdout.count('"stat":"loadgen') >= 2 * args.stats:
                    break
                if time.time() - started > 300:
                    raise RuntimeError("the daemon never reached %d series" % series)
            out = subprocess.run(["node", script, "http://%s/" % metrics], capture_output=True,
                                 text=True, timeout=180)
            if out.returncode != 0:
                raise RuntimeError("node: " + out.stderr[-3000:])
            result = json.loads(out.stdout.strip().splitlines()[-1])
        finally:
            if loadgen is not None:
                loadgen.send_signal(signal.SIGTERM)
                loadgen.wait(timeout=60)
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=120)
    print("series: %d, loadgen at %d samples/s throughout" % (series, args.rate))
    print("first full render: %d ms; after 3 refreshes: JS heap %.1f MB, %d DOM nodes"
          % (result["first_render_ms"], result["js_heap_used_mb"], result["dom_nodes"]))
    print("shown: %d table rows, %d charts; status %r" % (result["rows"], result["charts"],
                                                         result["status"]))
    print("first refresh's answers: " + ", ".join(
        "%s %.1f KB" % (k, v / 1e3) for k, v in sorted(result["first_refresh_api_bytes"].items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Daemon RSS per series with 31-day windows against 2 s windows (issue 19).

100 000 series (4 ranks x 25 000 stats, torchmon-loadgen, 1 M samples/s for
6 s), the daemon's default --history 120; RSS growth per series measured 4 s
after the load, two rounds alternating. Run from the repository root after
building into build/:

    /usr/bin/python3 tests/bench/long_window_memory.py
"""
import json, os, subprocess, sys, tempfile, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_children import LaunchedDaemon, rss_bytes as rss  # noqa: E402
B = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build")
TORCHMOND = B + "/server/torchmond"
LOADGEN = B + "/tests/bench/torchmon-loadgen"
def run(window, history):
    with tempfile.TemporaryDirectory(prefix="tm-long.") as tmp:
        os.chmod(tmp, 0o700)
        sock = os.path.join(tmp, "d.sock")
        d = LaunchedDaemon([TORCHMOND, "--listen", "unix://" + sock, "--metrics-listen", "127.0.0.1:0",
                            "--grace", "1s", "--history", str(history)])
        try:
            time.sleep(0.2)
            before = rss(d.pid)
            out = subprocess.run([LOADGEN, "--target", "unix://" + sock, "--daemon-pid", str(d.pid),
                                  "--ranks", "4", "--stats", "25000", "--rate", "1000000",
                                  "--duration", "6s", "--window", window, "--aggs", "mean,max,min",
                                  "--query-timeout", "120s", "--flush-timeout", "120s", "--json"],
                                 capture_output=True, text=True, timeout=600)
            j = json.loads(out.stdout.strip().splitlines()[-1])
            time.sleep(4)
            after = rss(d.pid)
            return (after - before) / 100000, j["exact"], j["accepted"] if "accepted" in j else None
        finally:
            d.stop()
for rep in range(2):
    for window in ("2s", "744h"):
        print(window, "history 120: %.0f B/series, exact=%s" % run(window, 120)[:2], flush=True)

#!/usr/bin/env python3
"""The live page at scale: a daemon holding --ranks x --stats series (default
4 x 25,000 = 100,000, fed by torchmon-loadgen at --rate samples/s while it
runs, some of them capped), its page loaded in Debian's headless Chromium
(tests/live_page/browser.py: playwright-core, installed with npm into the
build tree on first use) at 1400x1000. Prints, medians where repeated:

- the time to the first full render (charts, stragglers, accounting drawn);
- each /api/* answer of the first refresh: its bytes and the daemon's time
  to answer it; the bytes of each later refresh (the charts ask only for
  the windows that closed since);
- the tab after --refreshes refreshes: JS heap, DOM nodes, the longest
  main-thread task (PerformanceObserver "longtask"), and per refresh the
  time from the first request to the last answer and the time drawing
  took (the page's own performance marks);
- hover: the mousemove handler's time to draw the tooltip;
- the filter: from Enter to the table narrowed to the stats asked.

    /usr/bin/python3 tests/bench/live_page_scale.py [--ranks 4] [--stats 25000]
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

from bench_children import LaunchedDaemon, machine_line
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "live_page"))
from browser import Browser  # noqa: E402

BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
TORCHMOND = os.path.join(BUILD, "server", "torchmond")
TORCHMONCTL = os.path.join(BUILD, "client", "cli", "torchmonctl")
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")

RENDERED = ("document.querySelectorAll('#charts .chart').length > 0 && "
            "document.querySelectorAll('#series tr').length > 0 && "
            "document.querySelectorAll('#totals [data-total]').length === 4 && "
            "/series · updated/.test(document.getElementById('status').textContent)")


def timed_get(url, repeat=5):
    times, size = [], 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as r:
            size = len(r.read())
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times), size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--stats", type=int, default=25000)
    ap.add_argument("--rate", type=int, default=200000)
    ap.add_argument("--refreshes", type=int, default=5)
    ap.add_argument("--settle", type=float, default=130,
                    help="seconds the loadgen runs before the page opens, so that each series "
                         "has the 60 windows a chart shows (2 s windows)")
    args = ap.parse_args()
    series = args.ranks * args.stats
    with tempfile.TemporaryDirectory(prefix="torchmon-livepage.") as tmp, Browser() as browser:
        os.chmod(tmp, 0o700)
        target = "unix://" + os.path.join(tmp, "torchmond.sock")
        daemon = LaunchedDaemon(
            [TORCHMOND, "--listen", target, "--metrics-listen", "127.0.0.1:0", "--grace", "1s",
             "--max-series", str(series + 1000), "--max-series-per-client", str(args.stats + 1000)])
        loadgen = None
        try:
            metrics = daemon.ready.metrics
            # --max-samples 1: a series given two samples in a window caps one,
            # so the accounting panel has thousands of dropping series to rank.
            loadgen = subprocess.Popen(
                [LOADGEN, "--target", target, "--ranks", str(args.ranks), "--stats",
                 str(args.stats), "--rate", str(args.rate), "--duration", "600s", "--window", "2s",
                 "--aggs", "mean,max,min", "--max-samples", "1"],
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
            time.sleep(max(0.0, args.settle - (time.time() - started)))
            base = "http://%s" % metrics
            t0 = time.perf_counter()
            browser.open(base + "/")
            browser.wait(RENDERED, timeout=60)
            first_render_ms = (time.perf_counter() - t0) * 1000
            # The requests of one refresh, as the page made them.
            requests = browser.eval("""performance.getEntriesByType('resource')
                .filter(e => new URL(e.name).pathname.startsWith('/api/')).map(e => e.name)""")
            first_requests = len(browser.eval("performance.getEntriesByType('resource')"))
            browser.eval("""(() => { window.__long = [];
                new PerformanceObserver(l => { for (const e of l.getEntries()) window.__long.push(e.duration); })
                  .observe({type: 'longtask', buffered: true});
                window.__scriptMs = 0; })()""")
            for _ in range(args.refreshes):
                before = browser.eval("document.getElementById('status').textContent")
                browser.wait("document.getElementById('status').textContent !== %s" % json.dumps(before),
                             timeout=30)
            # What the refreshes after the first asked for, as the page made them.
            later = browser.eval("""performance.getEntriesByType('resource').slice(%d)
                .filter(e => new URL(e.name).pathname.startsWith('/api/'))
                .map(e => [new URL(e.name).pathname, e.encodedBodySize])""" % first_requests)
            tab = browser.eval("""({heap: performance.memory.usedJSHeapSize,
                draw: performance.getEntriesByName('torchmon-draw', 'measure').map(m => m.duration),
                wait: performance.getEntriesByName('torchmon-requests', 'measure').map(m => m.duration),
                nodes: document.getElementsByTagName('*').length,
                longest: Math.max(0, ...window.__long), long: window.__long.length,
                rows: document.querySelectorAll('#series tr').length,
                charts: document.querySelectorAll('#charts .chart').length,
                drops: document.querySelectorAll('#drop-rows tr[data-stat]').length,
                stragglers: document.querySelectorAll('#straggler-rows tr[data-stat]').length,
                status: document.getElementById('status').textContent,
                note: document.getElementById('accounting-note').textContent})""")
            # Hover: the handler's time to find the window and draw the tooltip.
            hover = browser.eval("""(() => {
                const times = [];
                for (const svg of document.querySelectorAll('#charts svg')) {
                  const r = svg.getBoundingClientRect();
                  for (let i = 1; i < 20; i++) {
                    const t0 = performance.now();
                    svg.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + r.width * i / 20,
                                                                   clientY: r.top + r.height / 2, bubbles: true}));
                    times.push(performance.now() - t0);
                  }
                }
                times.sort((a, b) => a - b);
                return {median: times[times.length >> 1], max: times[times.length - 1], n: times.length,
                        shown: [...document.querySelectorAll('.tooltip')].some(t => t.style.display === 'block')};
            })()""")
            filters = []
            for pattern in ("loadgen.s0001*", "loadgen.s02*", ""):
                t0 = time.perf_counter()
                browser.type("#filter", pattern)
                prefix = pattern.rstrip("*")
                browser.wait("[...document.querySelectorAll('#series tr')].length > 0 && "
                             "[...document.querySelectorAll('#series tr')].every(r => r.dataset.stat.startsWith(%s))"
                             " && document.getElementById('status').textContent.indexOf('updated') >= 0"
                             % json.dumps(prefix), timeout=30)
                filters.append(((time.perf_counter() - t0) * 1000, pattern))
            endpoints = [(u.replace(base, ""),) + timed_get(u) for u in sorted(set(requests))]
            errors = browser.errors()
        finally:
            if loadgen is not None:
                loadgen.send_signal(signal.SIGTERM)
                loadgen.wait(timeout=60)
            daemon.stop(timeout=120)
    print("machine: %s" % machine_line())
    print("series: %d, loadgen at %d samples/s throughout" % (series, args.rate))
    print("first full render: %.0f ms" % first_render_ms)
    print("after %d refreshes: JS heap %.1f MB, %d DOM elements, %d long tasks, the longest %.0f ms"
          % (args.refreshes, tab["heap"] / 1e6, tab["nodes"], tab["long"], tab["longest"]))
    print("per refresh (median of %d): requests answered in %.1f ms, then drawn in %.1f ms (max %.1f)"
          % (len(tab["draw"]), statistics.median(tab["wait"]), statistics.median(tab["draw"]),
             max(tab["draw"])))
    print("shown: %d table rows, %d charts, %d straggler rows, %d dropping series (%s); status %r"
          % (tab["rows"], tab["charts"], tab["stragglers"], tab["drops"], tab["note"], tab["status"]))
    print("hover: tooltip drawn in %.2f ms median, %.2f ms max (%d moves)%s"
          % (hover["median"], hover["max"], hover["n"], "" if hover["shown"] else " NOT SHOWN"))
    for ms, pattern in filters:
        print("filter %-16r Enter to the table narrowed: %.0f ms" % (pattern, ms))
    print("the first refresh's requests, again (median of 5 each, while the loadgen runs):")
    once = [e for e in endpoints if e[0].startswith("/api/accounting?limit=1000")]
    for path, ms, size in endpoints:
        print("  %-90s %7.1f ms %8.1f KB%s" % (path[:90], ms, size / 1e3,
                                              " (once: the baseline)" if (path, ms, size) in once else ""))
    print("the first refresh: %.1f KB, the baseline aside" % (sum(e[2] for e in endpoints if e not in once) / 1e3))
    by_path = {}
    for path, size in later:
        by_path[path] = by_path.get(path, 0) + size
    print("each later refresh (%d refreshes, averaged): %.1f KB: %s" % (
        args.refreshes, sum(by_path.values()) / args.refreshes / 1e3,
        ", ".join("%s %.1f KB" % (p, b / args.refreshes / 1e3) for p, b in sorted(by_path.items()))))
    if errors:
        print("page errors: %s" % errors)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

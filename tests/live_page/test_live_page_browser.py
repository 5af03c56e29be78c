"""The live page as a person uses it, in Debian's Chromium driven by
playwright-core (browser.py), against a real daemon fed live by four ranks
of a training job through the Python client: rank 2 stalls (its steps take
three times as long), rank 3 stops reporting, rank 1's loss goes NaN once,
and data.batch_bytes drops samples (capped by max_samples; late and skewed
ones pushed with `torchmonctl push --at`). Everything the page shows is
checked against what the daemon's API says; the screenshots it takes are
the ones docs/live-page.md shows (TORCHMON_SCREENSHOT_DIR keeps them)."""

import datetime
import json
import math
import os
import threading
import time
import urllib.request
import zoneinfo

import pytest

from browser import Browser
from torchmon_testing import Daemon, wait_for

WINDOW = datetime.timedelta(milliseconds=500)
STEP_MS = {0: 100.0, 1: 104.0, 2: 310.0, 3: 98.0}  # rank 2 is the straggler
TZ = "Asia/Kolkata"  # UTC+05:30: local ticks differ from UTC ones in hours and minutes
NAN_AT_STEP = 60  # rank 1's loss goes NaN at this step, for one window
INF_AT_STEP = 80  # rank 0's gradient norm overflows at this step
RANK_3_STOPS_AT_STEP = 100


def api(daemon, path):
    with urllib.request.urlopen(f"http://{daemon.metrics}{path}", timeout=10) as r:
        return json.loads(r.read())


class Job:
    """Four ranks stepping every 50 ms (scaled), as a training loop would."""

    def __init__(self, daemon):
        import torchmon
        self.daemon = daemon
        self.running = threading.Event()
        self.running.set()
        self.stepping = threading.Lock()  # held through each step
        self.stop = threading.Event()
        self.steps = 0
        self.clients, self.stats = {}, {}
        for rank in range(4):
            # host= from the environment, as torchmonctl's: one series for both.
            client = torchmon.Client(target=daemon.target, labels={
                "rank": str(rank), "local_rank": str(rank), "job": "llm"})
            self.clients[rank] = client
            self.stats[rank] = {
                "step": torchmon.Stat("train.step_ms",
                                      [torchmon.MEAN, torchmon.MAX, torchmon.MIN, "p50", "p99"],
                                      WINDOW, client=client),
                "loss": torchmon.Stat("train.loss", [torchmon.MEAN, torchmon.MIN, torchmon.MAX],
                                      WINDOW, client=client),
                "grad": torchmon.Stat("train.grad_norm", [torchmon.MEAN], WINDOW, client=client),
            }
        # Rank 0's loader sends more than max_samples a window: capped.
        self.batch = torchmon.Stat("data.batch_bytes", [torchmon.SUM, torchmon.COUNT], WINDOW,
                                   max_samples=2, client=self.clients[0])
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        deadline = time.monotonic() + 600  # bounded, whatever the test does
        while not self.stop.is_set() and time.monotonic() < deadline:
            if not self.running.wait(0.05):
                continue
            with self.stepping:
                if self.running.is_set():
                    self._step(self.steps)
                    self.steps += 1
            time.sleep(0.05)

    def _step(self, step):
        for rank, stats in self.stats.items():
            if rank == 3 and step >= RANK_3_STOPS_AT_STEP:
                continue  # rank 3 stopped reporting
            stats["step"].add(STEP_MS[rank] * (1 + 0.04 * math.sin(step / 6 + rank)))
            loss = 2.0 * math.exp(-step / 150) + 0.3 + rank / 50 + 0.05 * math.sin(step / 3)
            if rank == 1 and step == NAN_AT_STEP:
                loss = float("nan")
            stats["loss"].add(loss)
            grad = 1.0 + 0.05 * math.sin(step / 25 + rank)
            stats["grad"].add(math.inf if rank == 0 and step == INF_AT_STEP else grad)
        self.batch.add((3.0 + math.sin(step / 8)) * 2**20)

    def pause(self):
        """Stops stepping and waits until every sample sent reached the daemon."""
        self.running.clear()
        with self.stepping:  # no step under way
            pass
        for client in self.clients.values():
            assert client.flush(10)

    def resume(self):
        self.running.set()

    def close(self):
        self.stop.set()
        self.thread.join(10)
        for client in self.clients.values():
            client.close(5)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    daemon = Daemon(str(tmp_path_factory.mktemp("browser")), "--grace", "1s")
    j = Job(daemon)
    # Enough windows for lines, the NaN, and rank 3's last window behind.
    def enough():
        return (len(daemon.windows("train.step_ms", "rank=0")) >= 20
                and j.steps >= RANK_3_STOPS_AT_STEP + 20)

    assert wait_for(enough, 60, 0.1), "windows did not close"
    daemon.ctl("event", "epoch_end", "epoch=1")
    yield j
    j.close()
    daemon.stop()


@pytest.fixture(scope="module")
def page(job):
    with Browser() as b:
        status = b.open(f"http://{job.daemon.metrics}/", timezone=TZ)
        assert status == 200
        b.wait("document.querySelectorAll('#charts .chart').length === 4 && "
               "document.querySelectorAll('#straggler-rows tr[data-stat]').length >= 1")
        yield b
        assert b.errors() == []  # no uncaught error or console error all along


def wait_refresh(b):
    """Waits for the page's next refresh to finish."""
    before = b.eval("document.getElementById('status').textContent")
    b.wait(f"document.getElementById('status').textContent !== {json.dumps(before)}", timeout=10)


def shot(b, name, tmp_path):
    where = os.environ.get("TORCHMON_SCREENSHOT_DIR") or str(tmp_path)
    path = os.path.join(where, name)
    b.screenshot(path)
    assert os.path.getsize(path) > 20_000, "a blank page?"
    return path


def test_the_time_axis_ticks_are_local_time_and_the_y_axis_has_units(page):
    ticks = page.eval("""[...document.querySelectorAll('[data-chart="train.step_ms"] .xtick')]
                         .map(t => [Number(t.dataset.t), t.textContent])""")
    assert len(ticks) >= 2
    zone = zoneinfo.ZoneInfo(TZ)
    for t, text in ticks:
        local = datetime.datetime.fromtimestamp(t / 1000, zone)
        assert text == local.strftime("%H:%M:%S"), (t, text)
        assert t % 1000 == 0  # round seconds
    steps = {b[0] - a[0] for a, b in zip(ticks, ticks[1:])}
    assert len(steps) == 1 and steps.pop() in (1000, 2000, 5000, 10000)
    y = page.eval("""[...document.querySelectorAll('[data-chart="train.step_ms"] .ytick')]
                     .map(t => [Number(t.dataset.v), t.textContent])""")
    assert len(y) >= 3
    assert all(text.endswith(" ms") for _, text in y), y
    values = [v for v, _ in y]
    gaps = {round(b - a, 9) for a, b in zip(values, values[1:])}
    assert len(gaps) == 1, values  # evenly spaced
    gap = gaps.pop()
    assert gap / 10 ** math.floor(math.log10(gap)) in (1, 2, 2.5, 5), gap  # a round step
    # The range covers every rank's step time: 98 ms - 4 % to 310 ms + 4 %.
    assert values[0] <= 94 and values[-1] >= 322
    # A stat without a unit has none; data.batch_bytes is in binary bytes.
    loss = page.eval("""[...document.querySelectorAll('[data-chart="train.loss"] .ytick')].map(t => t.textContent)""")
    assert loss and all(not t.endswith("s") and "B" not in t for t in loss), loss
    batch = page.eval("""[...document.querySelectorAll('[data-chart="data.batch_bytes"] .ytick')].map(t => t.textContent)""")
    assert any(t.endswith(" MiB") for t in batch), batch


def test_hovering_a_point_shows_every_aggregate_of_that_window(job, page):
    # The point of rank 2's line at its newest window.
    where = page.eval("""(() => {
        const chart = document.querySelector('[data-chart="train.step_ms"]');
        const line = chart.querySelector('g[data-series="rank=2"] polyline:not([data-quantile])');
        const pts = line.getAttribute('points').trim().split(' ');
        const [x, y] = pts[pts.length - 1].split(',').map(Number);
        const svg = chart.querySelector('svg'), r = svg.getBoundingClientRect();
        const vb = svg.viewBox.baseVal;
        return [r.left + x * r.width / vb.width, r.top + y * r.height / vb.height];
    })()""")
    page.mouse(where[0], where[1])
    tip = page.eval("""(() => {
        const t = document.querySelector('[data-chart="train.step_ms"] .tooltip');
        return {shown: getComputedStyle(t).display !== 'none', head: t.querySelector('.tt-head').textContent,
                start: Number(t.querySelector('.tt-window').dataset.start),
                window: t.querySelector('.tt-window').textContent,
                rows: Object.fromEntries([...t.querySelectorAll('tr')].map(r => [r.dataset.agg, [r.dataset.value, r.cells[1].textContent]]))};
    })()""")
    assert tip["shown"]
    assert tip["head"].startswith("rank=2")
    windows = api(job.daemon, "/api/windows?stat=train.step_ms&label=rank=2&last=60")["windows"]
    (w,) = [w for w in windows if w["start_ms"] == tip["start"]]
    assert list(tip["rows"]) == ["mean", "max", "min", "p50", "p99", "accepted", "capped"]
    for agg, value in w["aggregates"].items():
        shown, text = tip["rows"][agg]
        assert float(shown) == value, agg
        assert text.endswith(" ms"), text
    assert int(tip["rows"]["accepted"][0]) == w["accepted"]
    assert 290 <= w["aggregates"]["mean"] <= 330
    # The window in local time.
    start = datetime.datetime.fromtimestamp(w["start_ms"] / 1000, zoneinfo.ZoneInfo(TZ))
    assert tip["window"].startswith("window " + start.strftime("%H:%M:%S.") + "%03d" % (start.microsecond // 1000))
    # A refresh redraws the chart; the tooltip under the resting pointer stays.
    wait_refresh(page)
    assert page.eval("""(() => { const t = document.querySelector('[data-chart="train.step_ms"] .tooltip');
        return [t.style.display, t.querySelector('.tt-head').textContent.slice(0, 6)]; })()""") == ["block", "rank=2"]


def test_legends_show_only_the_differing_label_and_each_rank_keeps_its_colour(job, page):
    legends = page.eval("""Object.fromEntries([...document.querySelectorAll('.chart')].map(c =>
        [c.dataset.chart, [...c.querySelectorAll('[data-legend]')].map(s => [s.dataset.legend, s.querySelector('i').style.background])]))""")
    assert [name for name, _ in legends["train.step_ms"]] == ["rank=0", "rank=1", "rank=2", "rank=3"]
    assert [name for name, _ in legends["train.loss"]] == ["rank=0", "rank=1", "rank=2", "rank=3"]
    assert [name for name, _ in legends["train.grad_norm"]] == ["rank=0", "rank=1", "rank=2", "rank=3"]
    assert [name for name, _ in legends["data.batch_bytes"]] == ["rank=0"]
    # local_rank repeats rank and is left out; what every line shares is written once.
    host = job.daemon.series("train.loss")[0]["labels"]["host"]
    common = page.eval("""[...document.querySelectorAll('.chart .common')].map(c => c.textContent)""")
    user = job.daemon.series("train.loss")[0]["labels"]["user"]
    assert set(common) == {f"host={host} · job=llm · user={user}",
                           f"host={host} · job=llm · local_rank=0 · rank=0 · user={user}"}
    colours = {}
    for chart in legends.values():
        for name, colour in chart:
            colours.setdefault(name, set()).add(colour)
    assert all(len(c) == 1 for c in colours.values()), colours  # the same on every chart
    assert len({c.pop() for c in colours.values()}) == 4  # and one per rank


def test_the_nan_loss_window_is_marked(job, page):
    marks = page.eval("""[...document.querySelectorAll('[data-chart="train.loss"] g.nonfinite')]
                         .map(g => [g.dataset.series, g.dataset.value, Number(g.dataset.start)])""")
    nan_windows = [w for w in api(job.daemon, "/api/windows?stat=train.loss&label=rank=1&last=60")["windows"]
                   if w["aggregates"]["mean"] == "NaN"]
    assert len(nan_windows) == 1
    assert marks == [["rank=1", "NaN", nan_windows[0]["start_ms"]]]
    chart = page.eval("""(() => { const c = document.querySelector('[data-chart="train.loss"]');
        return [c.classList.contains('alert'), c.querySelector('[data-nonfinite-badge]').textContent]; })()""")
    assert chart == [True, "NaN in rank=1"]
    # An infinity is marked the same way.
    inf = [w for w in api(job.daemon, "/api/windows?stat=train.grad_norm&label=rank=0&last=60")["windows"]
           if w["aggregates"]["mean"] == "+Inf"]
    assert len(inf) == 1
    assert page.eval("""[...document.querySelectorAll('[data-chart="train.grad_norm"] g.nonfinite')]
                        .map(g => [g.dataset.series, g.dataset.value, Number(g.dataset.start)])""") == \
        [["rank=0", "+Inf", inf[0]["start_ms"]]]
    # The other charts are not alarmed.
    assert sorted(page.eval("[...document.querySelectorAll('.chart.alert')].map(c => c.dataset.chart)")) == \
        ["train.grad_norm", "train.loss"]


def test_the_straggler_is_highlighted_in_its_chart_and_the_panel(job, page):
    answer = api(job.daemon, "/api/ranks?stat=train.step_ms&agg=mean")
    (c,) = answer["comparisons"]
    assert c["slowest_rank"] == "2" and c["max_over_median"] > 2.5
    assert "3" in c["missing"]  # rank 3 stopped: no newest window
    # The daemon's straggler score of ranks 0-2 (about STEP_MS each): the
    # slowest's distance from the median over the larger of 1.4826 x MAD
    # and 5 % of the median, computed here from the values it reports.
    values = sorted(r["value"] for r in c["ranks"])
    assert len(values) == 3, c
    median = values[1]
    mad = sorted(abs(v - median) for v in values)[1]
    score = (values[-1] - median) / max(1.4826 * mad, 0.05 * median)
    assert score > 3, (c, score)
    assert c["ranks"][0]["rank"] == "2" and c["stragglers"] == ["2"], c
    assert abs(c["ranks"][0]["score"] - score) < 1e-9, (c, score)
    row_js = """(() => { const r = document.querySelector('#straggler-rows tr[data-stat="train.step_ms"]');
        return {slowest: r.dataset.slowest, missing: r.querySelector('[data-missing]')?.dataset.missing,
                text: r.textContent, cls: r.className, end: Number(r.dataset.end),
                score: r.querySelector('[data-score]').dataset.score}; })()"""
    row = page.eval(row_js)
    assert row["slowest"] == "2" and row["cls"] == "straggler"
    # The panel shows the daemon's score of the window it last drew (its
    # end in data-end): the same as /api/ranks of that window, asked for by
    # its start. (Waiting for the daemon's newest to be the page's raced: the
    # page refreshes every 2 s, a whole number of the job's 0.5 s windows, so
    # the phase between the two never changes, and the newest can be the
    # page's for a few milliseconds of every 2 s.)
    row = page.eval(row_js)
    length = c["end_ms"] - c["start_ms"]
    assert length == 500, c
    (drawn,) = api(job.daemon, "/api/ranks?stat=train.step_ms&agg=mean&window_start=%d" % (row["end"] - length))["comparisons"]
    assert drawn["end_ms"] == row["end"], (row, drawn)
    assert row["score"] == f"{drawn['ranks'][0]['score']:.2f}", (row, drawn)
    assert row["missing"] == "3"
    assert "rank 2" in row["text"]
    chart = page.eval("""(() => { const c = document.querySelector('[data-chart="train.step_ms"]');
        return {badge: c.querySelector('[data-slowest-badge]').dataset.slowestBadge,
                text: c.querySelector('[data-slowest-badge]').textContent,
                highlighted: [...c.querySelectorAll('g.slowest')].map(g => g.dataset.series),
                width: c.querySelector('g.slowest polyline:not([data-quantile])').getAttribute('stroke-width'),
                legend: [...c.querySelectorAll('.legend .slowest')].map(s => s.dataset.legend)}; })()""")
    assert chart["badge"] == "2" and chart["text"].startswith("slowest: rank=2")
    assert chart["highlighted"] == ["rank=2"] and chart["legend"] == ["rank=2"]
    assert float(chart["width"]) > 3
    # The loss chart has no time unit: its top rank is "highest", not slowest.
    assert page.eval("""document.querySelector('[data-chart="train.loss"] [data-slowest-badge]')?.textContent.startsWith('highest') ?? true""")


def read_accounting(page):
    """The accounting panel: {counter: [total, since the page opened]} for the
    daemon and for data.batch_bytes' row."""
    return page.eval("""(() => {
        const pairs = (nodes, key) => Object.fromEntries([...nodes].map(n =>
            [n.dataset[key], [Number(n.dataset.all ?? n.dataset.total), Number(n.dataset.since)]]));
        const row = document.querySelector('#drop-rows tr[data-stat="data.batch_bytes"]');
        return {totals: pairs(document.querySelectorAll('#totals [data-total]'), 'total'),
                row: row ? pairs(row.querySelectorAll('[data-counter]'), 'counter') : null};
    })()""")


def test_the_accounting_panel_counts_drops_since_the_page_opened(job, page):
    job.pause()
    try:
        wait_refresh(page)
        wait_refresh(page)  # one that began after the pause
        before = read_accounting(page)
        # Capped while the page was open (rank 0's loader never stops going over).
        assert before["row"]["capped"][1] > 0
        now = int(time.time() * 1000)
        common = ["--agg", "sum,count", "--window", "500ms", "--max-samples", "2", "--label", "rank=0",
                  "--label", "local_rank=0", "--label", "job=llm"]
        job.daemon.ctl("push", "data.batch_bytes", "1", "2", "3", "--at", str(now - 60_000), *common)  # late
        job.daemon.ctl("push", "data.batch_bytes", "4", "5", "--at", str(now + 3_600_000), *common)  # skewed
        wait_refresh(page)
        wait_refresh(page)
        after = read_accounting(page)
        (series,) = job.daemon.series("data.batch_bytes")
        counters = dict(series["counters"], client=series["counters"]["client_dropped"])
        # The row: the series' own counters, and 3 more late and 2 more skewed
        # since the page opened than before the pushes; nothing else moved.
        for counter, pushed in (("late", 3), ("skewed", 2), ("capped", 0), ("client", 0)):
            assert after["row"][counter][0] == counters[counter], counter
            assert after["row"][counter][1] - before["row"][counter][1] == pushed, counter
            assert after["row"][counter][0] - before["row"][counter][0] == pushed, counter
        # The totals: every series' counters summed, the same 3 and 2 more.
        everything = job.daemon.ctl("series")["series"]
        for counter, pushed in (("late", 3), ("skewed", 2), ("capped", 0)):
            assert after["totals"][counter][0] == sum(s["counters"][counter] for s in everything), counter
            assert after["totals"][counter][1] - before["totals"][counter][1] == pushed, counter
        # Each chart's line holds what a full answer holds, though refreshes
        # ask only for the windows that closed since the previous one.
        asked = page.eval("""performance.getEntriesByType('resource').map(e => e.name)
                             .filter(n => n.includes('/api/windows?stat=train.step_ms'))""")
        assert any("&start=" in a for a in asked)
        drawn = page.eval("""Object.fromEntries([...document.querySelectorAll('[data-chart="train.step_ms"] g[data-series]')]
            .map(g => [g.dataset.series, [Number(g.dataset.windows), Number(g.dataset.newest)]]))""")
        full = api(job.daemon, "/api/windows?stat=train.step_ms&last=60")["windows"]
        expected = {}
        for w in full:
            expected.setdefault("rank=" + w["labels"]["rank"], []).append(w["start_ms"])
        assert drawn == {name: [len(starts), max(starts)] for name, starts in expected.items()}
        # The series table agrees: data.batch_bytes first, its drops in red.
        first = page.eval("""(() => { const r = document.querySelector('#series tr');
            return [r.dataset.stat, r.cells[4].textContent, r.cells[4].className]; })()""")
        dropped = sum(counters[c] for c in ("capped", "late", "skewed", "client"))
        assert first == ["data.batch_bytes", str(dropped), "num bad"]
    finally:
        job.resume()


def test_screenshots(job, page, tmp_path):
    """The views docs/live-page.md shows, at 1400x1000."""
    page.mouse(5, 995)  # off the charts: no tooltip
    wait_refresh(page)
    assert page.eval("[...document.querySelectorAll('.tooltip')].every(t => t.style.display !== 'block')")
    assert page.eval("[innerWidth, innerHeight]") == [1400, 1000]
    shot(page, "live-page.png", tmp_path)
    where = page.eval("""(() => {
        const svg = document.querySelector('[data-chart="train.step_ms"] svg'), r = svg.getBoundingClientRect();
        const line = svg.querySelector('g[data-series="rank=2"] polyline:not([data-quantile])');
        const pts = line.getAttribute('points').trim().split(' ');
        const [x, y] = pts[Math.max(0, pts.length - 4)].split(',').map(Number);
        return [r.left + x * r.width / svg.viewBox.baseVal.width, r.top + y * r.height / svg.viewBox.baseVal.height];
    })()""")
    page.mouse(where[0], where[1])
    page.wait("getComputedStyle(document.querySelector('[data-chart=\"train.step_ms\"] .tooltip')).display === 'block'")
    shot(page, "live-page-hover.png", tmp_path)


def test_the_filter_narrows_everything_and_is_kept_in_the_url(job, page, tmp_path):
    page.type("#filter", "train.*")
    page.type("#label-filter", "rank=2")
    page.wait("""location.search === '?stat=train.*&label=rank%3D2' &&
                 [...document.querySelectorAll('#charts .chart')].map(c => c.dataset.chart).join() === 'train.grad_norm,train.loss,train.step_ms' &&
                 [...document.querySelectorAll('#charts [data-legend]')].every(s => s.dataset.legend === 'rank=2')""")
    rows = page.eval("[...document.querySelectorAll('#series tr')].map(r => r.dataset.stat + ' ' + r.dataset.labels)")
    host = job.daemon.series("train.loss")[0]["labels"]["host"]
    user = job.daemon.series("train.loss")[0]["labels"]["user"]
    labels = f"host={host},job=llm,local_rank=2,rank=2,user={user}"
    assert sorted(rows) == [f"train.grad_norm {labels}", f"train.loss {labels}", f"train.step_ms {labels}"]
    assert page.eval("document.getElementById('shown').textContent") == "(3)"
    # A bookmark opens the same view.
    url = page.eval("location.href")
    page.goto(url)
    page.wait("document.querySelectorAll('#charts .chart').length === 3")
    assert page.eval("[document.getElementById('filter').value, document.getElementById('label-filter').value]") == \
        ["train.*", "rank=2"]
    assert sorted(page.eval("[...document.querySelectorAll('#series tr')].map(r => r.dataset.stat)")) == \
        ["train.grad_norm", "train.loss", "train.step_ms"]
    # Clearing it brings every series back.
    page.type("#filter", "")
    page.type("#label-filter", "")
    page.wait("document.querySelectorAll('#charts .chart').length === 4 && location.search === ''")


def charted(page):
    return page.eval("[...document.querySelectorAll('#charts .chart')].map(c => c.dataset.chart)")


def test_charted_stats_stay_while_the_table_order_changes(job, page):
    """Up to 12 charts: once charted, a stat keeps its chart while the filter
    is unchanged, whatever comes to the top of the table. (Last: it adds
    stats the other tests do not expect.)"""
    page.goto(f"http://{job.daemon.metrics}/")
    page.wait("document.querySelectorAll('#charts .chart').length === 4")
    before = charted(page)

    def push_dropping(stat, values):
        # max_samples 1: all but one of the values are capped, so the stat
        # goes to the top of the table (most drops first).
        job.daemon.ctl("push", stat, *map(str, values), "--agg", "sum", "--window", "60s",
                       "--max-samples", "1", "--label", "rank=0")

    for i in range(10):
        push_dropping("zz.early%02d" % i, range(3))
    wait_refresh(page)
    wait_refresh(page)
    now = charted(page)
    assert len(now) == 12 and set(before) <= set(now)  # the 4 kept, 8 of the 10 added
    # Two stats with more drops come before those in the table; the charts stay.
    for i in range(2):
        push_dropping("zz.late%02d" % i, range(6))
    wait_refresh(page)
    wait_refresh(page)
    table = page.eval("[...document.querySelectorAll('#series tr')].map(r => r.dataset.stat)")
    zz = [t for t in table if t.startswith("zz.")]
    assert sorted(zz[:2]) == ["zz.late00", "zz.late01"] and len(zz) == 12
    assert charted(page) == now
    # A new filter charts what it selects.
    page.type("#filter", "zz.late*")
    page.wait("[...document.querySelectorAll('#charts .chart')].map(c => c.dataset.chart).join() === 'zz.late00,zz.late01'")
    # A dropping series' row in the accounting panel is a click away from its chart.
    page.type("#filter", "")
    page.wait("document.querySelector('#drop-rows tr[data-stat=\"zz.early05\"]') !== null")
    page.eval("document.querySelector('#drop-rows tr[data-stat=\"zz.early05\"]').click()")
    page.wait("location.search === '?stat=zz.early05' && "
              "[...document.querySelectorAll('#charts .chart')].map(c => c.dataset.chart).join() === 'zz.early05'")

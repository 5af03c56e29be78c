"""The live page on torchmond's metrics port (docs/live-page.md): its JSON
endpoints against what was pushed, and the page itself in a real headless
Chromium, which must show every pushed series, plot each stat and list the
event; its screenshot must be a real rendering, not a blank page."""

import base64
import json
import os
import shutil
import struct
import subprocess
import time
import urllib.error
import urllib.request
import zlib

import pytest

from torchmon_testing import Daemon, wait_for

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


def http(daemon, path, auth=None):
    request = urllib.request.Request(f"http://{daemon.metrics}{path}")
    if auth:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


@pytest.fixture(scope="module")
def fed(tmp_path_factory):
    """A daemon holding two stats of two ranks over several closed windows, and an event."""
    tmp = tmp_path_factory.mktemp("live")
    daemon = Daemon(str(tmp), "--grace", "100ms")
    for step in range(3):
        # Each step in a window of its own: every train.loss series gets
        # three. Pushed at now, not stamped (--at) ahead: under a sanitizer
        # a push takes long enough that a stamp made before it is late by
        # the time it arrives (the grace is 100 ms).
        start = int(time.time() * 1000) // 200
        while int(time.time() * 1000) // 200 == start:
            time.sleep(0.005)
        for rank in (0, 1):
            base = 4 - step + rank / 10
            daemon.ctl("push", "train.loss", str(base), str(base + 1), "--agg", "mean,min,max",
                       "--window", "200ms", "--label", f"rank={rank}")
            # Longer windows: both ranks' samples share one (a sanitizer build
            # is slow enough for two pushes to straddle 200 ms windows).
            daemon.ctl("push", "train.step_ms", str(100 + 10 * rank), "--agg", "value,max,p50,p99",
                       "--window", "2s", "--label", f"rank={rank}")
    daemon.ctl("event", "epoch_end", "epoch=1", "note=warm <b>")
    # Every sample in a closed window (12 of train.loss, 6 of train.step_ms).
    def all_closed():
        return (sum(w["accepted"] for w in daemon.windows("train.loss")) >= 12
                and sum(w["accepted"] for w in daemon.windows("train.step_ms")) >= 6)

    assert wait_for(all_closed, 10, 0.05), "windows did not close"
    yield daemon
    daemon.stop()


def test_series_endpoint_lists_every_series_with_its_counters(fed):
    status, content_type, body = http(fed, "/api/series")
    assert status == 200 and content_type == "application/json"
    series = json.loads(body)["series"]
    by_key = {(s["stat"], s["labels"]["rank"]): s for s in series}
    assert set(by_key) == {(s, r) for s in ("train.loss", "train.step_ms") for r in ("0", "1")}
    loss = by_key[("train.loss", "0")]
    assert loss["aggregations"] == ["mean", "max", "min"]
    step = by_key[("train.step_ms", "0")]
    assert step["aggregations"] == ["value", "max", "p50", "p99"]
    # One sample a window: p99 is that sample, within the sketch's 1%.
    last = step["last_window"]["aggregates"]
    assert abs(last["p99"] - last["value"]) <= 0.01 * last["value"]
    assert loss["window_ms"] == 200
    assert loss["counters"]["accepted"] == 6
    assert loss["last_window"]["type"] == "window"
    # What the query API says, the page says.
    queried = fed.series("train.loss")
    assert sorted(s["counters"]["accepted"] for s in queried) == [6, 6]


def test_windows_endpoint_is_exact_for_the_stat_and_bounded_by_last(fed):
    _, _, body = http(fed, "/api/windows?stat=train.loss&last=2")
    windows = json.loads(body)["windows"]
    assert {w["stat"] for w in windows} == {"train.loss"}
    per_rank = {}
    for w in windows:
        per_rank.setdefault(w["labels"]["rank"], []).append(w)
    assert set(per_rank) == {"0", "1"} and all(len(ws) <= 2 for ws in per_rank.values())
    everything = json.loads(http(fed, "/api/windows?stat=train.loss")[2])["windows"]
    assert sum(w["accepted"] for w in everything) == 12  # 3 pushes × 2 samples × 2 ranks
    # A glob is not a stat name here.
    assert json.loads(http(fed, "/api/windows?stat=train.*")[2])["windows"] == []
    assert http(fed, "/api/windows")[0] == 400


def test_events_endpoint_and_unknown_paths(fed):
    events = json.loads(http(fed, "/api/events")[2])["events"]
    assert [e["name"] for e in events] == ["epoch_end"]
    assert events[0]["data"] == {"epoch": 1, "note": "warm <b>"}
    assert http(fed, "/nope")[0] == 404
    assert http(fed, "/api/nope")[0] == 404


def test_windows_endpoint_is_bounded_in_series(fed):
    windows = json.loads(http(fed, "/api/windows?stat=train.loss&series=1")[2])["windows"]
    assert {w["labels"]["rank"] for w in windows} == {"0"}  # the first series by labels


def test_windows_endpoint_takes_the_label_filter(fed):
    windows = json.loads(http(fed, "/api/windows?stat=train.loss&label=rank=1")[2])["windows"]
    assert windows and {w["labels"]["rank"] for w in windows} == {"1"}
    assert json.loads(http(fed, "/api/windows?stat=train.loss&label=rank=7")[2])["windows"] == []
    assert http(fed, "/api/windows?stat=train.loss&label=rank")[0] == 400
    # start=: only the windows starting then or later (the page's refreshes).
    everything = json.loads(http(fed, "/api/windows?stat=train.loss")[2])["windows"]
    newest = max(w["start_ms"] for w in everything)
    since = json.loads(http(fed, f"/api/windows?stat=train.loss&start={newest}")[2])["windows"]
    assert since and {w["start_ms"] for w in since} == {newest}
    assert len(since) == sum(1 for w in everything if w["start_ms"] == newest)
    status, _, body = http(fed, "/api/windows?stat=train.loss&start=-1")
    assert status == 400 and "start" in body


def window_of_both_ranks(daemon, stat):
    """The newest window start both ranks of `stat` have."""
    windows = json.loads(http(daemon, f"/api/windows?stat={stat}")[2])["windows"]
    starts = [{w["start_ms"] for w in windows if w["labels"]["rank"] == r} for r in ("0", "1")]
    assert starts[0] & starts[1], f"no window of {stat} holds both ranks: {starts}"
    return max(starts[0] & starts[1])


def test_ranks_endpoint_is_compare_ranks_over_http(fed):
    """/api/ranks answers what Query.CompareRanks (torchmonctl ranks) does."""
    start = window_of_both_ranks(fed, "train.step_ms")
    status, content_type, body = http(fed, f"/api/ranks?stat=train.step_ms&agg=max&window_start={start}")
    assert status == 200 and content_type == "application/json"
    (c,) = json.loads(body)["comparisons"]
    assert c["stat"] == "train.step_ms" and c["aggregation"] == "max"
    assert [r["rank"] for r in c["ranks"]] == ["1", "0"]  # largest first
    assert [r["value"] for r in c["ranks"]] == [110, 100]
    assert c["ranks"][0]["labels"]["rank"] == "1"
    assert (c["min"], c["median"], c["max"]) == (100, 105, 110)
    assert c["slowest_rank"] == "1" and c["missing"] == []
    assert c["max_over_median"] == pytest.approx(110 / 105)
    assert "all_ranks" not in c
    assert c["start_ms"] == start
    grpc = fed.ctl("ranks", "train.step_ms", "--agg", "max",
                   "--window-start", str(start))["comparisons"][0]
    assert grpc["start_ms"] == c["start_ms"] and grpc["slowest_rank"] == c["slowest_rank"]
    assert [r["value"] for r in grpc["ranks"]] == [r["value"] for r in c["ranks"]]
    # Without window_start: each group's newest window, as Query.CompareRanks.
    newest = json.loads(http(fed, "/api/ranks?stat=train.step_ms&agg=max")[2])["comparisons"][0]
    assert newest["start_ms"] == fed.ctl("ranks", "train.step_ms", "--agg", "max")["comparisons"][0]["start_ms"]
    # A quantile also gives the quantile of both ranks' samples pooled, from
    # the sketches of each series' newest window.
    (q,) = json.loads(http(fed, "/api/ranks?stat=train.step_ms&agg=p99")[2])["comparisons"]
    grpc = fed.ctl("ranks", "train.step_ms", "--agg", "p99")["comparisons"][0]
    assert q["aggregation"] == "p99" and q.get("all_ranks") == grpc.get("all_ranks")
    if len(q["ranks"]) == 2:
        assert 100 * 0.99 <= q["all_ranks"] <= 110 * 1.01
    # Several stats at once, a label filter, and a bad aggregation.
    both = json.loads(http(fed, "/api/ranks?stat=train.loss&stat=train.step_ms&agg=max")[2])
    assert [c["stat"] for c in both["comparisons"]] == ["train.loss", "train.step_ms"]
    assert both["matched"] == 2
    one = json.loads(http(fed, "/api/ranks?stat=train.*&agg=max&label=rank=0")[2])["comparisons"]
    assert [len(c["ranks"]) for c in one] == [1, 1]
    status, _, body = http(fed, "/api/ranks?stat=train.loss&agg=median")
    assert status == 400 and "median" in body
    status, _, body = http(fed, "/api/ranks?stat=train.loss&window_start=soon")
    assert status == 400 and "window_start" in body
    # A stat that does not compute the aggregation has nothing to compare.
    assert json.loads(http(fed, "/api/ranks?stat=train.loss&agg=p99")[2])["comparisons"] == []


def test_accounting_endpoint_without_drops(fed):
    answer = json.loads(http(fed, "/api/accounting")[2])
    assert answer["totals"] == {"accepted": 18, "capped": 0, "late": 0, "skewed": 0, "client": 0}
    assert answer["series"] == [] and answer["with_drops"] == 0 and answer["matched"] == 4


def test_series_endpoint_is_bounded_filtered_and_shows_drops_first(tmp_path):
    """Thousands of series: the page gets the ones that matter, never all."""
    import datetime
    import torchmon
    daemon = Daemon(str(tmp_path), "--grace", "100ms")
    try:
        client = torchmon.Client(target=daemon.target, labels={"rank": "0"},
                                 labels_from_environment=False)
        window = datetime.timedelta(seconds=60)
        stats = [torchmon.Stat("many.s%04d" % i, ["count"], window, max_samples=1, client=client)
                 for i in range(3000)]
        for s in stats:
            s.add(1.0)
        for _ in range(5):
            stats[42].add(1.0)   # 5 capped
        for _ in range(3):
            stats[1234].add(1.0)  # 3 capped
        assert client.flush(10)
        time.sleep(0.05)
        stats[2999].add(1.0)     # capped too, and the most recent
        assert client.flush(10)

        status, _, body = http(daemon, "/api/series")
        assert status == 200
        answer = json.loads(body)
        assert answer["matched"] == 3000
        assert len(answer["series"]) == 100
        assert [s["stat"] for s in answer["series"][:3]] == ["many.s0042", "many.s1234",
                                                             "many.s2999"]
        assert answer["series"][0]["counters"]["capped"] == 5
        assert len(body) < 100_000
        recent = json.loads(http(daemon, "/api/series?sort=recent&limit=1")[2])
        assert [s["stat"] for s in recent["series"]] == ["many.s2999"]
        narrowed = json.loads(http(daemon, "/api/series?stat=many.s00*&limit=5")[2])
        assert narrowed["matched"] == 100 and len(narrowed["series"]) == 5
        assert json.loads(http(daemon, "/api/series?label=rank=1")[2])["matched"] == 0
        assert http(daemon, "/api/series?label=rank")[0] == 400
        capped = json.loads(http(daemon, "/api/series?limit=100000")[2])
        assert len(capped["series"]) == 1000  # the most one answer holds
        # The accounting: the daemon's totals, and the series with drops, most first.
        accounting = json.loads(http(daemon, "/api/accounting?limit=2")[2])
        assert accounting["totals"]["capped"] == 5 + 3 + 1
        assert accounting["totals"]["accepted"] == 3000
        assert accounting["with_drops"] == 3 and accounting["matched"] == 3000
        assert [s["stat"] for s in accounting["series"]] == ["many.s0042", "many.s1234"]
        assert accounting["series"][1]["counters"]["capped"] == 3
        narrowed = json.loads(http(daemon, "/api/accounting?stat=many.s2*")[2])
        assert [s["stat"] for s in narrowed["series"]] == ["many.s2999"]
        assert narrowed["totals"]["capped"] == 9  # the daemon's, whatever the filter
    finally:
        daemon.stop()


def read_png(path):
    """Width, height and RGBA rows of an 8-bit RGB/RGBA PNG, decoded here."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 4 if color == 6 else 3
    raw = zlib.decompress(idat)
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b = previous[i]
            c = previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        previous = line
    return width, height, channels, rows


def chromium(*args, timeout=90):
    assert os.path.exists(CHROMIUM), "chromium is missing: deploy/dev/install-deps.sh --test"
    return subprocess.run([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
                           "--hide-scrollbars", "--virtual-time-budget=5000", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_the_page_shows_what_was_pushed_in_headless_chromium(fed):
    dom = chromium("--dump-dom", f"http://{fed.metrics}/").stdout
    for stat in ("train.loss", "train.step_ms"):
        assert dom.count(f'data-stat="{stat}" data-labels=') == 2, stat  # a table row per rank
        assert f'data-chart="{stat}"' in dom
    # A line per rank and stat, and a dashed one per rank and quantile of train.step_ms.
    assert dom.count("<polyline") == 4 + 4
    assert dom.count('data-quantile="p50"') == 2 and dom.count('data-quantile="p99"') == 2
    # The min–max band: train.loss has both, drawn for a rank with two windows or more.
    windows = json.loads(http(fed, "/api/windows?stat=train.loss")[2])["windows"]
    banded = sum(1 for rank in ("0", "1")
                 if sum(1 for w in windows if w["labels"]["rank"] == rank) > 1)
    assert banded == 2 and dom.count("<polygon") == banded
    assert 'data-event="epoch_end"' in dom
    assert "warm &lt;b&gt;" in dom  # text, not markup
    assert "4 series" in dom and "error" not in dom.split('id="status"')[1][:80]


def test_the_screenshot_is_a_real_rendering(fed, tmp_path):
    shot = tmp_path / "page.png"
    result = chromium("--window-size=1280,800", f"--screenshot={shot}", f"http://{fed.metrics}/")
    assert shot.exists(), result.stderr
    width, height, channels, rows = read_png(shot)
    assert (width, height) == (1280, 800)
    colors = {row[i:i + 3] for row in rows[::4] for i in range(0, len(row), channels * 4)}
    assert len(colors) > 50, f"only {len(colors)} colours: a blank page?"
    # The header bar's colour (#1d2330) and the first series' line (#1f77b4).
    pixels = {row[i:i + 3] for row in rows for i in range(0, len(row), channels)}
    assert bytes.fromhex("1d2330") in pixels
    assert any(abs(p[0] - 0x1F) < 12 and abs(p[1] - 0x77) < 12 and abs(p[2] - 0xB4) < 12
               for p in pixels), "no plotted line in the screenshot"


def test_the_page_asks_for_the_metrics_password_and_can_be_turned_off(tmp_path):
    auth = tmp_path / "auth"
    auth.write_text("prom:s3cret-pass\n")
    os.chmod(auth, 0o600)
    (tmp_path / "a").mkdir()
    daemon = Daemon(str(tmp_path / "a"), "--metrics-auth-file", str(auth))
    try:
        assert http(daemon, "/")[0] == 401
        for path in ("/api/series", "/api/windows?stat=x", "/api/ranks", "/api/accounting",
                     "/api/events"):
            assert http(daemon, path)[0] == 401, path
        assert http(daemon, "/api/series", auth="prom:s3cret-pass")[0] == 200
    finally:
        daemon.stop()
    (tmp_path / "b").mkdir()
    off = Daemon(str(tmp_path / "b"), "--live-page", "off")
    try:
        assert http(off, "/")[0] == 404
        for path in ("/api/series", "/api/ranks", "/api/accounting"):
            assert http(off, path)[0] == 404, path
        assert http(off, "/metrics")[0] == 200
    finally:
        off.stop()

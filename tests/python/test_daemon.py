"""The Python client against a real torchmond: aggregates queried back match
what Python computes for the same samples; no failure of the daemon reaches
the training loop."""

import datetime
import math
import os
import random
import subprocess
import tempfile
import threading
import time

import torchmon
from conftest import OWN_USER, TORCHMONCTL, WINDOW_MS, Daemon, run_python

WINDOW = datetime.timedelta(milliseconds=WINDOW_MS)


def windows_holding(daemon, stat, accepted, timeout=10.0):
    """The closed windows of `stat` once they hold `accepted` samples
    between them, oldest first: a burst of adds may cross a window boundary,
    and the tests check the windows whichever way it fell."""
    windows = daemon.windows_when(lambda ws: sum(w["accepted"] for w in ws) >= accepted, stat,
                                  timeout=timeout)
    return sorted(windows, key=lambda w: w["start_ms"])


def expected(values):
    finite = [v for v in values if not math.isnan(v)]
    has_nan = len(finite) != len(values)
    total = sum(values)
    return {"value": values[-1], "mean": total / len(values), "count": float(len(values)),
            "sum": total, "max": math.nan if has_nan else max(finite),
            "min": math.nan if has_nan else min(finite)}


def same(a, b):
    if isinstance(b, float) and math.isnan(b):
        return a == "NaN"
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=0)


def test_aggregates_queried_back_match_python(daemon):
    client = torchmon.Client(target=daemon.target, labels={"rank": "0"},
                             labels_from_environment=False)
    all_aggs = [torchmon.VALUE, torchmon.MEAN, torchmon.COUNT, torchmon.SUM, torchmon.MAX,
                torchmon.MIN]
    loss = torchmon.Stat("train.loss", all_aggs, WINDOW, client=client)
    grad = torchmon.Stat("grad_norm", all_aggs, WINDOW, client=client)
    loss_values = [0.1 * i + 0.37 * (i % 7) for i in range(200)]
    grad_values = [1.0, 2.5, math.nan, 0.5]
    first_ms = int(time.time() * 1000)
    for v in loss_values:
        loss.add(v)
    for v in grad_values:
        grad.add(v)
    last_ms = int(time.time() * 1000)
    assert client.flush(5)

    for name, values in (("train.loss", loss_values), ("grad_norm", grad_values)):
        windows = windows_holding(daemon, name, len(values))
        assert 1 <= len(windows) <= 2, windows  # the adds take far less than a window
        assert windows[0]["start_ms"] == first_ms // WINDOW_MS * WINDOW_MS
        assert windows[-1]["start_ms"] == last_ms // WINDOW_MS * WINDOW_MS
        assert sum(w["accepted"] for w in windows) == len(values)
        # Each window holds the next run of values, in the order added.
        at = 0
        for w in windows:
            part = values[at:at + w["accepted"]]
            at += w["accepted"]
            for agg, value in expected(part).items():
                assert same(w["aggregates"][agg], value), (name, agg, w["aggregates"][agg], value)
            assert w["labels"] == {"rank": "0", "user": OWN_USER}


def test_quantiles_named_as_strings_are_estimated_by_the_daemon(daemon):
    client = torchmon.Client(target=daemon.target, labels={"rank": "0"},
                             labels_from_environment=False)
    step = torchmon.Stat("step_time", [torchmon.MEAN, "p50", "P99", "p99.9", "max"], WINDOW,
                         client=client)
    # A heavy tail: Pareto(1.1) samples from a fixed stream.
    rng = random.Random(7)
    values = [(1.0 - rng.random()) ** (-1 / 1.1) for _ in range(2000)]
    for v in values:
        step.add(v)
    assert client.flush(5)
    # The local mirror of torch.monitor's get() has the six only.
    assert set(step.get()) <= {torchmon.MEAN, torchmon.MAX}

    windows = windows_holding(daemon, "step_time", len(values))
    assert sum(w["accepted"] for w in windows) == len(values)
    at = 0
    for w in windows:  # each holds the next run of values, in the order added
        part = values[at:at + w["accepted"]]
        at += w["accepted"]
        ordered = sorted(part)
        for name, q in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999)):
            exact = ordered[math.floor(q * (len(ordered) - 1))]
            assert abs(w["aggregates"][name] - exact) <= 0.01 * exact, (name, w["aggregates"],
                                                                         exact)
        assert w["aggregates"]["max"] == max(part)
    w = windows[-1]
    # /metrics shows the same estimate under agg="p99.9".
    prefix = f'torchmon_stat{{stat="step_time",agg="p99.9",rank="0",user="{OWN_USER}"}} '
    (line,) = [l for l in daemon.scrape().splitlines() if l.startswith(prefix)]
    assert float(line[len(prefix):]) == w["aggregates"]["p99.9"]


def test_histogram_keyword_defines_a_series_with_a_histogram(daemon):
    client = torchmon.Client(target=daemon.target, labels={"rank": "0"},
                             labels_from_environment=False)
    stats = {
        "h.with": torchmon.Stat("h.with", [torchmon.MEAN], WINDOW, 100, labels={"phase": "eval"},
                                client=client, histogram=True),
        "h.alone": torchmon.Stat("h.alone", [], WINDOW, client=client, histogram=True),
        "h.without": torchmon.Stat("h.without", [torchmon.MEAN], WINDOW, client=client),
        "h.quantile": torchmon.Stat("h.quantile", ["p99"], WINDOW, client=client),
    }
    for stat in stats.values():
        stat.add(1.0)
    assert client.flush(5)
    assert client.errors() == []
    histograms = {}
    for name in stats:
        (series,) = daemon.series(name)
        assert series["counters"]["accepted"] == 1, series
        histograms[name] = series["histogram"]
    # A quantile implies one.
    assert histograms == {"h.with": True, "h.alone": True, "h.without": False,
                          "h.quantile": True}
    (with_histogram,) = daemon.series("h.with")
    assert with_histogram["max_samples"] == 100
    assert with_histogram["labels"] == {"phase": "eval", "rank": "0", "user": OWN_USER}
    assert with_histogram["aggregations"] == ["mean"]
    # Keyword-only: torch.monitor's positional signature is unchanged.
    try:
        torchmon.Stat("h.positional", [torchmon.MEAN], WINDOW, 100, True)
    except TypeError:
        pass
    else:
        raise AssertionError("histogram accepted positionally")


def test_every_window_torch_monitor_takes_reaches_the_daemon_within_its_bounds(daemon):
    """torch.monitor takes any window; the daemon aggregates 10 ms to 31
    days and is sent the nearest bound for one outside them
    (docs/semantics.md): no refusal, every sample accepted."""
    client = torchmon.Client(target=daemon.target, labels={"rank": "0"},
                             labels_from_environment=False)
    # name: (window, the daemon's, the one asked for as the daemon states it)
    windows = {"w.1ms": (datetime.timedelta(milliseconds=1), 10, 1),
               "w.9ms": (datetime.timedelta(milliseconds=9), 10, 9),
               "w.half_ms": (datetime.timedelta(microseconds=500), 10, 1),  # 1 ms in process
               "w.10ms": (datetime.timedelta(milliseconds=10), 10, 10),
               "w.100h": (datetime.timedelta(hours=100), 360_000_000, 360_000_000),
               "w.31d": (datetime.timedelta(days=31), 2_678_400_000, 2_678_400_000),
               "w.31d1ms": (datetime.timedelta(days=31, milliseconds=1), 2_678_400_000,
                            2_678_400_001),
               "w.365d": (datetime.timedelta(days=365), 2_678_400_000, 31_536_000_000)}
    stats = [torchmon.Stat(name, [torchmon.COUNT], window, client=client)
             for name, (window, _, _) in windows.items()]
    for stat in stats:
        for v in (1.0, 2.0, 3.0):
            stat.add(v)
    assert client.flush(5)
    assert client.errors() == []
    scrape = daemon.scrape()
    table = subprocess.run([TORCHMONCTL, "--target", daemon.target, "series", "--stat", "w.*"],
                           capture_output=True, text=True, timeout=30, check=True).stdout
    for name, (_, daemon_ms, asked_ms) in windows.items():
        (series,) = daemon.series(name)
        assert series["window_ms"] == daemon_ms, (name, series)
        assert series["counters"]["accepted"] == 3, (name, series)
        # The definition says what was asked where the daemon rounded it.
        assert series["requested_window_ms"] == asked_ms, (name, series)
        requested = [l for l in scrape.splitlines()
                     if l.startswith(f'torchmon_window_requested_size_seconds{{stat="{name}"')]
        if asked_ms == daemon_ms:
            assert requested == [], requested
        else:
            assert [float(l.split()[-1]) for l in requested] == [asked_ms / 1000], requested
    assert "10ms (asked 1ms)" in table and "744h (asked 8760h)" in table, table
    # Not a window at all: refused when the Stat is made, before any add().
    for window in (datetime.timedelta(0), datetime.timedelta(milliseconds=-5)):
        try:
            torchmon.Stat("w.refused", [torchmon.MEAN], window, client=client)
        except ValueError as e:
            assert "window_size must be positive" in str(e), e
        else:
            raise AssertionError(f"a window of {window} was accepted")
    assert client.flush(5)
    assert daemon.series("w.refused") == []


def test_an_unknown_aggregation_name_raises_value_error_naming_it(daemon):
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    for bad in ("p100", "median", "p99.99999"):
        try:
            torchmon.Stat("bad", [bad], WINDOW, client=client)
        except ValueError as e:
            assert bad in str(e), str(e)
        else:
            raise AssertionError(f"{bad} accepted")
    assert client.flush(5)
    assert daemon.series("bad") == []


def test_max_samples_caps_and_accounting_is_exact(daemon):
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    stat = torchmon.Stat("capped", [torchmon.COUNT], datetime.timedelta(seconds=60),
                         max_samples=10, client=client)
    for i in range(25):
        stat.add(float(i))
    assert client.flush(5)
    (series,) = daemon.series("capped")
    c = series["counters"]
    assert c["accepted"] + c["capped"] + c["late"] + c["skewed"] + c["client_dropped"] == 25
    assert c["accepted"] in (10, 20)  # 25 adds may straddle one window boundary
    assert c["capped"] == 25 - c["accepted"]


def test_add_never_raises_and_flush_returns_when_the_daemon_is_down():
    client = torchmon.Client(target="unix:///nonexistent/torchmond.sock")
    stat = torchmon.Stat("orphan", [torchmon.MEAN], WINDOW, client=client)
    for i in range(10_000):
        stat.add(float(i))
    stat.add(math.nan)
    start = time.monotonic()
    assert client.flush(0.2) is False
    assert time.monotonic() - start < 2
    assert client.stats()["samples_added"] == 10_001


def test_a_budget_too_small_for_one_batch_raises_value_error_naming_the_smallest(daemon):
    for bad in (1, 1_000_000, (2 << 20) - 1, -5):
        try:
            torchmon.Client(target=daemon.target, labels_from_environment=False,
                            buffer_bytes=bad)
        except ValueError as e:
            assert f"buffer_bytes={bad}" in str(e) and "2097152" in str(e), str(e)
        else:
            raise AssertionError(f"buffer_bytes={bad} accepted")
    # The smallest that works holds a stat's samples and delivers them.
    client = torchmon.Client(target=daemon.target, labels_from_environment=False,
                             buffer_bytes=2 << 20)
    stat = torchmon.Stat("small.budget", [torchmon.COUNT], datetime.timedelta(seconds=60),
                         client=client)
    for i in range(1000):
        stat.add(float(i))
    assert client.flush(5)
    assert client.stats()["samples_dropped"] == 0
    (series,) = daemon.series("small.budget")
    assert series["counters"]["accepted"] == 1000


def test_flush_releases_the_gil():
    """A flush waiting for an absent daemon lets other threads run Python:
    here the other thread is what brings the daemon up, after a run of work
    done while the flush waits. Were the GIL held, that thread could not
    start the daemon and the flush would time out (no bound on how fast the
    other thread runs is asserted)."""
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        client = torchmon.Client(target="unix://" + os.path.join(tmpdir, "torchmond.sock"),
                                 labels_from_environment=False)
        stat = torchmon.Stat("pending", [torchmon.SUM], WINDOW, client=client)
        stat.add(1.0)
        flushing, flushed = threading.Event(), threading.Event()
        seen = {}

        def other_thread():
            flushing.wait()
            # Each sleep lets the main thread in: from the first one on, it
            # is inside flush().
            for _ in range(200):
                time.sleep(0.001)
            seen["flush_still_waiting"] = not flushed.is_set()
            # The sample was stamped before this wait and the daemon's
            # start (slow under a sanitizer on a busy machine): a grace of
            # 500 ms would count it late, not accepted.
            seen["daemon"] = Daemon(tmpdir, "--grace", "60s")

        t = threading.Thread(target=other_thread)
        t.start()
        flushing.set()
        try:
            ok = client.flush(120)
        finally:
            flushed.set()
            t.join()
        try:
            assert seen["flush_still_waiting"]
            assert ok, client.errors()
            (series,) = seen["daemon"].series("pending")
            assert series["counters"]["accepted"] == 1
        finally:
            client.close(5)
            seen["daemon"].stop()


def test_client_labels_and_context_manager(daemon):
    with torchmon.Client(target=daemon.target, labels={"job": "ctx", "rank": "3"},
                         labels_from_environment=False) as client:
        torchmon.Stat("ctx.stat", [torchmon.SUM], WINDOW, labels={"phase": "eval"},
                      client=client).add(2.0)
    (series,) = daemon.series("ctx.stat")
    assert series["labels"] == {"job": "ctx", "rank": "3", "phase": "eval", "user": OWN_USER}
    assert series["counters"]["accepted"] == 1


def test_conflicting_definition_is_reported_not_raised(daemon):
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    first = torchmon.Stat("dup", [torchmon.SUM], WINDOW, client=client)
    first.add(1.0)
    # Alive at the same time: a conflict, reported at once. (Made after the
    # first is gone, it would redefine the series: test_dropin.py.)
    second = torchmon.Stat("dup", [torchmon.MEAN], WINDOW, client=client)
    second.add(1.0)
    client.flush(5)
    errors = client.errors()
    assert any("already defined" in e and "while 1 Stat" in e for e in errors), errors
    assert (first.added, second.added) == (1, 1)


def test_events_arrive_typed(daemon):
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    client.log_event(torchmon.Event("epoch_end", datetime.datetime.now(),
                                    {"epoch": 3, "loss": 0.25, "tag": "best", "saved": True}))
    assert client.flush(5)
    (event,) = daemon.ctl("events", "epoch_end")["events"]
    assert event["data"] == {"epoch": 3, "loss": 0.25, "tag": "best", "saved": True}
    assert event["data_types"]["epoch"] == "int"
    assert event["data_types"]["loss"] == "double"


def test_default_client_flushes_at_exit_when_a_process_simply_ends(daemon, python_env):
    code = (
        "import datetime, torchmon\n"
        "s = torchmon.Stat('exit.stat', [torchmon.COUNT], datetime.timedelta(seconds=60))\n"
        "for i in range(1000): s.add(float(i))\n"
        "torchmon.log_event(torchmon.Event('bye', datetime.datetime.now(), {'n': 1000}))\n"
    )
    out = run_python(code, python_env)
    assert out.returncode == 0, out.stderr
    (series,) = daemon.series("exit.stat")
    assert series["counters"]["accepted"] == 1000
    assert series["labels"]["job"] == "pytest"
    assert [e["name"] for e in daemon.ctl("events", "bye")["events"]] == ["bye"]


def test_open_windows_are_reported_once_when_a_stat_goes_and_for_every_live_stat_at_exit(
        daemon, python_env):
    # As torch.monitor: a Stat's open window is reported when it is
    # destroyed; at exit, those of the stats still alive. Thousands of stats
    # made and dropped in between must leave the live set exact.
    code = (
        "import datetime, torchmon\n"
        "w = datetime.timedelta(seconds=60)\n"
        "torchmon.register_event_handler(lambda e: print(sorted(e.data.items()), flush=True))\n"
        "kept = torchmon.Stat('kept', [torchmon.SUM], w)\n"
        "kept.add(2.0)\n"
        "gone = torchmon.Stat('gone', [torchmon.SUM], w)\n"
        "gone.add(3.0)\n"
        "del gone\n"
        "print('deleted', flush=True)\n"
        "churn = [torchmon.Stat(f'churn{i}', [torchmon.COUNT], w) for i in range(3000)]\n"
        "for i, s in enumerate(churn):\n"
        "    if i % 3 == 0: s.add(1.0)\n"
        "del churn[::3]\n"
        "print('churned', flush=True)\n"
        "quiet = torchmon.Stat('quiet', [torchmon.SUM], w)\n"
        "also = [torchmon.Stat('also', [torchmon.MAX], w)]\n"
        "also[0].add(7.0)\n"
    )
    out = run_python(code, python_env)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    # 1,000 churn stats had samples and were deleted: each reported once, then.
    churn_reported = lines[lines.index("deleted") + 1:lines.index("churned")]
    assert sorted(churn_reported) == sorted(f"[('churn{i}.count', 1.0)]"
                                            for i in range(0, 3000, 3))
    assert lines[:lines.index("deleted")] == ["[('gone.sum', 3.0)]"]
    # At exit: every live stat with an open window, once; nothing for the
    # deleted ones or for a stat that never had a sample.
    assert sorted(lines[lines.index("churned") + 1:]) == ["[('also.max', 7.0)]",
                                                          "[('kept.sum', 2.0)]"]


def test_module_flush_uses_the_default_client(daemon, python_env):
    code = (
        "import datetime, sys, torchmon\n"
        "torchmon.Stat('mod.flush', [torchmon.SUM], datetime.timedelta(seconds=60)).add(4.0)\n"
        "sys.exit(0 if torchmon.flush(5) else 1)\n"
    )
    out = run_python(code, python_env)
    assert out.returncode == 0, out.stderr
    (series,) = daemon.series("mod.flush")
    assert series["counters"]["accepted"] == 1

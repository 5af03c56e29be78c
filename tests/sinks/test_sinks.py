"""torchmond's JSON-lines and TensorBoard sinks, end to end (docs/sinks.md).

A real daemon gets known samples and events through torchmonctl, is stopped
with SIGTERM, and its files are read back. The TensorBoard files are checked
byte for byte by a reader written here from the formats' definitions: its own
bitwise CRC-32C, its own varint and protobuf wire decoding. Closed windows in
the files must equal what the daemon's query API reported; the windows still
open at shutdown must hold every sample, marked partial.
"""

import json
import math
import os
import signal
import struct
import subprocess
import time
import urllib.parse

import pytest

from torchmon_testing import TORCHMOND, Daemon, wait_for

AGGS = "mean,max,min,count,sum,p50,p99"


# --- an independent TFRecord / tensorflow.Event reader ----------------------

def crc32c(data: bytes) -> int:
    """Bit by bit, from the polynomial (reflected 0x82F63B78)."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """Every record of a TFRecord file; each length and data CRC is checked."""
    data = open(path, "rb").read()
    records, pos = [], 0
    while pos < len(data):
        assert len(data) - pos >= 12, f"{path}: truncated header at {pos}"
        length_bytes = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", length_bytes)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        assert length_crc == masked(crc32c(length_bytes)), f"{path}: bad length CRC at {pos}"
        body = data[pos + 12:pos + 12 + length]
        assert len(body) == length, f"{path}: truncated record at {pos}"
        (data_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        assert data_crc == masked(crc32c(body)), f"{path}: bad data CRC at {pos}"
        records.append(body)
        pos += 16 + length
    return records


def varint(buf, pos):
    value, shift = 0, 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(buf):
    """(field number, wire type, value) of a protobuf message, in order."""
    out, pos = [], 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = varint(buf, pos)
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise AssertionError(f"unexpected wire type {wire}")
        out.append((number, wire, value))
    return out


def decode_event(buf):
    """tensorflow.Event: wall_time=1 double, step=2 int64, file_version=3
    string, summary=5 Summary{value=1 Value{tag=1 string, simple_value=2 float}}."""
    event = {"scalars": []}
    for number, wire, value in fields(buf):
        if number == 1:
            assert wire == 1
            event["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2:
            assert wire == 0
            event["step"] = value
        elif number == 3:
            assert wire == 2
            event["file_version"] = value.decode()
        elif number == 5:
            assert wire == 2
            for vnum, vwire, vbuf in fields(value):
                assert (vnum, vwire) == (1, 2)
                tag, simple = None, None
                for n, w, v in fields(vbuf):
                    if n == 1:
                        tag = v.decode()
                    elif n == 2:
                        assert w == 5
                        simple = struct.unpack("<f", v)[0]
                event["scalars"].append((tag, simple))
        else:
            raise AssertionError(f"unexpected Event field {number}")
    return event


def run_name(labels):
    """docs/sinks.md: k=v,k=v in key order, other bytes than [A-Za-z0-9._=,+-] as %XX."""
    if not labels:
        return "no-labels"
    quote = lambda s: urllib.parse.quote(s, safe="._=,+-").replace("~", "%7E")
    return ",".join(f"{quote(k)}={quote(v)}" for k, v in sorted(labels.items()))


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


def number(v):
    """A JSON aggregate: a number, or "NaN"/"+Inf"/"-Inf"."""
    return float(v.replace("+Inf", "inf").replace("-Inf", "-inf")) if isinstance(v, str) else v


# --- the tests ----------------------------------------------------------------

def read_jsonl(path):
    text = open(path).read()
    assert text == "" or text.endswith("\n"), "the last line is cut"
    return [json.loads(line) for line in text.splitlines()]


def wait_until(predicate, timeout=10.0):
    """Fails the test unless `predicate` holds within `timeout` seconds."""
    assert wait_for(predicate, timeout), "timed out"


@pytest.fixture
def sink_daemon(tmp_path):
    jsonl = tmp_path / "out.jsonl"
    tb = tmp_path / "tb"
    tb.mkdir()
    daemon = Daemon(str(tmp_path), "--jsonl-file", str(jsonl), "--tensorboard-dir", str(tb),
                    "--grace", "200ms")
    yield daemon, jsonl, tb
    if daemon.proc.poll() is None:
        daemon.proc.kill()
        daemon.proc.wait(timeout=10)


def test_every_window_and_event_reaches_both_sinks_exactly(sink_daemon):
    daemon, jsonl, tb = sink_daemon
    pushed = {}
    for rank in range(2):
        values = [1.5 + rank, 2.0, float("nan") if rank else 0.25, 1e-3 * (rank + 1)]
        for i, v in enumerate(values):
            daemon.ctl("push", "train.loss", repr(v), "--agg", AGGS, "--window", "500ms",
                       "--label", f"rank={rank}", "--label", "job=run/1 \"x\"")
        pushed[str(rank)] = values
    # A window far longer than the test: closed only by the shutdown. Windows
    # are aligned to the epoch, so in the last half minute of an hour the
    # samples are stamped (--at) at the start of the next one, within the
    # daemon's 60 s of allowed skew.
    hour_ms = 3_600_000
    now_ms = int(time.time() * 1000)
    at_ms = now_ms if hour_ms - now_ms % hour_ms >= 30_000 else (now_ms // hour_ms + 1) * hour_ms
    daemon.ctl("push", "slow.stat", "1", "2", "4", "--agg", "sum,count", "--window", "1h",
               "--label", "rank=0", "--at", str(at_ms))
    daemon.ctl("event", "epoch_end", "epoch=3", "lr=0.25", "ok=true", "note=a b")

    # The windows closed on time, as the query API reports them.
    def closed():
        return [w for r in ("0", "1") for w in daemon.windows("train.loss", f"rank={r}")]
    wait_until(lambda: sum(w["accepted"] for w in closed()) == 8)
    queried = closed()
    scrape = daemon.scrape()
    daemon.stop()

    lines = read_jsonl(jsonl)
    windows = [l for l in lines if l["type"] == "window"]
    events = [l for l in lines if l["type"] == "event"]

    # JSON lines: every closed window exactly as queried, nothing else.
    on_time = [w for w in windows if w["stat"] == "train.loss"]
    key = lambda w: (w["labels"]["rank"], w["start_ms"])
    assert sorted(map(key, on_time)) == sorted(map(key, queried))
    by_key = {key(w): w for w in queried}
    for w in on_time:
        q = by_key[key(w)]
        for field in ("stat", "labels", "start_ms", "end_ms", "accepted", "capped", "partial"):
            assert w[field] == q[field], (field, w, q)
        assert w["aggregates"] == q["aggregates"]
        assert list(w["aggregates"]) == ["mean", "count", "sum", "max", "min", "p50", "p99"]
        assert w["end"].endswith("Z") and w["end_ms"] - w["start_ms"] == 500
        assert w["labels"]["job"] == "run/1 \"x\""
    for rank, values in pushed.items():
        mine = [w for w in on_time if w["labels"]["rank"] == rank]
        assert sum(w["accepted"] for w in mine) == len(values)
        assert sum(w["aggregates"]["count"] for w in mine) == len(values)
        total = sum(number(w["aggregates"]["sum"]) for w in mine)
        assert same(total, sum(values)) or math.isclose(total, sum(values))

    # The partial windows of the shutdown hold every sample of slow.stat.
    slow = [w for w in windows if w["stat"] == "slow.stat"]
    assert slow and all(w["partial"] for w in slow)
    assert sum(w["aggregates"]["count"] for w in slow) == 3
    assert sum(w["aggregates"]["sum"] for w in slow) == 7
    assert len(windows) == len(on_time) + len(slow)

    assert len(events) == 1
    event = events[0]
    assert event["name"] == "epoch_end"
    assert event["data"] == {"epoch": 3, "lr": 0.25, "ok": True, "note": "a b"}
    assert event["data_types"] == {"epoch": "int", "lr": "double", "ok": "bool", "note": "string"}
    assert event["timestamp"].endswith("Z") and event["sequence"] >= 1

    # TensorBoard: one run per label set, one event per window, every CRC good.
    runs = {}
    for run in os.listdir(tb):
        files = os.listdir(tb / run)
        assert len(files) == 1 and "tfevents" in files[0], files
        records = [decode_event(r) for r in read_records(tb / run / files[0])]
        assert records[0]["file_version"] == "brain.Event:2"
        assert not records[0]["scalars"]
        runs[run] = records[1:]
    expected_runs = {run_name(w["labels"]) for w in windows}
    assert set(runs) == expected_runs
    for w in windows:
        run = runs[run_name(w["labels"])]
        matches = [e for e in run
                   if e["wall_time"] == w["end_ms"] / 1000.0 and
                   e["scalars"][0][0].startswith(w["stat"] + ".")]
        assert len(matches) == 1, (w, run)
        e = matches[0]
        assert e["step"] == w["start_ms"] // (w["end_ms"] - w["start_ms"])
        assert [t for t, _ in e["scalars"]] == [f"{w['stat']}.{a}" for a in w["aggregates"]]
        for (tag, value), (agg, expected) in zip(e["scalars"], w["aggregates"].items()):
            assert same(value, f32(number(expected))), (tag, value, expected)
    assert sum(len(r) for r in runs.values()) == len(windows), "an extra TensorBoard event"

    # Nothing dropped, no error; what was written is counted.
    assert 'torchmon_daemon_sink_dropped_total{sink="jsonl"} 0' in scrape
    assert 'torchmon_daemon_sink_errors_total{sink="tensorboard"} 0' in scrape


def test_a_missing_tensorboard_dir_is_created_when_its_parent_exists(tmp_path):
    tb = tmp_path / "runs"
    daemon = Daemon(str(tmp_path), "--tensorboard-dir", str(tb), "--grace", "200ms")
    try:
        assert tb.is_dir()
        assert os.stat(tb).st_mode & 0o777 == 0o750
        daemon.ctl("push", "tb.created", "1", "--window", "500ms")
        wait_until(lambda: any(tb.rglob("events.out.tfevents.*")))
    finally:
        daemon.stop()


def test_sighup_reopens_the_jsonl_file_for_rotation(sink_daemon, tmp_path):
    daemon, jsonl, _ = sink_daemon
    daemon.ctl("event", "before", "n=1")
    wait_until(lambda: jsonl.exists() and len(read_jsonl(jsonl)) == 1)
    rotated = tmp_path / "out.jsonl.1"
    os.rename(jsonl, rotated)  # logrotate's default (create) mode
    daemon.proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "sink jsonl: reopened" in daemon.read_stderr())
    daemon.ctl("event", "after", "n=2")
    wait_until(lambda: jsonl.exists() and len(read_jsonl(jsonl)) == 1)
    daemon.ctl("event", "later", "n=3")
    daemon.stop()  # SIGHUP did not stop it: it exits 0 on SIGTERM
    old, new = read_jsonl(rotated), read_jsonl(jsonl)
    assert [e["name"] for e in old] == ["before"]
    assert [e["name"] for e in new] == ["after", "later"]
    assert [e["sequence"] for e in old + new] == sorted({e["sequence"] for e in old + new})


def test_write_errors_are_counted_and_logged_once(tmp_path):
    # /dev/full opens but every write fails with ENOSPC.
    daemon = Daemon(str(tmp_path), "--jsonl-file", "/dev/full")
    try:
        for i in range(3):
            daemon.ctl("event", "e", f"n={i}")
        wait_until(lambda: 'torchmon_daemon_sink_errors_total{sink="jsonl"} 3' in daemon.scrape())
        assert 'torchmon_daemon_sink_records_total{sink="jsonl"} 0' in daemon.scrape()
    finally:
        daemon.stop()
    stderr = daemon.read_stderr() if not daemon.stderr.closed else open(
        tmp_path / "torchmond.stderr").read()
    failures = [l for l in stderr.splitlines() if l.startswith("torchmond: sink jsonl: writing")]
    assert len(failures) == 1, stderr
    assert "No space left on device" in failures[0]


@pytest.mark.parametrize("flag,path,message", [
    ("--jsonl-file", "/nonexistent-dir/out.jsonl", "--jsonl-file /nonexistent-dir"),
    ("--tensorboard-dir", "/nonexistent-dir/tb", "--tensorboard-dir /nonexistent-dir/tb"),
    ("--tensorboard-dir", "/etc/hostname", "not a directory"),
])
def test_a_bad_sink_path_stops_the_start_and_fails_check_config(tmp_path, flag, path, message):
    socket = tmp_path / "d.sock"
    start = subprocess.run([TORCHMOND, "--listen", f"unix://{socket}", "--metrics-listen",
                            "127.0.0.1:0", flag, path], capture_output=True, text=True,
                           timeout=30)
    # EX_CONFIG: a configuration error, which systemd is told not to restart.
    assert start.returncode == 78, start.stderr
    assert message in start.stderr
    assert not socket.exists()
    conf = tmp_path / "t.conf"
    conf.write_text(f"{flag[2:]} = {path}\n")
    check = subprocess.run([TORCHMOND, "--check-config", str(conf)], capture_output=True,
                           text=True, timeout=30)
    assert check.returncode == 2
    assert message in check.stderr

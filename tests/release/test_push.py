"""The release tarball's torchmond pushing to real receivers (docs/push.md),
from a cached Debian trixie root (roots.sh trixie-receivers):

  - Prometheus 2.53 with --web.enable-remote-write-receiver and native
    histograms, fed by remote-write;
  - VictoriaMetrics 1.112, fed by remote-write (/api/v1/write) and by
    OTLP/HTTP (/opentelemetry/v1/metrics) at once.

Every window each receiver holds equals what `torchmonctl windows --json`
reports, value for value; Prometheus' histogram_quantile over the pushed
native histogram is within the schema's bound of the samples' own
quantile; and VictoriaMetrics stopped for longer than the queue holds,
then started again, holds every window but a run of the oldest, which
/metrics counts as dropped exactly.

    TORCHMON_RELEASE_DIR=OUT TORCHMON_BUILD_DIR=build /usr/bin/python3 -m pytest tests/release/test_push.py
"""

import json
import math
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "prometheus"))
from torchmond import LaunchedDaemon, wait_for  # noqa: E402

from prom_cluster import NATIVE_HISTOGRAMS, Prometheus, free_loopback_port  # noqa: E402

STAT = "push.step_ms"
AGGS = "value,mean,count,sum,max,min,p50,p90"


@pytest.fixture(scope="module")
def receivers_root():
    out = subprocess.run([os.path.join(HERE, "roots.sh"), "trixie-receivers"], check=True,
                         stdout=subprocess.PIPE, text=True, timeout=1800)
    return out.stdout.strip()


class VictoriaMetrics:
    """victoria-metrics on a free loopback port, its data in `data_dir`;
    stop() and start() again keep the data and the port."""

    def __init__(self, root, data_dir):
        self.binary = os.path.join(root, "usr", "bin", "victoria-metrics")
        self.data_dir = data_dir
        self.address = f"127.0.0.1:{free_loopback_port()}"
        self.log = open(os.path.join(data_dir + ".log"), "a")
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            [self.binary, "-storageDataPath=" + self.data_dir, "-httpListenAddr=" + self.address,
             "-retentionPeriod=100y", "-loggerLevel=ERROR"],
            stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self._healthy, 30)

    def _healthy(self):
        assert self.proc.poll() is None, "victoria-metrics exited"
        try:
            with urllib.request.urlopen(f"http://{self.address}/health", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def export(self, match):
        """Every raw sample of the series `match` selects: [(labels, [(ms, value)])]."""
        # Rows pushed recently become searchable once flushed; those of the
        # last second or so are left out a moment longer (callers wait).
        urllib.request.urlopen(f"http://{self.address}/internal/force_flush", timeout=10).read()
        url = f"http://{self.address}/api/v1/export?" + urllib.parse.urlencode({"match[]": match})
        with urllib.request.urlopen(url, timeout=10) as r:
            lines = [json.loads(line) for line in r.read().decode().splitlines() if line]
        return [(l["metric"], list(zip(l["timestamps"], l["values"]))) for l in lines]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def close(self):
        self.stop()
        self.log.close()


class Pushing:
    """The release torchmond with push flags, and torchmonctl beside it."""

    def __init__(self, binaries, tmpdir, *flags):
        self.ctl_binary = binaries["torchmonctl"]
        self.socket = os.path.join(tmpdir, "torchmond.sock")
        self.stderr = open(os.path.join(tmpdir, "torchmond.stderr"), "w+")
        self.launched = LaunchedDaemon(
            [binaries["torchmond"], "--listen", "unix://" + self.socket, "--metrics-listen",
             "127.0.0.1:0", "--grace", "500ms", *flags], stderr=self.stderr)
        self.metrics = self.launched.ready.metrics

    def ctl(self, *args):
        out = subprocess.run([self.ctl_binary, "--target", "unix://" + self.socket, "--json", *args],
                             capture_output=True, text=True, timeout=30, check=True)
        return json.loads(out.stdout) if out.stdout.strip() else None

    def push(self, rank, *values):
        self.ctl("push", STAT, *[repr(float(v)) for v in values], "--window", "1s", "--agg", AGGS,
                 "--label", f"rank={rank}")

    def export_metric(self, name, **labels):
        """Sum of the torchmon_export_* samples with these labels."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5) as r:
            body = r.read().decode()
        total, found = 0.0, False
        for line in body.splitlines():
            if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
                total += float(line.rsplit(" ", 1)[1])
                found = True
        assert found, f"no {name} {labels} on /metrics"
        return total

    def stop(self):
        status = self.launched.stop(timeout=30)
        stderr = self.launched.read_stderr()
        self.stderr.close()
        assert status == 0, stderr
        return stderr


def windows_by_key(windows):
    """torchmonctl's windows as {(rank, agg, end_ms): value}."""
    out = {}
    for w in windows:
        for agg, value in w["aggregates"].items():
            out[(w["labels"]["rank"], agg, w["end_ms"])] = value
    return out


def same(a, b):
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def test_every_window_each_receiver_holds_is_what_torchmonctl_reports(release_binaries,
                                                                       receivers_root, tmp_path):
    tmp = str(tmp_path)
    config = os.path.join(tmp, "prometheus.yml")
    with open(config, "w") as f:
        f.write("global:\n  scrape_interval: 1h\n")
    prometheus = Prometheus(config, tmp, flags=("--web.enable-remote-write-receiver", NATIVE_HISTOGRAMS),
                            binary=os.path.join(receivers_root, "usr", "bin", "prometheus"))
    vm = VictoriaMetrics(receivers_root, os.path.join(tmp, "vm"))
    daemon = None
    try:
        version = subprocess.run([prometheus_binary(receivers_root), "--version"], capture_output=True,
                                 text=True).stdout
        assert "version 2.53" in version, version
        daemon = Pushing(release_binaries, tmp,
                         "--remote-write-url", f"http://{prometheus.address}/api/v1/write",
                         "--remote-write-url", f"http://{vm.address}/api/v1/write",
                         "--otlp-endpoint", f"http://{vm.address}/opentelemetry/v1/metrics")
        # Four windows of two ranks; values spread over decades, so that the
        # histogram's buckets matter.
        samples = {"0": [], "1": []}
        for i in range(4):
            for rank in samples:
                values = [(i + 1) * 1.5 ** k + int(rank) for k in range(12)]
                samples[rank] += values
                daemon.push(rank, *values)
            time.sleep(1.05)
        wait_for(lambda: len(daemon.ctl("windows", STAT)["windows"]) >= 8, 30)
        windows = daemon.ctl("windows", STAT)["windows"]
        assert len(windows) == 8
        for protocol in ("remote_write", "otlp"):
            wait_for(lambda: daemon.export_metric("torchmon_export_sent_total", exporter=protocol)
                     == (16 if protocol == "remote_write" else 8), 30)
        want = windows_by_key(windows)
        series = daemon.ctl("series", "--stat", STAT)["series"]
        accepted = {s["labels"]["rank"]: s["counters"]["accepted"] for s in series}
        assert accepted == {"0": 48, "1": 48}

        # Prometheus: the raw samples of the last 10 minutes.
        data = prometheus.api("query", query=f'torchmon_stat{{stat="{STAT}"}}[10m]')
        got = {(s["metric"]["rank"], s["metric"]["agg"], int(round(float(ts) * 1000))): float(v)
               for s in data["result"] for ts, v in s["values"]}
        assert got.keys() == want.keys()
        for key, value in want.items():
            assert same(got[key], value), (key, got[key], value)
        counters = prometheus.query(f'torchmon_samples_accepted_total{{stat="{STAT}"}}')
        assert {l["rank"]: v for l, v in counters} == accepted
        # A quantile of every sample a rank sent, from its native histogram.
        for rank, values in samples.items():
            [(_, h)] = prometheus.query_histograms(
                f'torchmon_stat_distribution{{stat="{STAT}",rank="{rank}"}}')
            assert int(float(h["count"])) == len(values)
            for q in (0.5, 0.9, 0.99):
                [(_, estimate)] = prometheus.query(
                    f'histogram_quantile({q}, torchmon_stat_distribution{{stat="{STAT}",rank="{rank}"}})')
                # The q-quantile lies between the samples of ranks q·n and
                # q·n + 1 (the same one unless q·n is whole); the estimate
                # lies within their buckets, each a factor 2^(2^-schema) wide.
                ordered = sorted(values)
                low = ordered[math.ceil(q * len(values)) - 1]
                high = ordered[min(len(values) - 1, math.floor(q * len(values)))]

                def bucket(x):
                    [(_, lower, upper, _)] = [b for b in h["buckets"]
                                              if float(b[1]) < x <= float(b[2])]
                    return float(lower), float(upper)

                (lower, _), (_, upper) = bucket(low), bucket(high)
                assert lower <= estimate <= upper, (rank, q, estimate, low, high)

        # VictoriaMetrics: the same windows twice, by remote-write (labels as
        # sent) and by OTLP (host -> host.name, user -> process.owner).
        by_protocol = {}

        def fetch_vm():
            by_protocol.update(remote_write={}, otlp={})
            for labels, points in vm.export(f'torchmon_stat{{stat="{STAT}"}}'):
                protocol = "otlp" if "host.name" in labels else "remote_write"
                assert ("host" in labels) == (protocol == "remote_write"), labels
                for ts, v in points:
                    by_protocol[protocol][(labels["rank"], labels["agg"], ts)] = v
            return all(got.keys() == want.keys() for got in by_protocol.values())

        wait_for(fetch_vm, 30)
        # VictoriaMetrics keeps 12 significant decimal digits of a value (its
        # storage converts floats to decimal mantissa and exponent).
        for protocol, got in by_protocol.items():
            assert got.keys() == want.keys(), protocol
            for key, value in want.items():
                assert float(got[key]) == pytest.approx(value, rel=1e-11, abs=0), (protocol, key)
        # The counters, as OTLP cumulative sums. VictoriaMetrics shows the
        # newest second of samples a moment later than the rest (its export
        # leaves out what is that recent), so the last point is waited for.
        def last_counters():
            return {labels["rank"]: max(points)[1]
                    for labels, points in vm.export(f'torchmon_samples_accepted{{stat="{STAT}"}}')}

        wait_for(lambda: last_counters() == accepted, 30)
        assert last_counters() == accepted
    finally:
        if daemon is not None:
            daemon.stop()
        prometheus.stop()
        vm.close()


def prometheus_binary(root):
    return os.path.join(root, "usr", "bin", "prometheus")


def test_a_receiver_away_longer_than_the_queue_loses_a_run_of_the_oldest_windows_counted(
        release_binaries, receivers_root, tmp_path):
    tmp = str(tmp_path)
    vm = VictoriaMetrics(receivers_root, os.path.join(tmp, "vm"))
    daemon = Pushing(release_binaries, tmp, "--otlp-endpoint",
                     f"http://{vm.address}/opentelemetry/v1/metrics", "--push-queue", "3")
    try:
        def feed(seconds):
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                daemon.push("0", time.time() % 1000)
                time.sleep(0.2)

        feed(2.5)
        vm.stop()
        feed(2.0)
        # Away: the exporter holds at most 3 window ends.
        assert daemon.export_metric("torchmon_export_queue_length") >= 1
        feed(6.0)
        assert daemon.export_metric("torchmon_export_queue_length") == 3
        assert daemon.export_metric("torchmon_export_queue_oldest_age_seconds") > 0
        vm.start()
        feed(2.5)
        # Every window closed, and the queue empty.
        time.sleep(1.6)
        closed = daemon.ctl("windows", STAT)["windows"]
        wait_for(lambda: daemon.export_metric("torchmon_export_queue_length") == 0, 60)
        sent = daemon.export_metric("torchmon_export_sent_total")
        dropped = daemon.export_metric("torchmon_export_dropped_total", reason="queue_full")
        assert daemon.export_metric("torchmon_export_dropped_total", reason="rejected") == 0
        assert daemon.export_metric("torchmon_export_retried_total") >= 1
        assert sent + dropped == len(closed)
        assert dropped >= 1

        got = {}

        def fetch_vm():
            got.clear()
            for labels, points in vm.export(f'torchmon_stat{{stat="{STAT}",agg="mean"}}'):
                got.update(dict(points))
            return len(got) >= sent

        wait_for(fetch_vm, 30)
        assert len(got) == sent
        ends = [w["end_ms"] for w in closed]
        for w in closed:
            if w["end_ms"] in got:
                assert float(got[w["end_ms"]]) == pytest.approx(w["aggregates"]["mean"], rel=1e-11)
        # What is missing is one run of consecutive windows, followed by at
        # least the queue's 3 that waited out the outage.
        missing = [i for i, end in enumerate(ends) if end not in got]
        runs = [[missing[0]]]
        for i in missing[1:]:
            if i == runs[-1][-1] + 1:
                runs[-1].append(i)
            else:
                runs.append([i])
        # One run; or two around a window kept because it was on the wire when
        # the queue overflowed (never dropped mid-request).
        assert len(runs) == 1 or (len(runs) == 2 and runs[1][0] == runs[0][-1] + 2), missing
        assert len(ends) - (missing[-1] + 1) >= 3
        assert missing[0] >= 1  # windows before the outage arrived
    finally:
        stderr = daemon.stop()
        vm.close()
    assert "the queue is full (3 windows)" in stderr

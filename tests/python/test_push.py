"""torchmond pushing closed windows (--remote-write-url, --otlp-endpoint;
docs/push.md) to a receiver that answers as scripted: what is sent, what a
400, a 429 with Retry-After and a 500 do to it, the credentials each
endpoint's options give, what a shutdown sends, and the flags' refusals.
The bodies are read back with the protocols' own messages (protoc over
proto/third_party) after snappy. tests/release/test_push.py does the same
against real receivers (Prometheus 2.53, VictoriaMetrics 1.112)."""

import gzip
import os
import re
import subprocess
import sys
import tempfile
import time

import pytest

from torchmon_testing import OWN_USER, TORCHMONCTL, TORCHMOND, Daemon, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))
from push_receiver import ScriptedReceiver, load_messages, snappy_decompress  # noqa: E402

STAT = "push.loss"


@pytest.fixture(scope="module")
def messages(tmp_path_factory):
    return load_messages(str(tmp_path_factory.mktemp("push_pb2")))


@pytest.fixture
def tmpdir():
    with tempfile.TemporaryDirectory(prefix="torchmon-push.") as d:
        yield d


def push(daemon, *values, window="500ms", agg="mean,max,count,p50"):
    subprocess.run([TORCHMONCTL, "--target", daemon.target, "push", STAT,
                    *[str(v) for v in values], "--window", window, "--agg", agg,
                    "--label", "rank=0"], check=True, capture_output=True, timeout=30)


def export_metric(daemon, name, **labels):
    """The value of one torchmon_export_* sample on /metrics."""
    body = daemon.scrape()
    for line in body.splitlines():
        if not line.startswith(name + "{"):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no {name} {labels} in /metrics")


def decode_remote_write(remote_pb2, body):
    request = remote_pb2.WriteRequest()
    request.ParseFromString(snappy_decompress(body))
    return request


def samples_of(request):
    """{(name, agg or reason, end_ms): value} of a WriteRequest."""
    out = {}
    for ts in request.timeseries:
        labels = {l.name: l.value for l in ts.labels}
        assert labels["stat"] == STAT and labels["rank"] == "0" and labels["user"] == OWN_USER
        for s in ts.samples:
            out[(labels["__name__"], labels.get("agg", labels.get("reason")), s.timestamp)] = s.value
    return out


def test_each_closed_window_goes_to_the_receiver_as_torchmonctl_reports_it(tmpdir, messages):
    remote_pb2, _ = messages
    with ScriptedReceiver([(204, {}, "")]) as receiver:
        d = Daemon(tmpdir, "--remote-write-url", receiver.url())
        try:
            for values in ([1, 2, 3], [10, 20], [5]):
                push(d, *values)
                time.sleep(0.6)  # the next push lands in a later window
            windows = d.wait_windows(STAT, 3)
            assert len(windows) == 3
            wait_for(lambda: export_metric(d, "torchmon_export_sent_total") == 3, 10)
        finally:
            d.stop()
        requests = receiver.received()
    assert len(requests) == 3
    got = {}
    for r in requests:
        assert r.path == "/api/v1/write"
        assert r.headers["Content-Encoding"] == "snappy"
        assert r.headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
        got.update(samples_of(decode_remote_write(remote_pb2, r.body)))
    for w in windows:
        end = w["end_ms"]
        for agg, value in w["aggregates"].items():
            assert got[("torchmon_stat", agg, end)] == value, (agg, end)
        assert got[("torchmon_window_accepted_samples", None, end)] == w["accepted"]
    # The counters as each window closed, stamped then (its end + the 500 ms
    # grace, or a little later): a window's own samples and maybe the next
    # one's, never fewer than its own; the last is every sample.
    counters = sorted((ts, v) for (name, _, ts), v in got.items()
                      if name == "torchmon_samples_accepted_total")
    assert len(counters) == 3
    accepted = 0
    for w, (ts, value) in zip(windows, counters):
        accepted += w["accepted"]
        assert ts >= w["end_ms"] + 500
        assert value >= accepted
    assert counters[-1][1] == 6


def test_a_400_drops_its_windows_a_429_waits_its_retry_after_and_a_500_is_retried(tmpdir,
                                                                                   messages):
    remote_pb2, _ = messages
    script = [(400, {}, "out of order sample"), (429, {"Retry-After": "1"}, "slow down"),
              (500, {}, "busy"), (204, {}, "")]
    with ScriptedReceiver(script) as receiver:
        d = Daemon(tmpdir, "--remote-write-url", receiver.url())
        try:
            for values in ([1], [2]):
                push(d, *values)
                time.sleep(0.6)
            d.wait_windows(STAT, 2)
            wait_for(lambda: export_metric(d, "torchmon_export_sent_total") >= 1, 15)
            sent = export_metric(d, "torchmon_export_sent_total")
            rejected = export_metric(d, "torchmon_export_dropped_total", reason="rejected")
            retried = export_metric(d, "torchmon_export_retried_total")
            log = d.read_stderr()
        finally:
            d.stop()
        requests = receiver.received()
    first, second, third, fourth = requests[:4]
    # The 400: the first window is dropped, never sent again.
    assert rejected == 1
    assert first.body != second.body
    # The 429 and the 500: the same request again, the first after the 1 s asked.
    assert second.body == third.body == fourth.body
    assert third.at - second.at >= 0.95
    assert retried == 2
    assert sent == 1
    ends = {ts for (name, _, ts) in samples_of(decode_remote_write(remote_pb2, fourth.body))
            if name == "torchmon_stat"}
    assert len(ends) == 1  # one window
    assert "HTTP 400: out of order sample" in log
    assert re.search(r"attempt 1 failed \(HTTP 429: slow down\); trying again in 1000 ms", log), log


def test_each_endpoint_takes_its_own_credentials_from_the_configuration_file(tmpdir, messages):
    _, otlp_pb2 = messages
    token, password = os.path.join(tmpdir, "token"), os.path.join(tmpdir, "password")
    for path, text in ((token, "tok-123\n"), (password, "pw\n")):
        with open(path, "w") as f:
            f.write(text)
    with ScriptedReceiver([(200, {}, "")]) as receiver:
        config = os.path.join(tmpdir, "torchmond.conf")
        with open(config, "w") as f:
            f.write(f'remote-write-url = "{receiver.url()} bearer_token_file={token}"\n'
                    f'otlp-endpoint = "http://127.0.0.1:{receiver.port} '
                    f'basic_auth_username=ann basic_auth_password_file={password}"\n'
                    f'otlp-endpoint = http://127.0.0.1:{receiver.port}/custom/path\n')
        d = Daemon(tmpdir, "--config", config)
        try:
            push(d, 7)
            d.wait_windows(STAT, 1)
            wait_for(lambda: len(receiver.received()) >= 3, 10)
        finally:
            d.stop()
        requests = {r.path: r for r in receiver.received()}
    assert requests["/api/v1/write"].headers["Authorization"] == "Bearer tok-123"
    assert requests["/v1/metrics"].headers["Authorization"] == "Basic YW5uOnB3"  # ann:pw
    assert "Authorization" not in requests["/custom/path"].headers
    assert requests["/v1/metrics"].headers["Content-Encoding"] == "gzip"
    otlp = otlp_pb2.ExportMetricsServiceRequest()
    otlp.ParseFromString(gzip.decompress(requests["/v1/metrics"].body))
    [resource] = otlp.resource_metrics
    attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert attributes["process.owner"] == OWN_USER
    names = {m.name for m in resource.scope_metrics[0].metrics}
    assert {"torchmon_stat", "torchmon_samples_accepted", "torchmon_stat_distribution"} <= names


def test_the_windows_a_shutdown_closes_are_sent_before_the_daemon_exits(tmpdir, messages):
    remote_pb2, _ = messages
    with ScriptedReceiver([(204, {}, "")]) as receiver:
        d = Daemon(tmpdir, "--remote-write-url", receiver.url())
        push(d, 4, 6, window="1h")  # a window that only a shutdown closes
        d.stop()
        requests = receiver.received()
    assert len(requests) == 1
    got = samples_of(decode_remote_write(remote_pb2, requests[0].body))
    means = [v for (name, agg, _), v in got.items() if name == "torchmon_stat" and agg == "mean"]
    assert means == [5]


def refusal(*flags):
    out = subprocess.run([TORCHMOND, "--metrics-listen", "127.0.0.1:0", *flags],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    return out.returncode, out.stderr


def test_bad_endpoints_are_refused_at_start_naming_the_flag_and_the_problem(tmpdir):
    code, err = refusal("--remote-write-url", "prometheus:9090/api/v1/write")
    assert code == 2 and '--remote-write-url "prometheus:9090/api/v1/write" is not an http://' in err
    code, err = refusal("--otlp-endpoint", "http://c:4318 colour=blue")
    assert code == 2 and 'unknown option "colour"' in err
    code, err = refusal("--remote-write-url", "https://u:p@mimir/api/v1/push")
    assert code == 2 and "credentials" in err
    missing = os.path.join(tmpdir, "no-such-token")
    code, err = refusal("--listen", "unix://" + os.path.join(tmpdir, "s.sock"),
                        "--remote-write-url", f"http://127.0.0.1:9/api/v1/write bearer_token_file={missing}")
    assert code == 78, err
    assert f"bearer_token_file {missing} cannot be read" in err


def test_a_receiver_that_never_answers_holds_up_nothing_but_its_own_queue(tmpdir):
    """A socket that accepts connections (the kernel's backlog) and never
    answers: each request waits out its 30 s timeout on the exporter's
    thread, while windows keep closing, samples keep being accepted and
    /metrics keeps answering."""
    import socket
    hole = socket.socket()
    hole.bind(("127.0.0.1", 0))
    hole.listen(64)
    try:
        url = f"http://127.0.0.1:{hole.getsockname()[1]}/api/v1/write timeout=30s"
        d = Daemon(tmpdir, "--remote-write-url", url, "--push-flush-timeout", "500ms")
        try:
            started = time.monotonic()
            for i in range(4):
                push(d, i)
                time.sleep(0.6)
            windows = d.wait_windows(STAT, 4)
            assert len(windows) == 4
            wait_for(lambda: export_metric(d, "torchmon_export_queue_length") >= 3, 10)
            assert export_metric(d, "torchmon_export_sent_total") == 0
            # All of it well inside the first request's 30 s.
            assert time.monotonic() - started < 20
            stopping = time.monotonic()
        finally:
            d.stop()
        # The stop cut the request on the wire at --push-flush-timeout, and
        # dropped what was queued, saying so.
        assert time.monotonic() - stopping < 10
        with open(os.path.join(tmpdir, "torchmond.stderr")) as f:
            log = f.read()
        assert re.search(r"stopping with [3-9] window end\(s\) unsent", log), log
    finally:
        hole.close()

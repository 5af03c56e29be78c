"""SIGHUP re-reads the credential files (docs/security.md, "Reloading"):
new tokens, /metrics passwords and gRPC certificates apply to the calls,
scrapes and connections that follow, a stream admitted before keeps flowing without losing a sample, and
a bad new file is refused with a log line while the old one stays in force.
"""

import base64
import datetime
import os
import signal
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request

import pytest

import torchmon
from certificates import make_certificate
from conftest import WINDOW_MS, Daemon
from torchmond import wait_for
from test_security import write_secret

WINDOW = datetime.timedelta(milliseconds=WINDOW_MS)
OLD = "01d70ce0a9e5b7d4c2a8e6f0b1d3c5a7"
NEW = "0e770ce0a9e5b7d4c2a8e6f0b1d3c5a7"


def scrape(daemon, user_password):
    """(HTTP status, body) of a scrape of /metrics with basic auth."""
    request = urllib.request.Request(f"http://{daemon.metrics}/metrics")
    request.add_header("Authorization",
                       "Basic " + base64.b64encode(user_password.encode()).decode())
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def scrape_status(daemon, user_password):
    return scrape(daemon, user_password)[0]


def hang_up(daemon, line):
    """SIGHUP, then the daemon's log once it holds `line` (a new one)."""
    before = daemon.read_stderr().count(line)
    daemon.proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: daemon.read_stderr().count(line) > before, 10), daemon.read_stderr()
    return daemon.read_stderr()


def connects(daemon, token):
    client = torchmon.Client(target=daemon.target, token=token, labels={"rank": "9"},
                             labels_from_environment=False)
    torchmon.Stat("reload.probe", [torchmon.COUNT], WINDOW, client=client).add(1.0)
    return client.flush(3)


@pytest.fixture
def reloading_daemon():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-reload.") as tmpdir:
        tokens = write_secret(os.path.join(tmpdir, "tokens"), OLD + "\n")
        users = write_secret(os.path.join(tmpdir, "users"), "prometheus:old-password\n")
        d = Daemon(tmpdir, "--auth-token-file", tokens, "--metrics-auth-file", users)
        d.tokens, d.users = tokens, users
        try:
            yield d
        finally:
            d.stop()


def test_sighup_rereads_tokens_and_passwords_and_streams_keep_flowing(reloading_daemon):
    d = reloading_daemon
    streaming = torchmon.Client(target=d.target, token=OLD, labels={"rank": "0"},
                                labels_from_environment=False)
    stat = torchmon.Stat("reload.flowing", [torchmon.COUNT], WINDOW, client=streaming)
    for _ in range(100):
        stat.add(1.0)
    assert streaming.flush(10), streaming.errors()
    assert scrape_status(d, "prometheus:old-password") == 200

    write_secret(d.tokens, f"alice {NEW}\n")
    write_secret(d.users, "prometheus:new-password\n")
    log = hang_up(d, "re-read --metrics-auth-file")
    assert f"re-read --auth-token-file {d.tokens}: 1 token in force" in log, log
    assert f"re-read --metrics-auth-file {d.users}: 1 user in force" in log, log

    # The stream admitted with the old token goes on; nothing is lost.
    for _ in range(100):
        stat.add(1.0)
    assert streaming.flush(10), streaming.errors()
    assert streaming.errors() == []
    d.ctl_flags = ["--token-file", write_secret(d.tokens + ".ctl", NEW + "\n")]
    [series] = d.series("reload.flowing")
    assert series["counters"]["accepted"] == 200, series
    # New calls: the new token only; the new password only.
    assert connects(d, NEW)
    assert not connects(d, OLD)
    assert scrape_status(d, "prometheus:new-password") == 200
    assert scrape_status(d, "prometheus:old-password") == 401


def test_a_bad_new_file_is_refused_and_the_old_stays(reloading_daemon):
    d = reloading_daemon
    write_secret(d.tokens, "too-short\n")
    write_secret(d.users, "no colon here\n")
    log = hang_up(d, "the users read before stay in force")
    assert (f"error: --auth-token-file {d.tokens} line 1: the token is shorter than 16 "
            "characters; generate one with: openssl rand -hex 32; the tokens read before stay "
            "in force") in log, log
    assert "too-short" not in log  # never a secret in the log
    assert connects(d, OLD)
    assert scrape_status(d, "prometheus:old-password") == 200
    assert "torchmon_daemon_reload_failures_total 2\n" in scrape(d, "prometheus:old-password")[1]
    # A file the daemon may not trust (readable by others) is refused too.
    write_secret(d.tokens, NEW + "\n")
    os.chmod(d.tokens, 0o644)
    hang_up(d, "has mode 0644")
    assert connects(d, OLD) and not connects(d, NEW)


def shown_certificate(target, ca):
    """The CN of the certificate a TLS gRPC listener shows a new connection."""
    context = ssl.create_default_context(cafile=ca)
    context.set_alpn_protocols(["h2"])
    host, port = target.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as raw:
        with context.wrap_socket(raw, server_hostname="localhost") as tls:
            return dict(x[0] for x in tls.getpeercert()["subject"])["commonName"]


def test_sighup_puts_a_renewed_grpc_certificate_in_force_and_refuses_a_bad_one(monkeypatch):
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-reload.") as tmpdir:
        ca, _ = make_certificate(tmpdir, "ca", "ca_ext")
        cert, key = make_certificate(tmpdir, "server", "server_ext", "ca")
        # Where the daemon keeps the copies gRPC reads ($TMPDIR): its own.
        private_tmp = os.path.join(tmpdir, "tmp")
        os.mkdir(private_tmp)
        monkeypatch.setenv("TMPDIR", private_tmp)
        d = Daemon(tmpdir, "--listen", "127.0.0.1:0", "--tls-cert", cert, "--tls-key", key)
        try:
            [copies] = os.listdir(private_tmp)
            assert copies.startswith("torchmond-tls.")
            assert os.stat(os.path.join(private_tmp, copies)).st_mode & 0o777 == 0o700
            assert shown_certificate(d.tcp_target, ca) == "server"
            streaming = torchmon.Client(target=d.tcp_target, tls_ca=ca, labels={"rank": "0"},
                                        labels_from_environment=False)
            stat = torchmon.Stat("reload.tls", [torchmon.COUNT], WINDOW, client=streaming)
            for _ in range(100):
                stat.add(1.0)
            assert streaming.flush(10), streaming.errors()

            # certbot's way: new files, same names, then a reload.
            renewed_cert, renewed_key = make_certificate(tmpdir, "renewed", "server_ext", "ca")
            os.replace(renewed_cert, cert)
            os.replace(renewed_key, key)
            log = hang_up(d, "re-read --tls-cert")
            assert "in force for the TLS connections that start a second from now" in log, log
            assert wait_for(lambda: shown_certificate(d.tcp_target, ca) == "renewed", 5)
            # The stream that began under the old certificate goes on.
            for _ in range(100):
                stat.add(1.0)
            assert streaming.flush(10), streaming.errors()
            [series] = d.series("reload.tls")
            assert series["counters"]["accepted"] == 200, series
            fresh = torchmon.Client(target=d.tcp_target, tls_ca=ca, labels={"rank": "1"},
                                    labels_from_environment=False)
            torchmon.Stat("reload.tls.fresh", [torchmon.COUNT], WINDOW, client=fresh).add(1.0)
            assert fresh.flush(10), fresh.errors()

            # A key that is not the certificate's is refused; the renewed
            # certificate stays.
            other_cert, other_key = make_certificate(tmpdir, "other", "server_ext", "ca")
            os.replace(other_key, key)
            log = hang_up(d, "the gRPC listeners' certificate read before stays in force")
            assert f"--tls-key {key}: the key does not belong to the certificate" in log, log
            time.sleep(1.5)  # past gRPC's next poll of its copies: nothing new to read
            assert shown_certificate(d.tcp_target, ca) == "renewed"
        finally:
            d.stop()
        # The daemon's private copies went with it.
        assert os.listdir(private_tmp) == []

"""The Python client against a torchmond that asks for credentials
(docs/security.md): a bearer token given as a file, directly or through the
environment, and TLS with a client certificate. Certificates are made with
the openssl command at test time."""

import datetime
import os
import tempfile
import time

import pytest

import torchmon
from certificates import make_certificate
from conftest import PYTHON_DIR, WINDOW_MS, Daemon, run_python

WINDOW = datetime.timedelta(milliseconds=WINDOW_MS)
TOKEN = "3f1c0a9e5b7d4c2a8e6f0b1d3c5a7e9f"


def write_secret(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


@pytest.fixture
def tmpdir_private():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-sec.") as tmpdir:
        yield tmpdir


@pytest.fixture
def token_daemon(tmpdir_private):
    token_file = write_secret(os.path.join(tmpdir_private, "token"), TOKEN + "\n")
    d = Daemon(tmpdir_private, "--auth-token-file", token_file)
    d.token_file = token_file
    d.ctl_flags = ["--token-file", token_file]
    try:
        yield d
    finally:
        d.stop()


def wait_for_error(client, needle, timeout=10.0):
    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen += client.errors()
        if any(needle in e for e in seen):
            break
        time.sleep(0.02)
    return seen


def client_for(daemon, **security):
    return torchmon.Client(target=daemon.target, labels={"rank": "0"},
                           labels_from_environment=False, **security)


def test_token_file_keyword_is_accepted(token_daemon):
    client = client_for(token_daemon, token_file=token_daemon.token_file)
    torchmon.Stat("py.secure", [torchmon.MEAN], WINDOW, client=client).add(1.0)
    assert client.flush(10)
    assert client.errors() == []
    assert [s["stat"] for s in token_daemon.series("py.secure")] == ["py.secure"]


def test_token_keyword_is_accepted(token_daemon):
    client = client_for(token_daemon, token=TOKEN)
    torchmon.Stat("py.direct", [torchmon.MEAN], WINDOW, client=client).add(1.0)
    assert client.flush(10)


def test_client_without_token_is_refused_and_says_why(token_daemon):
    client = client_for(token_daemon)
    torchmon.Stat("py.anonymous", [torchmon.MEAN], WINDOW, client=client).add(1.0)
    assert not client.flush(1.0)
    errors = wait_for_error(client, "UNAUTHENTICATED")
    assert any("bearer token" in e for e in errors), errors
    assert token_daemon.series("py.anonymous") == []


def test_token_file_from_the_environment_is_used(token_daemon):
    env = dict(os.environ, TORCHMON_TARGET=token_daemon.target,
               TORCHMON_TOKEN_FILE=token_daemon.token_file, TORCHMON_LABELS="job=pytest")
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    out = run_python(
        "import datetime, torchmon\n"
        "s = torchmon.Stat('py.env', [torchmon.MEAN], datetime.timedelta(seconds=1))\n"
        "s.add(1.0)\n"
        "assert torchmon.flush(10), torchmon.default_client().errors()\n", env)
    assert out.returncode == 0, out.stderr
    assert len(token_daemon.series("py.env")) == 1


def test_token_bound_for_another_host_in_clear_text_is_refused():
    client = torchmon.Client(target="192.0.2.1:7070", labels_from_environment=False, token=TOKEN)
    assert any("refusing to send the bearer token" in e for e in client.errors())


def test_tls_with_a_client_certificate(tmpdir_private):
    ca, _ = make_certificate(tmpdir_private, "ca", "ca_ext")
    server_cert, server_key = make_certificate(tmpdir_private, "server", "server_ext", "ca")
    client_cert, client_key = make_certificate(tmpdir_private, "client", "client_ext", "ca")
    d = Daemon(tmpdir_private, "--listen", "127.0.0.1:0", "--tls-cert", server_cert,
               "--tls-key", server_key, "--tls-client-ca", ca)
    try:
        client = torchmon.Client(target=d.tcp_target, labels={"rank": "0"},
                                 labels_from_environment=False, tls_ca=ca, tls_cert=client_cert,
                                 tls_key=client_key)
        torchmon.Stat("py.tls", [torchmon.MEAN], WINDOW, client=client).add(1.0)
        assert client.flush(10), client.errors()
        assert len(d.series("py.tls")) == 1

        without_certificate = torchmon.Client(target=d.tcp_target, labels={"rank": "1"},
                                              labels_from_environment=False, tls_ca=ca)
        torchmon.Stat("py.tls.anonymous", [torchmon.MEAN], WINDOW,
                      client=without_certificate).add(1.0)
        assert not without_certificate.flush(1.0)
        assert d.series("py.tls.anonymous") == []
    finally:
        d.stop()

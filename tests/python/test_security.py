"""The Python client against a torchmond that asks for credentials
(docs/security.md): a bearer token given as a file, directly or through the
environment, and TLS with a client certificate. Certificates are made with
the openssl command at test time."""

import datetime
import os
import re
import tempfile
import time

import grpc
import pytest

import torchmon
from certificates import make_certificate
from conftest import PYTHON_DIR, WINDOW_MS, Daemon, run_python
from torchmon_testing import ROOT

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


def rpcs_of(proto, service):
    """(path, client streams, server streams) of every rpc of `service` in `proto`."""
    with open(proto) as f:
        text = f.read()
    body = re.search(r"^service %s \{(.*?)^\}" % service, text, re.S | re.M).group(1)
    package = re.search(r"^package ([\w.]+);", text, re.M).group(1)
    return [(f"/{package}.{service}/{name}", bool(cs), bool(ss))
            for name, cs, ss in re.findall(
                r"^\s*rpc (\w+)\((stream )?\w+\) returns \((stream )?\w+\)", body, re.M)]


def code_of(channel, path, client_stream, server_stream, metadata):
    """The status (code, message) a call of `path` with an empty request
    ends with."""
    try:
        if client_stream:
            for _ in channel.stream_stream(path)(iter([]), metadata=metadata, timeout=10):
                pass
        elif server_stream:
            for _ in channel.unary_stream(path)(b"", metadata=metadata, timeout=1):
                pass
        else:
            channel.unary_unary(path)(b"", metadata=metadata, timeout=10)
        return grpc.StatusCode.OK, ""
    except grpc.RpcError as e:
        return e.code(), e.details()


@pytest.mark.parametrize("peer_labels", ["on", "off"])
def test_every_call_of_every_service_needs_the_token_on_every_listener(tmpdir_private,
                                                                       peer_labels):
    """The token is checked on the Unix socket whether gRPC accepts its
    connections (--peer-labels off: in the transport) or torchmond does
    (on: in the handlers, which gRPC serves without transport security),
    and on loopback TCP; for every rpc of the .proto, so that a method
    added later without the check fails here."""
    rpcs = (rpcs_of(os.path.join(ROOT, "proto", "torchmon", "v1", "torchmon.proto"), "Ingest")
            + rpcs_of(os.path.join(ROOT, "proto", "torchmon", "v1", "torchmon.proto"), "Query")
            + rpcs_of(os.path.join(ROOT, "proto", "grpc", "health", "v1", "health.proto"),
                      "Health"))
    assert len(rpcs) >= 10, rpcs
    token_file = write_secret(os.path.join(tmpdir_private, "token"), TOKEN + "\n")
    d = Daemon(tmpdir_private, "--auth-token-file", token_file, "--listen", "127.0.0.1:0",
               "--peer-labels", peer_labels)
    channels = {
        "unix": grpc.insecure_channel(d.target),
        "tcp": grpc.secure_channel(
            d.tcp_target, grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP)),
    }
    try:
        for where, channel in channels.items():
            refusals = []
            for path, client_stream, server_stream in rpcs:
                refusals.append(code_of(channel, path, client_stream, server_stream,
                                        [("authorization", "Bearer " + "0" * 32)]))
            # The first is checked; the others come within the second the
            # throttle then turns this peer away unchecked (which only the
            # check asked by the handlers does).
            assert refusals[0][0] == grpc.StatusCode.UNAUTHENTICATED, (where, refusals)
            for (path, _, _), (code, message) in zip(rpcs, refusals):
                assert (code == grpc.StatusCode.UNAUTHENTICATED and "bearer token" in message
                        or code == grpc.StatusCode.UNAVAILABLE
                        and "checks no token from" in message), (where, path, code, message)
            # With the token, the health check answers (a token never
            # accepted before waits for the throttle to pass).
            time.sleep(1.1)
            assert code_of(channel, "/grpc.health.v1.Health/Check", False, False,
                           [("authorization", "Bearer " + TOKEN)])[0] == grpc.StatusCode.OK, where
    finally:
        for channel in channels.values():
            channel.close()
        d.stop()

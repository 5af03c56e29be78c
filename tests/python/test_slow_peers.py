"""No idle or slow peer blocks a scrape (docs/security.md, "Slow and idle
peers"): a real torchmond, plain and with TLS, holds 256 connections that
say nothing, send half a request head, drip a body a byte a second, or stop
in the middle of a TLS handshake, and still answers /metrics, /healthz and
the live page, 20 scrapes each within a 10 s scrape timeout. Past the bound
per address the oldest waiting connections make room, counted."""

import os
import re
import socket
import ssl
import tempfile
import threading
import urllib.request

import pytest

from certificates import make_certificate
from conftest import Daemon
from test_security import write_secret

HELD = 256
ADDRESSES = [f"127.0.0.{10 + i}" for i in range(8)]  # 32 each: under the bound per address


@pytest.fixture
def private_dir():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-slow.") as tmpdir:
        yield tmpdir


def connect(daemon, source):
    host, port = daemon.metrics.rsplit(":", 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((source, 0))
    s.settimeout(10)
    s.connect((host, int(port)))
    return s


def client_hello_part():
    """The first half of a real TLS ClientHello."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(incoming, outgoing, server_hostname="localhost")
    with pytest.raises(ssl.SSLWantReadError):
        tls.do_handshake()
    hello = outgoing.read()
    return hello[:len(hello) // 2]


def hold(daemon, tls):
    """HELD connections of four kinds, spread over ADDRESSES; and a thread
    that drips a byte a second into a quarter of them until stopped."""
    held, dripping = [], []
    hello = client_hello_part() if tls else None
    for i in range(HELD):
        s = connect(daemon, ADDRESSES[i % len(ADDRESSES)])
        kind = i % 4
        if kind == 1:
            s.sendall(hello if tls else b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        elif kind == 2 and not tls:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 60000\r\n\r\n")
            dripping.append(s)
        elif kind == 3:
            s.sendall(b"GE" if not tls else hello[:5])
        held.append(s)
    stop = threading.Event()

    def drip():
        while not stop.wait(1.0):
            for s in dripping:
                try:
                    s.send(b"x")
                except OSError:
                    pass

    thread = threading.Thread(target=drip, daemon=True)
    thread.start()
    return held, stop, thread


def get(url, context=None):
    with urllib.request.urlopen(url, timeout=10, context=context) as r:
        return r.status, r.read().decode()


def metric(text, name):
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, name
    return float(found.group(1))


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls"])
def test_held_connections_leave_every_page_answering(private_dir, tls):
    flags, context, scheme = [], None, "http"
    if tls:
        make_certificate(private_dir, "ca", "ca_ext")
        make_certificate(private_dir, "server", "server_ext", "ca")
        config = write_secret(os.path.join(private_dir, "web.yml"),
                              "tls_server_config:\n  cert_file: server.pem\n"
                              "  key_file: server.key\n")
        flags = ["--web-config-file", config]
        context = ssl.create_default_context(cafile=os.path.join(private_dir, "ca.pem"))
        scheme = "https"
    d = Daemon(private_dir, *flags)
    held, stop, thread = hold(d, tls)
    try:
        base = f"{scheme}://{d.metrics}"
        for i in range(20):
            status, body = get(f"{base}/metrics", context)
            assert status == 200, i
            # Every held connection is still held: none was pushed out.
            assert metric(body, "torchmon_daemon_http_connections") >= HELD + 1, i
            assert get(f"{base}/healthz", context) == (200, "ok\n")
            status, page = get(f"{base}/", context)
            assert status == 200 and "<html" in page.lower()
        assert 'torchmon_daemon_http_connections_closed_total{reason="evicted"} 0' in body
    finally:
        stop.set()
        thread.join()
        for s in held:
            s.close()
        d.stop()


def test_past_the_bound_per_address_the_oldest_make_room_and_are_counted(private_dir):
    d = Daemon(private_dir)
    held = []
    try:
        # 200 from one address: 128 are held at most, the oldest go first.
        for _ in range(200):
            held.append(connect(d, "127.0.0.30"))
        status, body = get(f"http://{d.metrics}/metrics")
        assert status == 200
        evicted = float(re.search(
            r'^torchmon_daemon_http_connections_closed_total\{reason="evicted"\} (\S+)$',
            body, re.M).group(1))
        assert evicted >= 200 - 128, body
        # The first ones are the ones closed: a read sees the end at once.
        held[0].settimeout(10)
        assert held[0].recv(1) == b""
        # A scrape from that very address is still served.
        s = connect(d, "127.0.0.30")
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := s.recv(4096):
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n"), answer
        s.close()
    finally:
        for s in held:
            s.close()
        d.stop()

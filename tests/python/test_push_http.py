"""The push client's HTTP as receivers and networks have it (docs/push.md,
"How requests go"): a real torchmond pushing to receivers on loopback.

- every address of a name is tried within the deadline: the name's first
  address drops every SYN (a listener whose backlog is full), its second
  takes the request;
- a name lookup whose DNS server never answers is bounded by the endpoint's
  timeout and cut short at shutdown;
- HTTP_PROXY (absolute-form requests) and HTTPS_PROXY (CONNECT) are
  honoured, NO_PROXY too;
- one TLS connection carries every request while the receiver keeps it.

Names resolve through a hosts file and a resolv.conf the test writes,
bind-mounted over /etc's in a mount namespace of the daemon's own
(unshare -m): root only; skipped, saying so, elsewhere."""

import http.server
import os
import random
import re
import socket
import socketserver
import ssl
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from certificates import make_certificate
from torchmon_testing import TORCHMONCTL, Daemon, wait_for

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "support"))

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="a mount namespace of the daemon's own needs root")
STAT = "push.http"


class Receiver:
    """An HTTP/1.1 receiver (keep-alive, optionally TLS) on 127.0.0.1 that
    answers every POST 204 and counts requests and connections."""

    def __init__(self, context=None, port=0, host="127.0.0.1"):
        self.requests, self.connections = [], 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self):
                super().setup()
                with lock:
                    receiver.connections += 1

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:
                    receiver.requests.append((self.path, dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        lock = threading.Lock()
        self.lock = lock

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def get_request(self):
                sock, address = super().get_request()
                if context is not None:
                    sock = context.wrap_socket(sock, server_side=True)
                return sock, address

        self.server = Server((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def count(self):
        with self.lock:
            return len(self.requests), self.connections

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class Proxy:
    """A forward proxy on 127.0.0.1: CONNECT tunnels, and absolute-form
    requests relayed; every upstream connection goes to 127.0.0.1 at the
    port asked for (the names the daemon sees resolve in its namespace
    only). Keeps the request lines it got."""

    def __init__(self):
        self.lines = []
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(client,), daemon=True).start()

    def serve(self, client):
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(65536)
                if not chunk:
                    return
                head += chunk
            line = head.split(b"\r\n", 1)[0].decode()
            self.lines.append(line)
            method, target, _ = line.split(" ", 2)
            if method == "CONNECT":
                port = int(target.rsplit(":", 1)[1])
                upstream = socket.create_connection(("127.0.0.1", port))
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                rest = head.split(b"\r\n\r\n", 1)[1]
            else:
                hostport = re.match(r"http://([^/]+)", target).group(1)
                port = int(hostport.rsplit(":", 1)[1])
                upstream = socket.create_connection(("127.0.0.1", port))
                path = target[len("http://" + hostport):] or "/"
                rest = head.replace(target.encode(), path.encode(), 1)
            upstream.sendall(rest)
            self.pipe(client, upstream)

    @staticmethod
    def pipe(a, b):
        def one_way(src, dst):
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

        t = threading.Thread(target=one_way, args=(b, a), daemon=True)
        t.start()
        one_way(a, b)
        t.join(timeout=30)

    def stop(self):
        self.sock.close()


@pytest.fixture
def tmpdir():
    with tempfile.TemporaryDirectory(prefix="torchmon-push-http.") as d:
        yield d


def namespaced(tmpdir, hosts, nameserver="127.0.0.1"):
    """The wrapper that runs torchmond with `hosts` as /etc/hosts and
    `nameserver` in /etc/resolv.conf, in a mount namespace of its own."""
    hosts_file = os.path.join(tmpdir, "hosts")
    resolv_file = os.path.join(tmpdir, "resolv.conf")
    with open(hosts_file, "w") as f:
        f.write("127.0.0.1 localhost\n" + hosts)
    with open(resolv_file, "w") as f:
        f.write(f"nameserver {nameserver}\noptions timeout:30 attempts:2\n")
    script = (f'mount --bind {hosts_file} /etc/hosts && '
              f'mount --bind {resolv_file} /etc/resolv.conf && exec "$@"')
    return ("unshare", "--mount", "--", "sh", "-c", script, "sh")


def push(daemon, *values):
    subprocess.run([TORCHMONCTL, "--target", daemon.target, "push", STAT,
                    *[str(v) for v in values], "--window", "500ms", "--agg", "mean"],
                   check=True, capture_output=True, timeout=30)


def export_value(daemon, name):
    found = re.search(rf"^{name}{{[^}}]*}} (\S+)$", daemon.scrape(), re.M)
    return float(found.group(1)) if found else None


@needs_root
def test_an_address_that_drops_every_syn_does_not_keep_the_next_from_being_tried(tmpdir):
    # The receiver on 127.0.0.2; on 127.0.0.1, at the same port, a listener
    # whose backlog is full: SYNs are dropped, so a connect there neither
    # succeeds nor fails before its timeout. The resolver sorts 127.0.0.1
    # first (the longest prefix shared with the source address).
    # The black hole's port first, then the receiver at that port on
    # 127.0.0.2; another run beside this one may hold a port on either.
    for _ in range(20):
        black_hole = socket.socket()
        black_hole.bind(("127.0.0.1", 0))
        try:
            receiver = Receiver(port=black_hole.getsockname()[1], host="127.0.0.2")
            break
        except OSError:
            black_hole.close()
    else:
        pytest.fail("no port free on both 127.0.0.1 and 127.0.0.2")
    black_hole.listen(0)
    fillers = []
    for _ in range(3):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", receiver.port))
        fillers.append(s)
    wrapper = namespaced(tmpdir, "127.0.0.2 receiver.test\n127.0.0.1 receiver.test\n")
    order = subprocess.run([*wrapper, "getent", "ahostsv4", "receiver.test"],
                           capture_output=True, text=True, timeout=30).stdout.split()
    assert order[0] == "127.0.0.1", order  # the black hole is tried first
    d = Daemon(tmpdir, "--remote-write-url",
               f"http://receiver.test:{receiver.port}/api/v1/write timeout=6s", wrapper=wrapper)
    try:
        push(d, 1, 2, 3)
        assert wait_for(lambda: receiver.count()[0] >= 1, 30), d.read_stderr()
    finally:
        d.stop()
        receiver.stop()
        black_hole.close()
        for s in fillers:
            s.close()


@needs_root
def test_a_dns_server_that_never_answers_costs_the_timeout_and_no_more_at_shutdown(tmpdir):
    # A DNS server that reads nothing and answers nothing, at an address of
    # this run's own (another run beside this one has its own).
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for _ in range(20):
        nameserver = f"127.{random.randint(1, 254)}.{random.randint(1, 254)}.9"
        try:
            silent.bind((nameserver, 53))
            break
        except OSError:
            continue
    else:
        pytest.fail("no free loopback address for a DNS server")
    wrapper = namespaced(tmpdir, "", nameserver=nameserver)
    try:
        # glibc alone would wait 30 s x 2 tries: the endpoint's 1.5 s bounds it.
        d = Daemon(tmpdir, "--remote-write-url",
                   "http://nowhere.test:9/api/v1/write timeout=1500ms", wrapper=wrapper)
        try:
            push(d, 1)
            assert wait_for(lambda: "timed out after 1500 ms" in d.read_stderr(), 30), (
                d.read_stderr())
            assert "Resolving" in d.read_stderr(), d.read_stderr()
        finally:
            d.stop()
        # A lookup with a minute to go is cut short at shutdown: the daemon
        # ends within its 1 s flush time, not when the lookup gives up.
        d = Daemon(tmpdir, "--remote-write-url",
                   "http://nowhere.test:9/api/v1/write timeout=60s", "--push-flush-timeout", "1s",
                   wrapper=wrapper)
        try:
            push(d, 1)
            time.sleep(1.5)  # its window closed, its lookup under way
            d.proc.terminate()
            status = d.proc.wait(timeout=30)  # well short of the lookup's 60 s
            assert status == 0, d.read_stderr()
            assert "unsent" in d.read_stderr(), d.read_stderr()
        finally:
            d.stop()
    finally:
        silent.close()


@needs_root
@pytest.mark.parametrize("scheme", ["http", "https"])
def test_the_proxy_of_the_environment_carries_the_push_and_no_proxy_bypasses_it(
        tmpdir, scheme, monkeypatch):
    context = None
    options = ""
    if scheme == "https":
        make_certificate(tmpdir, "ca", "ca_ext")
        make_certificate(tmpdir, "server", "server_ext", "ca")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.path.join(tmpdir, "server.pem"),
                                os.path.join(tmpdir, "server.key"))
        # The certificate names localhost: verified as that name.
        options = f" ca_file={os.path.join(tmpdir, 'ca.pem')} server_name=localhost"
    receiver = Receiver(context)
    proxy = Proxy()
    variable = "HTTPS_PROXY" if scheme == "https" else "HTTP_PROXY"
    monkeypatch.setenv(variable, f"http://127.0.0.1:{proxy.port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    url = f"{scheme}://receiver.test:{receiver.port}/api/v1/write{options}"
    hosts = "127.0.0.1 receiver.test direct.test\n"
    d = Daemon(tmpdir, "--remote-write-url", url, wrapper=namespaced(tmpdir, hosts))
    try:
        push(d, 1, 2)
        assert wait_for(lambda: receiver.count()[0] >= 1, 30), d.read_stderr()
        expected = (f"CONNECT receiver.test:{receiver.port} HTTP/1.1" if scheme == "https" else
                    f"POST http://receiver.test:{receiver.port}/api/v1/write HTTP/1.1")
        assert expected in proxy.lines, proxy.lines
    finally:
        d.stop()
    # NO_PROXY names the host: straight to it.
    seen = len(proxy.lines)
    monkeypatch.setenv("NO_PROXY", "example.org,.test")
    d = Daemon(tmpdir, "--remote-write-url", url.replace("receiver.test", "direct.test"),
               wrapper=namespaced(tmpdir, hosts))
    try:
        before = receiver.count()[0]
        push(d, 3)
        assert wait_for(lambda: receiver.count()[0] > before, 30), d.read_stderr()
        assert len(proxy.lines) == seen, proxy.lines
    finally:
        d.stop()
        receiver.stop()
        proxy.stop()


def test_one_tls_connection_carries_every_request(tmpdir):
    make_certificate(tmpdir, "ca", "ca_ext")
    make_certificate(tmpdir, "server", "server_ext", "ca")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(os.path.join(tmpdir, "server.pem"), os.path.join(tmpdir, "server.key"))
    receiver = Receiver(context)
    d = Daemon(tmpdir, "--remote-write-url",
               f"https://127.0.0.1:{receiver.port}/api/v1/write "
               f"ca_file={os.path.join(tmpdir, 'ca.pem')}")
    try:
        for i in range(4):
            push(d, i)
            time.sleep(0.6)  # each in a window of its own: a request each
        assert wait_for(lambda: receiver.count()[0] >= 4, 30), d.read_stderr()
        requests, connections = receiver.count()
        assert connections == 1, (requests, connections)
        assert export_value(d, "torchmon_export_connections_total") == 1
        assert export_value(d, "torchmon_export_requests_sent_total") >= 4
    finally:
        d.stop()
        receiver.stop()

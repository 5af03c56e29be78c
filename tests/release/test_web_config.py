"""/metrics over TLS with bcrypt-hashed basic auth (--web-config-file, the
exporter toolkit's format), from the release tarball's torchmond and a real
Prometheus (the Debian-linked build's TLS is tests/python/test_web_config.py).

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release/test_web_config.py

A real Prometheus (Debian's, on this host) scrapes the daemon from its own
scrape configuration (scheme https, tls_config, basic_auth) with the right
credentials, a wrong password and a certificate the daemon's CA did not
sign; then the web configuration is replaced and the daemon sent SIGHUP
while Prometheus keeps scraping and a client keeps sending. Certificates
come from the openssl command; hashes from Python's crypt (libxcrypt), not
from torchmond's own bcrypt."""

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import base64
import http.client
import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.11 still has it
    import crypt

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "prometheus"))
from certificates import make_certificate  # noqa: E402
from torchmond import LaunchedDaemon, wait_for  # noqa: E402

RELEASE_DIR = os.environ.get("TORCHMON_RELEASE_DIR")
if not RELEASE_DIR:
    pytest.skip("TORCHMON_RELEASE_DIR is not set: point it at the folder "
                "deploy/release/build.sh filled", allow_module_level=True)

from prom_cluster import Prometheus  # noqa: E402  (needs PyYAML, as tests/prometheus)

PASSWORD = "correct horse battery staple"
NEW_PASSWORD = "a password for after the reload"


def bcrypt(password, cost=10):
    return crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2 ** cost))


@pytest.fixture(scope="module")
def binaries(release_binaries):
    """torchmond and torchmonctl from the release tarball (conftest.py)."""
    return release_binaries


def write_private(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return str(path)


def web_config(directory, server, users, client_auth="RequireAndVerifyClientCert"):
    lines = ["tls_server_config:",
             f"  cert_file: {server}.pem     # relative to this file",
             f"  key_file: {server}.key",
             f"  client_auth_type: {client_auth}",
             "  client_ca_file: ca.pem",
             "basic_auth_users:"]
    lines += [f"  {user}: {hashed}" for user, hashed in users.items()]
    return write_private(os.path.join(directory, "web.yml"), "\n".join(lines) + "\n")


def scrape_job(name, directory, cert, password):
    return f"""
  - job_name: {name}
    scheme: https
    metrics_path: /metrics
    tls_config:
      ca_file: {directory}/ca.pem
      cert_file: {directory}/{cert}.pem
      key_file: {directory}/{cert}.key
      server_name: localhost
    basic_auth:
      username: prometheus
      password: "{password}"
    static_configs:
      - targets: ["{{target}}"]
"""


# The test's own requests come from another loopback address than
# Prometheus's, whose wrong-password job keeps 127.0.0.1 throttled.
SOURCE = ("127.0.0.2", 0)


def client_context(directory, cert):
    context = ssl.create_default_context(cafile=os.path.join(directory, "ca.pem"))
    context.load_cert_chain(os.path.join(directory, cert + ".pem"),
                            os.path.join(directory, cert + ".key"))
    return context


def handshake_cn(address, directory, cert="client"):
    """The CN of the certificate the daemon shows a new connection."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5, source_address=SOURCE) as raw:
        with client_context(directory, cert).wrap_socket(raw, server_hostname="localhost") as tls:
            subject = dict(x[0] for x in tls.getpeercert()["subject"])
            return subject["commonName"]


def https_get(address, directory, cert, user, password, path="/metrics"):
    """(status, body) of an HTTPS GET with a client certificate and basic auth."""
    host, port = address.rsplit(":", 1)
    connection = http.client.HTTPSConnection(host, int(port), timeout=10, source_address=SOURCE,
                                             context=client_context(directory, cert))
    try:
        connection.request("GET", path, headers={"Authorization": "Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode()})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def metric(body, name, **labels):
    for line in body.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            if all(f'{k}="{v}"' in line for k, v in labels.items()):
                return float(line.rsplit(" ", 1)[1])
    return None


def test_prometheus_scrapes_over_tls_with_basic_auth_and_a_reload_swaps_both(binaries,
                                                                             tmp_path):
    d = str(tmp_path)
    make_certificate(d, "ca", "ca_ext")
    make_certificate(d, "server", "server_ext", "ca")
    make_certificate(d, "renewed", "server_ext", "ca")
    make_certificate(d, "client", "client_ext", "ca")
    make_certificate(d, "other-ca", "ca_ext")
    make_certificate(d, "stranger", "client_ext", "other-ca")
    config = web_config(d, "server", {"prometheus": bcrypt(PASSWORD)})
    socket_path = os.path.join(d, "torchmond.sock")
    stderr = open(os.path.join(d, "torchmond.stderr"), "w+")
    daemon = LaunchedDaemon(
        [binaries["torchmond"], "--listen", "unix://" + socket_path, "--metrics-listen",
         "127.0.0.1:0", "--grace", "100ms", "--web-config-file", config], stderr=stderr,
        timeout=30)
    prometheus = None
    try:
        address = daemon.ready.metrics

        def push(*values):
            subprocess.run([binaries["torchmonctl"], "--target", "unix://" + socket_path,
                            "push", "release.tls", *map(str, values), "--agg", "count",
                            "--window", "1s"], check=True, capture_output=True, timeout=30)

        push(1, 2, 3)
        # Plain HTTP on the TLS port is not served.
        with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
            urllib.request.urlopen(f"http://{address}/metrics", timeout=5).read()
        assert handshake_cn(address, d) == "server"

        prom_dir = os.path.join(d, "prometheus")
        os.mkdir(prom_dir)
        prom_config = os.path.join(prom_dir, "prometheus.yml")
        with open(prom_config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:")
            f.write(scrape_job("good", d, "client", PASSWORD).replace("{target}", address))
            f.write(scrape_job("wrong_password", d, "client", "guess").replace("{target}",
                                                                                address))
            f.write(scrape_job("untrusted_cert", d, "stranger", PASSWORD).replace("{target}",
                                                                                  address))
        prometheus = Prometheus(prom_config, prom_dir)

        def value(expr):
            result = prometheus.query(expr)
            return result[0][1] if result else None

        def targets():
            return {t["labels"]["job"]: t for t in prometheus.api("targets")["activeTargets"]}

        # Prometheus holds the samples, through TLS and basic auth.
        assert wait_for(lambda: value(
            'torchmon_samples_accepted_total{job="good",stat="release.tls"}') == 3, 30), (
            targets(), daemon.read_stderr())
        assert wait_for(lambda: all(t["lastScrape"] != "0001-01-01T00:00:00Z"
                                    for t in targets().values()), 30), targets()
        seen = targets()
        assert seen["good"]["health"] == "up", seen["good"]
        assert seen["wrong_password"]["health"] == "down", seen["wrong_password"]
        # 401, then 429 while the address is throttled (docs/security.md,
        # "Throttling"); the good job from the same address is not slowed.
        assert re.search(r"HTTP status (401|429)", seen["wrong_password"]["lastError"]), (
            seen["wrong_password"])
        assert seen["untrusted_cert"]["health"] == "down", seen["untrusted_cert"]
        # Refused in the TLS handshake, never an HTTP status. With TLS 1.3 the
        # client's side of the handshake ends before the daemon has checked
        # its certificate, so Go reports the refusal where it meets it: the
        # daemon's alert on its first read ("tls: bad certificate"), or, when
        # the daemon has already closed the connection, its request's write
        # ("broken pipe", "connection reset by peer"). Which one is a race
        # (the write, once, with tests/release's files run side by side); the
        # daemon's own count of refused handshakes, below, says it was the
        # certificate.
        error = seen["untrusted_cert"]["lastError"]
        assert "HTTP status" not in error and re.search(
            r"tls|certificate|broken pipe|connection reset by peer", error), error
        assert value('up{job="wrong_password"}') == 0 and value('up{job="untrusted_cert"}') == 0
        # The wrong password was counted; the bad certificate never reached
        # HTTP, and was counted as a refused handshake.
        assert wait_for(lambda: (value('torchmon_daemon_scrapes_unauthorized_total{job="good"}')
                                 or 0) >= 1, 15)
        assert wait_for(lambda: (value('torchmon_daemon_metrics_tls_refused_total{job="good"}')
                                 or 0) >= 1, 15)

        # The reload: a renewed certificate and a new password. A client keeps
        # sending while it happens.
        web_config(d, "renewed", {"prometheus": bcrypt(NEW_PASSWORD)})
        daemon.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: handshake_cn(address, d) == "renewed", 10), daemon.read_stderr()
        push(4, 5)
        assert https_get(address, d, "client", "prometheus", NEW_PASSWORD)[0] == 200
        assert https_get(address, d, "client", "prometheus", PASSWORD)[0] == 401
        assert wait_for(lambda: metric(https_get(address, d, "client", "prometheus",
                                                 NEW_PASSWORD)[1],
                                       "torchmon_samples_accepted_total",
                                       stat="release.tls") == 5, 15)
        assert "re-read --web-config-file" in daemon.read_stderr()

        # A bad new configuration (a key that is not the certificate's) is
        # refused, said so, and the one in force stays.
        web_config(d, "renewed", {"prometheus": bcrypt(NEW_PASSWORD)})
        with open(os.path.join(d, "renewed.key"), "w") as key, \
                open(os.path.join(d, "server.key")) as other:
            key.write(other.read())
        daemon.proc.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "the web configuration read before stays in force"
                        in daemon.read_stderr(), 10), daemon.read_stderr()
        assert "does not belong to the certificate" in daemon.read_stderr()
        assert handshake_cn(address, d) == "renewed"
        assert https_get(address, d, "client", "prometheus", NEW_PASSWORD)[0] == 200
    finally:
        if prometheus is not None:
            prometheus.stop()
        status = daemon.stop(timeout=10)
        stderr.close()
    assert status == 0

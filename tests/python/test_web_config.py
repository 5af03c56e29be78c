"""--web-config-file, the exporter toolkit's web configuration, with this
build's torchmond (docs/security.md, "/metrics over TLS"): bcrypt-hashed
basic_auth_users over plain HTTP, their reload, the refusals at start, and
a TLS scrape. TLS with a real Prometheus is tests/release/test_web_config.py.
Hashes come from Python's crypt module (libxcrypt), never from torchmond's
own bcrypt."""

import os
import socket
import ssl
import subprocess
import tempfile
import urllib.request

import pytest

from certificates import make_certificate
from conftest import Daemon
from test_reload import hang_up, scrape, scrape_status
from test_security import write_secret
from torchmon_testing import TORCHMOND
from torchmond import wait_for

# Python's crypt module (libxcrypt) in Debian's plain interpreter: the
# asan-ubsan tree runs these tests in a sanitized one
# (tests/sanitizers/python_main.cc), where AddressSanitizer's crypt
# interceptor crashes importing the module.
MAKE_HASH = """import sys, warnings
warnings.simplefilter("ignore", DeprecationWarning)
import crypt
print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=2 ** int(sys.argv[2]))))
"""


def bcrypt(password, cost=8):
    out = subprocess.run(["/usr/bin/python3", "-c", MAKE_HASH, password, str(cost)],
                         capture_output=True, text=True, timeout=30, check=True)
    return out.stdout.strip()


@pytest.fixture
def private_dir():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-web.") as tmpdir:
        yield tmpdir


def refusal(*flags):
    """torchmond's exit status and stderr when it refuses to start."""
    proc = subprocess.run([TORCHMOND, "--listen", "unix:///nonexistent/torchmond.sock",
                           "--metrics-listen", "127.0.0.1:0", *flags],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode != 0, proc.stdout
    return proc.stderr


def test_hashed_users_are_asked_for_and_a_reload_replaces_them(private_dir):
    config = write_secret(os.path.join(private_dir, "web.yml"),
                          f"basic_auth_users:\n  prometheus: {bcrypt('first pw')}\n"
                          f"  'grafana agent': {bcrypt('agent pw')}\n")
    d = Daemon(private_dir, "--web-config-file", config)
    try:
        assert scrape_status(d, "prometheus:first pw") == 200
        assert scrape_status(d, "grafana agent:agent pw") == 200
        # From here the address is throttled: only credentials accepted
        # before pass until the backoff ends.
        assert scrape_status(d, "prometheus:agent pw") == 401
        status, body = scrape(d, "prometheus:first pw")
        assert status == 200
        assert "torchmon_daemon_scrapes_unauthorized_total 1" in body, body[-3000:]

        write_secret(config, f"basic_auth_users:\n  prometheus: {bcrypt('second pw')}\n")
        log = hang_up(d, "re-read --web-config-file")
        assert f"re-read --web-config-file {config}: 1 user in force" in log
        # A reload forgets what was accepted, the throttle does not: 429
        # until the backoff ends.
        assert wait_for(lambda: scrape_status(d, "prometheus:second pw") == 200, 5)
        assert scrape_status(d, "prometheus:first pw") == 401
        assert scrape_status(d, "grafana agent:agent pw") == 429

        # A bad file is refused and the users in force stay.
        write_secret(config, "basic_auth_users:\n  prometheus: not-a-hash\n")
        log = hang_up(d, "the web configuration read before stays in force")
        assert "basic_auth_users.prometheus" in log and "not-a-hash" not in log
        assert scrape_status(d, "prometheus:second pw") == 200
        # So is one that would add TLS: that needs a restart.
        make_certificate(private_dir, "ca", "ca_ext")
        make_certificate(private_dir, "server", "server_ext", "ca")
        write_secret(config, "tls_server_config:\n  cert_file: server.pem\n"
                             f"  key_file: server.key\nbasic_auth_users:\n  prometheus: {bcrypt('x')}\n")
        log = hang_up(d, "the web configuration read before stays in force")
        assert "adds or removes tls_server_config or basic_auth_users" in log, log
        assert scrape_status(d, "prometheus:second pw") == 200
    finally:
        d.stop()


def test_this_build_serves_tls_and_nothing_in_clear(private_dir):
    """The daemon's own HTTP server speaks TLS with the OpenSSL it links, in
    every build: a client that trusts the CA scrapes; one that speaks plain
    HTTP to the TLS port gets no scrape."""
    make_certificate(private_dir, "ca", "ca_ext")
    make_certificate(private_dir, "server", "server_ext", "ca")
    config = write_secret(os.path.join(private_dir, "web.yml"),
                          "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n")
    d = Daemon(private_dir, "--web-config-file", config)
    try:
        context = ssl.create_default_context(cafile=os.path.join(private_dir, "ca.pem"))
        with urllib.request.urlopen(f"https://{d.metrics}/metrics", context=context,
                                    timeout=10) as r:
            assert r.status == 200
            assert "torchmon_daemon_build_info" in r.read().decode()
        with socket.create_connection(d.metrics.rsplit(":", 1), timeout=10) as s:
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            try:
                while chunk := s.recv(65536):
                    answer += chunk
            except (ConnectionResetError, socket.timeout):
                pass
            assert b"torchmon_daemon_build_info" not in answer, answer[:200]
    finally:
        d.stop()


def test_bad_configurations_are_refused_at_start_naming_the_problem(private_dir):
    unknown = write_secret(os.path.join(private_dir, "unknown.yml"),
                           "tls_server_config:\n  cert_file: a\n  key_file: b\n"
                           "  cipher_suites: x\n")
    assert "line 4: tls_server_config.cipher_suites is not supported" in refusal(
        "--web-config-file", unknown)

    plain = write_secret(os.path.join(private_dir, "plain.yml"),
                         "basic_auth_users:\n  prometheus: hunter2\n")
    stderr = refusal("--web-config-file", plain)
    assert "basic_auth_users.prometheus" in stderr and "hunter2" not in stderr, stderr

    readable = os.path.join(private_dir, "readable.yml")
    with open(readable, "w") as f:
        f.write(f"basic_auth_users:\n  prometheus: {bcrypt('pw')}\n")
    os.chmod(readable, 0o644)
    assert "chmod 600" in refusal("--web-config-file", readable)

    users = write_secret(os.path.join(private_dir, "users"), "prometheus:pw\n")
    hashed = write_secret(os.path.join(private_dir, "hashed.yml"),
                          f"basic_auth_users:\n  prometheus: {bcrypt('pw')}\n")
    assert "keep one list of users" in refusal("--web-config-file", hashed,
                                               "--metrics-auth-file", users)

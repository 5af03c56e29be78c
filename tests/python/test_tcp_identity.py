"""Who a TCP client is, with --peer-labels on (docs/security.md, "Who sees
what"): the name of the token it presents ("NAME TOKEN" lines of
--auth-token-file), else the common name of its verified client
certificate. That name is its `user` label, what it may see in queries, and
whose jobs it may label, as a Unix socket's user is. A Unix client needs no
token then: the socket's mode and group admit it and the kernel names it.
"""

import datetime
import json
import os
import pwd
import subprocess
import tempfile

import pytest

import torchmon
from conftest import TORCHMONCTL, WINDOW_MS, Daemon
from certificates import make_certificate
from test_security import write_secret

WINDOW = datetime.timedelta(milliseconds=WINDOW_MS)
ALICE = "a1ice0a9e5b7d4c2a8e6f0b1d3c5a7e9"
ANYONE = "0000aaaa5b7d4c2a8e6f0b1d3c5a7e9f"
ROOT = pwd.getpwuid(os.getuid()).pw_name


@pytest.fixture
def private_dir():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-id.") as tmpdir:
        yield tmpdir


def send(stat, **client_args):
    client = torchmon.Client(labels={"job": stat}, labels_from_environment=False, **client_args)
    s = torchmon.Stat(stat, [torchmon.MEAN], WINDOW, client=client)
    s.add(1.0)
    s.add(3.0)
    assert client.flush(10), client.errors()
    return client


def ctl(target, *args, **files):
    flags = [f"--{key.replace('_', '-')}={value}" for key, value in files.items()]
    out = subprocess.run([TORCHMONCTL, "--target", target, "--json", *flags, *args],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def stats_seen(target, **files):
    return sorted(s["stat"] for s in ctl(target, "series", **files)["series"])


def test_a_named_token_names_its_tcp_client(private_dir):
    tokens = write_secret(os.path.join(private_dir, "tokens"),
                          f"# alice's jobs\nalice {ALICE}\n{ANYONE}\n")
    d = Daemon(private_dir, "--peer-labels", "on", "--listen", "127.0.0.1:0",
               "--auth-token-file", tokens)
    try:
        send("tcp.alice", target=d.tcp_target, token=ALICE)
        send("tcp.anyone", target=d.tcp_target, token=ANYONE)
        # On the socket the token admits and the kernel names.
        send("unix.root", target=d.target, token=ANYONE)
        alice_file = write_secret(os.path.join(private_dir, "alice"), ALICE + "\n")
        anyone_file = write_secret(os.path.join(private_dir, "anyone"), ANYONE + "\n")
        d.ctl_flags = ["--token-file", anyone_file]
        users = {s["stat"]: s["labels"].get("user") for s in d.ctl("series")["series"]}
        assert users == {"tcp.alice": "alice", "tcp.anyone": None, "unix.root": ROOT}, users

        assert stats_seen(d.tcp_target, token_file=alice_file) == ["tcp.alice"]
        assert stats_seen(d.tcp_target, token_file=anyone_file) == ["tcp.anyone"]
        # root: admin, whichever token admits it.
        assert stats_seen(d.target, token_file=anyone_file) == ["tcp.alice", "tcp.anyone",
                                                                 "unix.root"]

        # alice's job is hers while her stream is open: not for the unnamed token.
        held = torchmon.Client(target=d.tcp_target, token=ALICE, labels={"job": "train-a"},
                               labels_from_environment=False)
        torchmon.Stat("tcp.held", [torchmon.MEAN], WINDOW, client=held).add(1.0)
        assert held.flush(10), held.errors()
        other = torchmon.Client(target=d.tcp_target, token=ANYONE, labels={"job": "train-a"},
                                labels_from_environment=False)
        torchmon.Stat("tcp.taken", [torchmon.MEAN], WINDOW, client=other).add(1.0)
        other.flush(10)
        assert any('job "train-a" belongs to user "alice"' in e for e in other.errors()), \
            other.errors()
        # A token is still needed, over TCP and on the socket.
        for target in (d.tcp_target, d.target):
            refused = subprocess.run([TORCHMONCTL, "--target", target, "series"],
                                     capture_output=True, text=True, timeout=30)
            assert refused.returncode != 0 and "bearer token" in refused.stderr, refused.stderr
    finally:
        d.stop()


def test_a_client_certificate_names_its_tcp_client(private_dir):
    ca, _ = make_certificate(private_dir, "ca", "ca_ext")
    server_cert, server_key = make_certificate(private_dir, "server", "server_ext", "ca")
    cert, key = make_certificate(private_dir, "trainer-7", "client_ext", "ca")
    d = Daemon(private_dir, "--peer-labels", "on", "--listen", "127.0.0.1:0",
               "--tls-cert", server_cert, "--tls-key", server_key, "--tls-client-ca", ca)
    try:
        send("tls.trainer", target=d.tcp_target, tls_ca=ca, tls_cert=cert, tls_key=key)
        [series] = d.series("tls.trainer")
        assert series["labels"]["user"] == "trainer-7", series
        seen = ctl(d.tcp_target, "series", tls_ca=ca, tls_cert=cert, tls_key=key)["series"]
        assert [s["stat"] for s in seen] == ["tls.trainer"], seen
    finally:
        d.stop()

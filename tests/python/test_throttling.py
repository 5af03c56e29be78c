"""Failed logins to /metrics and failed gRPC token checks are slowed per
peer (docs/security.md, "Throttling"): a loop of bad clients from one
address gets its credentials checked only a handful of times, is answered
429 (HTTP) or UNAVAILABLE (gRPC) unchecked otherwise, adds nothing to the
log, and good clients are served every time meanwhile: a scraper from
another address (127.0.0.2, on the same loopback); a gRPC client on the
Unix socket (its peer is its user, not an address); and one on the bad
loop's own address whose token was accepted before.

The loop is bounded by count; what it may achieve is bounded by the time it
took (the backoff doubles from 1 s: k checks need 2^(k-1)-1 s), so the
assertions hold on a slow machine as on a fast one.
"""

import base64
import http.client
import math
import os
import tempfile
import time

import grpc

from conftest import Daemon
from test_security import TOKEN, write_secret

GOOD = "prometheus:s3cret"


def get(daemon, user_password, source="127.0.0.1"):
    host, port = daemon.metrics.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=10,
                                            source_address=(source, 0))
    try:
        connection.request("GET", "/metrics", headers={
            "Authorization": "Basic " + base64.b64encode(user_password.encode()).decode()})
        response = connection.getresponse()
        return response.status, response.read().decode()
    finally:
        connection.close()


def test_a_loop_of_bad_logins_is_throttled_and_slows_nobody_else():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-throttle.") as tmpdir:
        users = write_secret(os.path.join(tmpdir, "users"), GOOD + "\n")
        d = Daemon(tmpdir, "--metrics-auth-file", users)
        try:
            log_before = d.read_stderr().count("\n")
            statuses, good = [], []
            start = time.monotonic()
            for attempt in range(300):
                statuses.append(get(d, f"prometheus:guess-{attempt}")[0])
                if attempt % 30 == 0:
                    good.append(get(d, GOOD, source="127.0.0.2")[0])
            elapsed = time.monotonic() - start
            assert set(statuses) <= {401, 429}, statuses
            checked = statuses.count(401)
            # k checks need at least 1 + 2 + ... + 2^(k-2) s between the first and the last.
            assert 1 <= checked <= 1 + math.log2(elapsed + 1) + 1, (checked, elapsed)
            assert statuses.count(429) == 300 - checked
            assert good == [200] * 10, good
            # Counted, not logged.
            status, body = get(d, GOOD, source="127.0.0.2")
            assert status == 200
            assert f"torchmon_daemon_scrapes_throttled_total {300 - checked}\n" in body
            assert f"torchmon_daemon_scrapes_unauthorized_total {checked}\n" in body
            assert d.read_stderr().count("\n") - log_before <= 1, d.read_stderr()
        finally:
            d.stop()


HEALTH_CHECK = "/grpc.health.v1.Health/Check"


def health_check(channel, token):
    """The code of a grpc.health.v1 Check of the whole daemon (its request,
    service "", is zero bytes on the wire) with `token` as bearer token."""
    call = channel.unary_unary(HEALTH_CHECK)
    try:
        call(b"", metadata=[("authorization", f"Bearer {token}")], timeout=10)
        return grpc.StatusCode.OK
    except grpc.RpcError as e:
        return e.code()


def test_a_loop_of_bad_tokens_is_throttled_per_peer_and_slows_nobody_else():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest-throttle.") as tmpdir:
        tokens = write_secret(os.path.join(tmpdir, "tokens"), f"alice {TOKEN}\n")
        d = Daemon(tmpdir, "--auth-token-file", tokens, "--listen", "127.0.0.1:0",
                   "--peer-labels", "on")
        tcp = grpc.secure_channel(d.tcp_target,
                                  grpc.local_channel_credentials(grpc.LocalConnectionType.LOCAL_TCP))
        unix = grpc.insecure_channel(d.target)
        try:
            # The good TCP client was there first: its token is one accepted before.
            assert health_check(tcp, TOKEN) == grpc.StatusCode.OK
            log_before = d.read_stderr().count("\n")
            codes, good_tcp, good_unix = [], [], []
            start = time.monotonic()
            for attempt in range(300):
                codes.append(health_check(tcp, f"guess-{attempt:032d}"))
                if attempt % 30 == 0:
                    good_tcp.append(health_check(tcp, TOKEN))
                    good_unix.append(health_check(unix, TOKEN))
            elapsed = time.monotonic() - start
            assert set(codes) <= {grpc.StatusCode.UNAUTHENTICATED,
                                  grpc.StatusCode.UNAVAILABLE}, codes
            checked = codes.count(grpc.StatusCode.UNAUTHENTICATED)
            # 5 failures in a row are tolerated; then k more checks need at
            # least 1 + 2 + ... + 2^(k-2) s between the first and the last.
            assert 6 <= checked <= 5 + 1 + math.log2(elapsed + 1) + 1, (checked, elapsed)
            assert codes.count(grpc.StatusCode.UNAVAILABLE) == 300 - checked
            assert good_tcp == [grpc.StatusCode.OK] * 10, good_tcp
            assert good_unix == [grpc.StatusCode.OK] * 10, good_unix
            # A bad token on the Unix socket is checked: its peer (the user)
            # is not the throttled address.
            assert health_check(unix, "x" * 32) == grpc.StatusCode.UNAUTHENTICATED
            # Counted; logged at most once more (the log is rate-limited).
            body = d.scrape()
            assert f"torchmon_daemon_rpcs_throttled_total {300 - checked}\n" in body
            assert f"torchmon_daemon_rpcs_unauthenticated_total {checked + 1}\n" in body
            new_lines = d.read_stderr().splitlines()[log_before:]
            assert len(new_lines) <= 2, new_lines
            # The refusal names the peer, never the token sent.
            assert any("ipv4:127.0.0.1" in line for line in new_lines), new_lines
            assert not any("guess-" in line for line in new_lines), new_lines
        finally:
            tcp.close()
            unix.close()
            d.stop()

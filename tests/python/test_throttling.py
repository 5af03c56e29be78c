"""Failed logins to /metrics are slowed per address (docs/security.md,
"Throttling"): a loop of bad clients from one address gets its credentials
checked only a handful of times, is answered 429 unchecked otherwise, adds
nothing to the log, and a good scraper from another address (127.0.0.2, on
the same loopback) is served every time meanwhile.

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

from conftest import Daemon
from test_security import write_secret

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

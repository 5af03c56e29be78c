"""The ready line as the Python launcher reads it (tests/support/torchmond.py):
the same cases as tests/unit/support/daemon_launch_test.cc, so that C++ and
Python read it by one rule, and a real daemon's line."""

import pytest

import torchmon_testing  # noqa: F401  (puts tests/support on sys.path)
from torchmond import parse_ready_line, wait_for


def test_names_every_grpc_address_in_order_and_the_metrics_listener():
    ready = parse_ready_line(
        "torchmond ready grpc=unix:///run/t/torchmond.sock,127.0.0.1:7070 metrics=127.0.0.1:9464\n")
    assert ready.grpc == ["unix:///run/t/torchmond.sock", "127.0.0.1:7070"]
    assert ready.unix_target == "unix:///run/t/torchmond.sock"
    assert ready.tcp_target == "127.0.0.1:7070"
    assert ready.metrics == "127.0.0.1:9464"


def test_a_tcp_only_daemon_has_no_unix_target():
    ready = parse_ready_line("torchmond ready grpc=[::1]:7070 metrics=127.0.0.1:1")
    assert ready.unix_target is None
    assert ready.tcp_target == "[::1]:7070"


@pytest.mark.parametrize("line", [
    "", "torchmond: bad flag --x", "torchmond ready metrics=127.0.0.1:1",
    "torchmond ready grpc= metrics=127.0.0.1:1", "torchmond ready grpc=unix:///a.sock"])
def test_anything_else_is_refused(line):
    with pytest.raises(ValueError):
        parse_ready_line(line)


def test_wait_for_returns_the_first_true_value_or_the_last_false_one():
    calls = []
    assert wait_for(lambda: calls.append(1) or (len(calls) == 3 and "done"), 30, 0.001) == "done"
    assert len(calls) == 3
    calls.clear()
    assert wait_for(lambda: calls.append(1) or 0, 0) == 0
    assert len(calls) == 1  # called once even with no time


def test_the_fixtures_daemon_was_started_from_its_ready_line(daemon):
    ready = daemon.launched.ready
    assert ready.line.startswith("torchmond ready ")
    assert ready.unix_target == daemon.target
    assert daemon.metrics == ready.metrics and daemon.scrape()

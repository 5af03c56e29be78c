"""The ready line as the Python launcher reads it (tests/support/torchmond.py)
and the shell scripts do (tests/support/torchmond.sh): the same cases as
tests/unit/support/daemon_launch_test.cc, so that C++, Python and shell read
it by one rule, and a real daemon's line."""

import os
import subprocess
import tempfile

import pytest

from torchmon_testing import ROOT, TORCHMOND  # (puts tests/support on sys.path)
from torchmond import parse_ready_line, wait_for

SHELL_HELPER = os.path.join(ROOT, "tests", "support", "torchmond.sh")


def shell(script, *args):
    """Runs `script` in bash with tests/support/torchmond.sh sourced ($1 is
    its path, $2... are `args`)."""
    return subprocess.run(["bash", "-c", '. "$1"; shift; ' + script, "bash", SHELL_HELPER, *args],
                          capture_output=True, text=True, timeout=30)


def shell_parse(line):
    """(grpc addresses, metrics) as torchmond_parse_ready reads `line`, or
    None if it refuses it."""
    out = shell('torchmond_parse_ready "$1" && printf "%s\\n%s\\n" "$torchmond_grpc" '
                '"$torchmond_metrics"', line)
    if out.returncode != 0:
        assert out.stdout == "", out.stdout
        return None
    grpc, metrics = out.stdout.split("\n")[:2]
    return [a for a in grpc.split(",") if a], metrics


def test_names_every_grpc_address_in_order_and_the_metrics_listener():
    ready = parse_ready_line(
        "torchmond ready grpc=unix:///run/t/torchmond.sock,127.0.0.1:7070 metrics=127.0.0.1:9464\n")
    assert ready.grpc == ["unix:///run/t/torchmond.sock", "127.0.0.1:7070"]
    assert ready.unix_target == "unix:///run/t/torchmond.sock"
    assert ready.tcp_target == "127.0.0.1:7070"
    assert ready.metrics == "127.0.0.1:9464"


@pytest.mark.parametrize("line", [
    "torchmond ready grpc=unix:///run/t/torchmond.sock,127.0.0.1:7070 metrics=127.0.0.1:9464\n",
    "torchmond ready grpc=[::1]:7070 metrics=127.0.0.1:1",
    "torchmond ready metrics=127.0.0.1:1 grpc=unix:///a*b?.sock,,h:1",
    "torchmond ready  grpc=h:1   metrics=[::1]:9464 later=field"])
def test_the_shell_scripts_read_a_ready_line_as_python_does(line):
    ready = parse_ready_line(line)
    assert shell_parse(line) == (ready.grpc, ready.metrics)


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
    assert shell_parse(line) is None
    assert shell_parse(" " + line) is None


def test_the_shell_scripts_wait_for_a_real_daemons_ready_line():
    """torchmond_wait_ready, as deploy/dev/run-demo.sh and
    tests/gpu/cuda_loop_check.sh start torchmond: stdout to a file."""
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        socket = os.path.join(tmpdir, "d.sock")
        out = shell(
            '"$1" --listen "unix://$2" --metrics-listen 127.0.0.1:0 >"$3" 2>/dev/null & pid=$!; '
            'torchmond_wait_ready "$3" "$pid" 20; rc=$?; '
            'printf "%s\\n%s\\n%s\\n" "$torchmond_ready" "$torchmond_grpc" "$torchmond_metrics"; '
            'kill -TERM "$pid"; wait "$pid"; exit $rc',
            TORCHMOND, socket, os.path.join(tmpdir, "ready"))
        assert out.returncode == 0, (out.stdout, out.stderr)
        line, grpc, metrics = out.stdout.split("\n")[:3]
        ready = parse_ready_line(line)
        assert (grpc, metrics) == (",".join(ready.grpc), ready.metrics)
        assert ready.unix_target == "unix://" + socket


def test_the_shell_scripts_give_up_on_a_daemon_that_exits_without_one():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        out = shell('"$1" --no-such-flag >"$2" 2>/dev/null & torchmond_wait_ready "$2" $! 20',
                    TORCHMOND, os.path.join(tmpdir, "ready"))
        assert out.returncode == 1


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

"""What the Python benchmarks share: a real torchmond started from the
build tree, a child run with its result read back as the JSON object on its
last line of output, and the machine line every report starts with."""

import contextlib
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from torchmond import LaunchedDaemon  # noqa: E402  (the one launcher)
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
# Where the child imports torchmon from: the build tree, or (as in
# python_add_bench.py) the site-packages of a venv or another build.
PYTHON_DIR = os.environ.get("TORCHMON_PYTHON_DIR", os.path.join(BUILD, "client", "python"))


def rss_bytes(pid):
    """The resident memory of process `pid` (VmRSS), in bytes."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS for pid %d" % pid)


def cpu_seconds(pid):
    """The user and system CPU time process `pid` has used, in seconds
    (clock-tick resolution)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_line():
    """The machine the figures come from, as torchmon-machine prints it (CPU
    model, CPUs, L2, L3, clocksource, VM): a figure without its CPU cannot be
    compared with another (docs/performance.md, "The machines")."""
    tool = os.path.join(BUILD, "tests", "bench", "torchmon-machine")
    try:
        return subprocess.run([tool], capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown (%s missing: build it)" % tool


@contextlib.contextmanager
def torchmond_process(prefix):
    """Runs a torchmond on a temporary Unix socket; yields its target and
    its LaunchedDaemon (for a benchmark that signals it)."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        sock = os.path.join(tmp, "torchmond.sock")
        daemon = LaunchedDaemon([os.path.join(BUILD, "server", "torchmond"), "--listen",
                                 "unix://" + sock, "--metrics-listen", "127.0.0.1:0"])
        try:
            yield "unix://" + sock, daemon
        finally:
            daemon.stop(timeout=30)


@contextlib.contextmanager
def torchmond(prefix):
    """Runs a torchmond on a temporary Unix socket; yields its target."""
    with torchmond_process(prefix) as (target, _):
        yield target


def run_child(code, what, timeout):
    """Runs `code` in a fresh interpreter; returns the JSON object it printed
    last. Exits naming `what` if the child failed."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"{what} child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])

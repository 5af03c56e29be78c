"""The one way Python tests and benchmarks start a torchmond, read its ready
line and wait for a condition (the Python twin of daemon_launch.h, by the
same rule), and a free loopback port for what they start beside it.

The ready line is the first line torchmond prints on stdout, once every
listener is bound (docs/operating.md, "Logs"):

    torchmond ready grpc=<addr>[,<addr>...] metrics=<host:port>

each gRPC address as a client targets it ("unix:///abs/path" or
"host:port", port 0 resolved), in the order of the --listen flags.

Standard library only: tests import it from tests/support, also in Debian
roots and beside a GPU host's own Python.
"""

import collections
import os
import selectors
import socket
import subprocess
import time

READY_PREFIX = "torchmond ready "


class ReadyLine(collections.namedtuple("ReadyLine", "line grpc metrics")):
    """A parsed ready line: the line, its gRPC addresses in order, and the
    host:port of /metrics."""

    @property
    def unix_target(self):
        """The first Unix-socket address ("unix://..."), or None."""
        return next((a for a in self.grpc if a.startswith("unix:")), None)

    @property
    def tcp_target(self):
        """The first TCP address ("host:port"), or None."""
        return next((a for a in self.grpc if not a.startswith("unix:")), None)


def parse_ready_line(line):
    """The ReadyLine of `line`; ValueError naming what is missing if it is
    not one (the prefix, a non-empty grpc= list, metrics=)."""
    line = line.rstrip("\n")
    if not line.startswith(READY_PREFIX):
        raise ValueError(f"not a ready line (no {READY_PREFIX!r}): {line!r}")
    fields = dict(part.split("=", 1) for part in line[len(READY_PREFIX):].split() if "=" in part)
    grpc = [a for a in fields.get("grpc", "").split(",") if a]
    if not grpc or not fields.get("metrics"):
        raise ValueError(f"ready line without grpc= or metrics=: {line!r}")
    return ReadyLine(line, grpc, fields["metrics"])


def read_first_line(stream, timeout):
    """The first line of a pipe (text or binary), waiting at most `timeout`
    seconds; what came before EOF or the deadline if no full line did."""
    deadline = time.monotonic() + timeout
    data = b""
    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        while b"\n" not in data:
            left = deadline - time.monotonic()
            if left <= 0 or not selector.select(left):
                break
            chunk = os.read(stream.fileno(), 4096)
            if not chunk:
                break
            data += chunk
    return data.decode(errors="replace").split("\n", 1)[0]


def wait_for(condition, timeout, interval=0.02):
    """Calls `condition` every `interval` seconds until it returns something
    true, and returns that; after `timeout` seconds returns its last (false)
    value. It is called at least once."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval)


def free_tcp_port():
    """A loopback TCP port free now (bound and released: another process may
    take it before the caller binds it, as with any such helper)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stderr_text(stderr):
    if hasattr(stderr, "seek"):
        stderr.flush()
        stderr.seek(0)
        return stderr.read()
    return "(not kept)"


class LaunchedDaemon:
    """One torchmond child: `argv` (the binary or a wrapper that execs it,
    such as chroot) run with its stderr to `stderr` (a file object opened
    for reading and writing, or subprocess.DEVNULL), its ready line read
    within `timeout` seconds. RuntimeError naming what it printed and its
    stderr if it exits or stays silent first (the child is then killed and
    reaped)."""

    def __init__(self, argv, stderr=subprocess.DEVNULL, timeout=10.0, env=None):
        self.stderr = stderr
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, env=env)
        line = read_first_line(self.proc.stdout, timeout)
        self.proc.stdout.close()  # the daemon prints nothing else there
        try:
            self.ready = parse_ready_line(line)
        except ValueError:
            try:
                self.proc.wait(timeout=2)  # at EOF it has exited, or is about to
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            status = self.proc.returncode
            raise RuntimeError(
                f"{argv[0]} did not become ready within {timeout} s (exit status {status}); "
                f"stdout: {line!r}; stderr:\n{_stderr_text(stderr)}") from None

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, timeout=10.0):
        """SIGTERM, then waits at most `timeout` seconds for the exit (SIGKILL
        after that). Returns its exit status (negative: the signal)."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def read_stderr(self):
        """What the daemon wrote to stderr so far (if it went to a file)."""
        return _stderr_text(self.stderr)

"""A real torchmond for Python tests: started on a temp Unix socket and port 0,
read back with torchmonctl --json and /metrics. Shared by tests/python and the
other pytest suites (tests/grpc_tooling, tests/prometheus, ...), which put this
directory on sys.path. Paths come from the build tree (TORCHMON_BUILD_DIR, set
by CTest)."""

import importlib.util
import json
import os
import pwd
import re
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "support"))
from torchmond import LaunchedDaemon, wait_for  # noqa: E402  (the one launcher)
BUILD_DIR = os.environ.get(
    "TORCHMON_BUILD_DIR",
    os.path.join(os.path.dirname(__file__), "..", "..", "build"))
TORCHMOND = os.path.join(BUILD_DIR, "server", "torchmond")
TORCHMONCTL = os.path.join(BUILD_DIR, "client", "cli", "torchmonctl")
# Where child processes import torchmon from: the build tree, or (the wheel's
# tests, tests/wheel) the site-packages of a venv the wheel was installed in.
PYTHON_DIR = os.environ.get("TORCHMON_PYTHON_DIR", os.path.join(BUILD_DIR, "client", "python"))

# The `user` label torchmond gives the series of this process's clients on
# its Unix socket (--peer-labels, on unless turned off).
try:
    OWN_USER = pwd.getpwuid(os.geteuid()).pw_name
except KeyError:
    OWN_USER = str(os.geteuid())

# Short windows keep the tests quick; the daemon's grace matches.
WINDOW_MS = 500


class Daemon:
    def __init__(self, tmpdir, *flags, wrapper=()):
        """`wrapper`: a command torchmond is run under (e.g. unshare)."""
        self.socket = os.path.join(tmpdir, "torchmond.sock")
        # Defaults, given only when the test does not set the flag itself.
        # The grace matches the tests' short windows. A test's daemon stops
        # with its client's stream still open (the client outlives the
        # fixture): the default drain, 1 s, made that a second per test.
        for name, value in (("--grace", "500ms"), ("--drain-timeout", "100ms")):
            if not any(str(f) == name or str(f).startswith(name + "=") for f in flags):
                flags = (*flags, name, value)
        self.stderr = open(os.path.join(tmpdir, "torchmond.stderr"), "w+")
        self.launched = LaunchedDaemon(
            [*wrapper, TORCHMOND, "--listen", "unix://" + self.socket, "--metrics-listen",
             "127.0.0.1:0", *flags], stderr=self.stderr)
        self.proc = self.launched.proc
        self.target = "unix://" + self.socket
        self.metrics = self.launched.ready.metrics
        # A TCP listener, if the flags asked for one.
        self.tcp_target = self.launched.ready.tcp_target
        self.ctl_flags = []  # given to every torchmonctl run, e.g. --token-file

    def read_stderr(self):
        return self.launched.read_stderr()

    def ctl(self, *args, check=True):
        out = subprocess.run([TORCHMONCTL, "--target", self.target, "--json", *self.ctl_flags,
                              *args],
                             capture_output=True, text=True, timeout=30)
        if check:
            assert out.returncode == 0, out.stderr
        return json.loads(out.stdout) if out.stdout.strip() else None

    def series(self, stat):
        return self.ctl("series", "--stat", stat)["series"]

    def windows(self, stat, *labels):
        args = ["windows", stat]
        for label in labels:
            args += ["--label", label]
        return self.ctl(*args)["windows"]

    def wait_windows(self, stat, count, *labels, timeout=10.0):
        """The closed windows once there are `count` (or all there are after
        `timeout` seconds)."""
        return self.windows_when(lambda windows: len(windows) >= count, stat, *labels,
                                 timeout=timeout)

    def windows_when(self, done, stat, *labels, timeout=10.0):
        """The closed windows once done(windows) holds (or all there are after
        `timeout` seconds)."""
        windows = []

        def fetched_and_done():
            windows[:] = self.windows(stat, *labels)
            return done(windows)

        wait_for(fetched_and_done, timeout)
        return windows

    def scrape(self):
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=5) as r:
            return r.read().decode()

    def stop(self):
        status = self.launched.stop(timeout=10)
        # A daemon that crashed, or whose sanitizer runtime reported an error
        # at shutdown, fails the test.
        stderr = self.read_stderr()
        self.stderr.close()
        assert status == 0, f"torchmond exited with {status}; stderr:\n{stderr}"


def next_window_start_s():
    """Start (Unix seconds) of the next window: samples there are never late."""
    now_ms = int(time.time() * 1000)
    return (now_ms // WINDOW_MS + 1) * WINDOW_MS / 1000.0


def run_python(code, env, timeout=60):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=timeout)


def project_version():
    """The project's version, from the top-level CMakeLists.txt: what the wheel
    and the packages must carry."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(\s*torchmon\s+VERSION\s+([0-9.]+)", f.read()).group(1)


def load_source(name, path):
    """Imports the Python file at `path` (relative to the repository root) as
    module `name`: a script or a conftest the tests cannot import by name."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, path))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module

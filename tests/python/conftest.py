"""Fixtures for the Python client tests: a real torchmond on a temp Unix
socket and port 0 (torchmon_testing.Daemon), and torchmonctl --json to read it
back."""

import os
import tempfile

import pytest

from torchmon_testing import (  # noqa: F401  (re-exported for the tests)
    BUILD_DIR, OWN_USER, PYTHON_DIR, TORCHMOND, TORCHMONCTL, WINDOW_MS, Daemon,
    next_window_start_s, run_python)


@pytest.fixture
def daemon():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        d = Daemon(tmpdir)
        try:
            yield d
        finally:
            d.stop()


@pytest.fixture
def default_client_for(daemon):
    """Points torchmon's default client (log_event, flush) at the test daemon."""
    import torchmon
    client = torchmon.Client(target=daemon.target, labels_from_environment=False)
    previous = torchmon.set_default_client(client)
    yield client
    torchmon.set_default_client(previous)


@pytest.fixture
def python_env(daemon):
    """Environment for a child Python process using the build-tree module."""
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
    env["TORCHMON_TARGET"] = daemon.target
    env["TORCHMON_LABELS"] = "job=pytest"
    for var in ("RANK", "LOCAL_RANK", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_PROCID",
                "SLURM_LOCALID"):
        env.pop(var, None)
    return env

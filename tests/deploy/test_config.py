"""Every torchmond.conf under deploy/ passes the real `torchmond
--check-config`, and the shipped one starts a real daemon."""

import os
import subprocess
import tempfile
import urllib.request

import yaml

from conftest import DEPLOY, KUBERNETES, TORCHMOND, check_config, config_settings
from torchmon_testing import Daemon

SHIPPED = os.path.join(DEPLOY, "torchmond.conf")


def configmap_conf():
    with open(os.path.join(KUBERNETES, "configmap.yaml")) as f:
        return yaml.safe_load(f)["data"]["torchmond.conf"]


def test_shipped_configuration_passes_check_config(tmp_path):
    with open(SHIPPED) as f:
        check_config(f.read(), tmp_path)


def test_kubernetes_configmap_configuration_passes_check_config(tmp_path):
    check_config(configmap_conf(), tmp_path)


def test_check_config_refuses_a_bad_setting(tmp_path):
    """The checks above can fail: a misspelt name is refused with its line."""
    with open(SHIPPED) as f:
        text = f.read().replace("drain-timeout = 2s", "drain-timout = 2s")
    path = tmp_path / "bad.conf"
    path.write_text(text)
    out = subprocess.run([TORCHMOND, "--check-config", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2
    assert 'unknown setting "drain-timout"' in out.stderr, out.stderr


def test_shipped_configuration_starts_a_daemon_that_reports_healthy(tmp_path):
    """The shipped file with only what a test cannot use replaced: the
    command line puts the socket and the metrics port in a temp directory and
    on a free loopback port (the command line overrides the file), the group
    is this process's own where torchmon does not exist (as in check_config)."""
    with open(SHIPPED) as f:
        text = f.read()
    check_config(text, tmp_path)  # leaves the runnable copy at tmp_path/torchmond.conf
    assert config_settings(text)["state-dir"] == ["/var/lib/torchmon"]
    with tempfile.TemporaryDirectory(prefix="torchmon-deploy.") as tmpdir:
        # The state too goes to the temp directory, not this machine's
        # /var/lib/torchmon.
        state = os.path.join(tmpdir, "state")
        daemon = Daemon(tmpdir, "--config", str(tmp_path / "torchmond.conf"),
                        "--state-dir", state)
        try:
            with urllib.request.urlopen(f"http://{daemon.metrics}/healthz", timeout=5) as r:
                assert r.status == 200
                assert r.read().decode().strip() == "ok"
            # The file's settings took effect where the command line left them.
            assert os.stat(daemon.socket).st_mode & 0o777 == 0o660  # socket-group
            assert daemon.ctl("series") is not None
            assert os.path.exists(os.path.join(state, "lock"))
        finally:
            daemon.stop()

"""deploy/systemd: the unit passes `systemd-analyze verify` and holds the
settings docs/deploy.md promises; the sysusers.d file creates the user it
runs as. No systemd needs to be running."""

import os
import re
import subprocess

import pytest

from conftest import DEPLOY, TORCHMOND, config_settings, duration_s

UNIT = os.path.join(DEPLOY, "systemd", "torchmond.service")
SYSUSERS = os.path.join(DEPLOY, "systemd", "torchmon.sysusers")
# The unit is a template: `cmake --install` and the Debian package write the
# installed paths in (cmake/InstallDaemonFiles.cmake). These are the
# package's, with prefix /usr.
INSTALLED_TORCHMOND = "/usr/bin/torchmond"
INSTALLED_CONF = "/etc/torchmon/torchmond.conf"
INSTALLED_DOC_DIR = "/usr/share/doc/torchmond"


def render(text, torchmond=INSTALLED_TORCHMOND):
    assert "@TORCHMOND@" in text and "@TORCHMOND_CONF@" in text
    assert "@TORCHMOND_DOC_DIR@" in text
    return (text.replace("@TORCHMOND@", torchmond).replace("@TORCHMOND_CONF@", INSTALLED_CONF)
                .replace("@TORCHMOND_DOC_DIR@", INSTALLED_DOC_DIR))


def read_unit(text):
    """section -> name -> list of values (systemd allows repeated names)."""
    sections, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
            continue
        name, _, value = line.partition("=")
        section.setdefault(name.strip(), []).append(value.strip())
    return sections


@pytest.fixture(scope="module")
def unit():
    with open(UNIT) as f:
        return read_unit(render(f.read()))


@pytest.fixture(scope="module")
def service(unit):
    return {name: values[-1] for name, values in unit["Service"].items()}


@pytest.fixture(scope="module")
def shipped_config():
    with open(os.path.join(DEPLOY, "torchmond.conf")) as f:
        return config_settings(f.read())


def verify(unit_text, tmp_path):
    """systemd-analyze verify on a copy whose binary is the built torchmond:
    verify refuses an ExecStart= whose program does not exist, and this
    machine has no installed /usr/bin/torchmond. (tests/install verifies the
    unit the package installs, with its own paths.)"""
    path = tmp_path / "torchmond.service"
    path.write_text(render(unit_text, os.path.abspath(TORCHMOND)))
    return subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                          text=True, timeout=60)


def test_unit_passes_systemd_analyze_verify_without_a_word(tmp_path):
    with open(UNIT) as f:
        text = f.read()
    out = verify(text, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout + out.stderr == ""


def test_verify_reports_a_broken_unit(tmp_path):
    """The check above can fail: a wrong value and an unknown setting are reported."""
    with open(UNIT) as f:
        text = f.read()
    out = verify(text.replace("Restart=on-failure", "Restart=sometimes\nProtectSytem=strict"),
                 tmp_path)
    assert "sometimes" in out.stderr and "ProtectSytem" in out.stderr, out.stderr


def test_sandbox_exposure_is_low(tmp_path):
    path = tmp_path / "torchmond.service"
    with open(UNIT) as f:
        path.write_text(render(f.read(), os.path.abspath(TORCHMOND)))
    out = subprocess.run(["systemd-analyze", "security", "--offline=yes", str(path)],
                         capture_output=True, text=True, timeout=60)
    m = re.search(r"Overall exposure level for torchmond.service: (\d+\.\d+)", out.stdout)
    assert m, out.stdout + out.stderr
    # 0 is fully locked down, 10 not at all; the unit scored 1.6 when written.
    assert float(m.group(1)) <= 2.0, out.stdout


def test_daemon_starts_from_the_shipped_file_as_an_unprivileged_user(unit, service):
    assert service["Type"] in ("exec", "simple")  # no sd_notify in torchmond
    assert service["User"] == "torchmon" and service["Group"] == "torchmon"
    assert service["ExecStart"] == f"{INSTALLED_TORCHMOND} --config {INSTALLED_CONF}"
    assert service["ExecStartPre"] == f"{INSTALLED_TORCHMOND} --check-config {INSTALLED_CONF}"
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_socket_lives_in_the_runtime_directory_with_group_search_only(service, shipped_config):
    socket = shipped_config["listen"][0]
    assert socket == "unix:///run/torchmon/torchmond.sock"
    assert os.path.dirname(socket[len("unix://"):]) == "/run/" + service["RuntimeDirectory"]
    # docs/security.md: the socket's directory is writable by neither group
    # nor others; the group may only enter it.
    assert service["RuntimeDirectoryMode"] == "0710"
    assert shipped_config["socket-group"] == [service["Group"]]


def test_restart_policy_gives_up_on_a_crash_loop(unit, service):
    assert service["Restart"] == "on-failure"
    assert duration_s(service["RestartSec"]) >= 1
    assert int(unit["Unit"]["StartLimitBurst"][-1]) >= 1
    assert duration_s(unit["Unit"]["StartLimitIntervalSec"][-1]) > (
        int(unit["Unit"]["StartLimitBurst"][-1]) * duration_s(service["RestartSec"]))
    # torchmond's configuration errors: usage/file (2) and at start (78).
    assert service["RestartPreventExitStatus"].split() == ["2", "78"]


def test_stop_leaves_room_for_the_drain(service, shipped_config):
    assert service["KillSignal"] == "SIGTERM"
    drain = duration_s(shipped_config["drain-timeout"][0])
    grace = duration_s(shipped_config["grace"][0])
    assert duration_s(service["TimeoutStopSec"]) > drain + grace


def test_resources_are_limited(service):
    def bytes_of(v):
        return int(v[:-1]) * {"K": 2**10, "M": 2**20, "G": 2**30}[v[-1]]
    assert bytes_of(service["MemoryHigh"]) < bytes_of(service["MemoryMax"])
    assert int(service["LimitNOFILE"]) > 4096  # max-streams' default, one descriptor each
    assert int(service["TasksMax"]) > 0
    assert 1 <= int(service["CPUWeight"]) < 100  # training jobs first


def test_sandboxing(service):
    expected = {
        "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
        "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
        "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
        "SystemCallFilter": "@system-service", "MemoryDenyWriteExecute": "yes",
    }
    assert {k: service.get(k) for k in expected} == expected
    # The only writable places: the runtime directory and the state directory.
    assert service["StateDirectory"] == "torchmon"
    assert "ReadWritePaths" not in service


def test_sysusers_creates_the_units_user_and_group(tmp_path, service):
    (tmp_path / "etc").mkdir()
    out = subprocess.run(["systemd-sysusers", f"--root={tmp_path}", SYSUSERS],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    passwd = [line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()]
    groups = [line.split(":") for line in (tmp_path / "etc" / "group").read_text().splitlines()]
    (user,) = [p for p in passwd if p[0] == service["User"]]
    (group,) = [g for g in groups if g[0] == service["Group"]]
    assert user[3] == group[2]  # its primary group
    assert int(user[2]) < 1000  # a system user
    assert user[5] == "/var/lib/" + service["StateDirectory"]
    assert user[6].endswith("nologin")

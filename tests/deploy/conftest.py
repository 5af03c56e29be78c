"""Shared helpers for the deploy/ checks: the repository's paths, the real
torchmond (tests/python/torchmon_testing.py), and `torchmond --check-config`
run on a configuration as shipped."""

import grp
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

from torchmon_testing import TORCHMOND, TORCHMONCTL  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(REPO, "deploy")
KUBERNETES = os.path.join(DEPLOY, "kubernetes")


def config_settings(text):
    """name -> list of values of a torchmond.conf text (quotes removed)."""
    settings = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        value = value.strip()
        if value.startswith('"'):
            value = value[1:value.index('"', 1)]
        else:
            value = value.split(" #")[0].strip()
        settings.setdefault(name.strip(), []).append(value)
    return settings


def duration_s(text):
    """Seconds of a torchmond or systemd duration: 500ms, 2s, 1m, 30s, 1h."""
    m = re.fullmatch(r"(\d+)(ms|s|min|m|h)?", text.strip())
    assert m, f"not a duration: {text!r}"
    scale = {"ms": 0.001, "s": 1, None: 1, "m": 60, "min": 60, "h": 3600}[m.group(2)]
    return int(m.group(1)) * scale


def check_config(text, tmp_path, torchmond=None):
    """Runs the real `torchmond --check-config` on a configuration text.

    The shipped files name the group torchmon, which a build machine need not
    have: then the file as shipped must fail on exactly that group, and a copy
    naming this process's group instead must pass. Returns the output of the
    run that passed. `torchmond` is the binary (default: the build's)."""
    torchmond = torchmond or TORCHMOND
    path = tmp_path / "torchmond.conf"
    path.write_text(text)
    group = config_settings(text).get("socket-group", [None])[-1]
    missing_group = False
    if group is not None:
        try:
            grp.getgrnam(group)
        except KeyError:
            missing_group = True
    if missing_group:
        out = subprocess.run([torchmond, "--check-config", str(path)], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 2, out
        assert f'--socket-group "{group}": no such group' in out.stderr, out.stderr
        here = grp.getgrgid(os.getgid()).gr_name
        path.write_text(re.sub(r"(?m)^(\s*socket-group\s*=\s*).*$", r"\g<1>" + here, text))
    out = subprocess.run([torchmond, "--check-config", str(path)], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{path}: ok", out.stdout
    return out

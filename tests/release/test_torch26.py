"""tests/python's torch.monitor mirror and drop-in tests against Debian 13's
torch 2.6 (the rest of the suite runs them against bookworm's 1.13).

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release/test_torch26.py -v

In a throwaway copy of the cached trixie-torch root (tests/release/roots.sh:
python3-torch 2.6, libtorch-dev 2.6, pytest, Python 3.13), the portable wheel
is pip-installed into a venv that sees the system's torch
(--system-site-packages), the tarball's torchmond and torchmonctl are the
daemon the tests start, and pytest runs tests/python/test_monitor_mirror.py
and test_dropin.py there as they run here: upstream's cases against both
modules, and the same Stat driven in lockstep in torch.monitor and torchmon
(count, get() and every window event compared after every call, generated
sequences included). Needs what test_roots.py needs (root, debootstrap, the
artefacts of deploy/release/build.sh).
"""

import os
import re
import shutil

import pytest

from test_roots import RELEASE_DIR, REPO, artefact, chroot, put, show, throwaway_root, unpack_tarball

if not RELEASE_DIR:  # test_roots skips its module; this one must skip too
    pytest.skip("TORCHMON_RELEASE_DIR is not set", allow_module_level=True)

SUITES = ("test_monitor_mirror.py", "test_dropin.py")


def test_the_mirror_and_dropin_tests_pass_against_torch_2_6():
    wheel = artefact("torchmon-*-cp310-abi3-manylinux_2_28_x86_64.whl")
    with throwaway_root("trixie-torch") as root:
        version = chroot(root, "python3", "-c", "import torch; print(torch.__version__)",
                         timeout=120).stdout.strip()
        assert version.startswith("2.6"), version
        chroot(root, "python3", "-m", "venv", "--system-site-packages", "/venv", timeout=300)
        pip = chroot(root, "/venv/bin/pip", "install", "--no-index", put(root, wheel),
                     check=False, timeout=300)
        assert pip.returncode == 0, show(pip)
        prefix = unpack_tarball(root)
        # tests/python find the daemon and torchmonctl as in a build tree.
        for tool, place in (("torchmond", "server"), ("torchmonctl", "client/cli")):
            os.makedirs(f"{root}/build/{place}")
            os.symlink(f"{prefix}/bin/{tool}", f"{root}/build/{place}/{tool}")
        shutil.copytree(os.path.join(REPO, "tests", "python"), root + "/tests/python",
                        ignore=shutil.ignore_patterns("__pycache__"))
        site = chroot(root, "/venv/bin/python", "-c",
                      "import os, torchmon; print(os.path.dirname(os.path.dirname(torchmon.__file__)))"
                      ).stdout.strip()
        assert site.startswith("/venv/"), site
        pytest = ("env", "TORCHMON_BUILD_DIR=/build", f"TORCHMON_PYTHON_DIR={site}",
                  "/venv/bin/python", "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  *(f"/tests/python/{suite}" for suite in SUITES))
        collected = chroot(root, *pytest, "--collect-only", timeout=300)
        run = chroot(root, *pytest, check=False, timeout=900)
    print(run.stdout[-3000:])
    count = re.search(r"^(\d+) tests? collected", collected.stdout, re.M)
    assert count and int(count.group(1)) > 0, collected.stdout[-2000:]
    assert run.returncode == 0, show(run)
    # Every case ran and passed on torch 2.6: none skipped, none failed.
    summary = run.stdout.strip().splitlines()[-1]
    assert re.fullmatch(rf"{count.group(1)} passed in [0-9.]+s( \([0-9:]+\))?", summary), summary

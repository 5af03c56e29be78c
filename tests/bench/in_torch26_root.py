#!/usr/bin/env python3
"""Runs a benchmark of tests/bench against Debian 13's torch 2.6, with the
portable wheel and daemon as a user installs them:

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 tests/bench/in_torch26_root.py \\
        torch_metrics_overhead.py --rounds 15

In a throwaway copy of the cached trixie-torch root (tests/release/roots.sh,
as tests/release/test_torch26.py uses it), the wheel of OUT
(deploy/release/build.sh OUT) is pip-installed into a venv that sees the
system's torch, so its .pth runs at interpreter start; the tarball's
torchmond is the daemon. The script runs with the venv's Python, with
--torchmond and --python-dir pointing at them, and its output is printed.
Needs root (chroot, mount), as the release tests do.
"""

import glob
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "release"))
os.environ.setdefault("TORCHMON_RELEASE_DIR", "")
if not os.environ["TORCHMON_RELEASE_DIR"]:
    sys.exit("TORCHMON_RELEASE_DIR must name the output of deploy/release/build.sh")
from test_roots import artefact, chroot, put, throwaway_root, unpack_tarball  # noqa: E402


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    script, args = sys.argv[1], sys.argv[2:]
    wheel = artefact("torchmon-*-cp310-abi3-manylinux_2_28_x86_64.whl")
    with throwaway_root("trixie-torch") as root:
        chroot(root, "python3", "-m", "venv", "--system-site-packages", "/venv", timeout=300)
        chroot(root, "/venv/bin/pip", "install", "--no-index", put(root, wheel), timeout=300)
        prefix = unpack_tarball(root)
        for part in ("bench", "support"):
            shutil.copytree(os.path.join(REPO, "tests", part), f"{root}/tests/{part}",
                            ignore=shutil.ignore_patterns("__pycache__"))
        site = glob.glob(f"{root}/venv/lib/python3*/site-packages")[0][len(root):]
        out = chroot(root, "/venv/bin/python", f"/tests/bench/{script}",
                     "--torchmond", f"{prefix}/bin/torchmond", "--python-dir", site, *args,
                     check=False, timeout=3600)
    sys.stdout.write(out.stdout)
    sys.stderr.write(out.stderr[-5000:])
    sys.exit(out.returncode)


if __name__ == "__main__":
    main()

"""The portable wheel beside other copies of gRPC in one process (issue 32).

    TORCHMON_RELEASE_DIR=OUT TORCHMON_BUILD_DIR=build /usr/bin/python3 -m pytest tests/release -v

The last packaging work found that two differently built copies of the
extension in one process crashed (the second gRPC's channel set-up). The
portable extension links gRPC, protobuf, abseil and GCC 10's libstdc++
statically and exports only PyInit__torchmon, so it must work:
  - beside the build tree's extension (Debian's shared gRPC 1.51 and
    libstdc++), each sending through its own client, imported in either order;
  - beside Debian's python3-grpcio and python3-torch, in either order.
The daemon is the build tree's (TORCHMON_BUILD_DIR, as tests/python uses).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from torchmon_testing import Daemon  # noqa: E402

RELEASE_DIR = os.environ.get("TORCHMON_RELEASE_DIR")
BUILD_DIR = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(ROOT, "build"))
TREE_PACKAGE = os.path.join(BUILD_DIR, "client", "python", "torchmon")

pytestmark = pytest.mark.skipif(not RELEASE_DIR, reason="TORCHMON_RELEASE_DIR is not set "
                                "(deploy/release/build.sh OUT makes the artefacts)")


def clean_env() -> dict:
    return {k: v for k, v in os.environ.items()
            if not k.startswith(("TORCHMON_", "PYTHON")) or k == "TORCHMON_BUILD_DIR"}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """Two importable copies of the torchmon package under other names: the
    portable wheel's (`torchmon_portable`) and the build tree's
    (`torchmon_tree`). The package imports its extension relatively, so each
    loads its own _torchmon.abi3.so."""
    wheels = glob.glob(os.path.join(RELEASE_DIR, "torchmon-*-manylinux_2_28_x86_64.whl"))
    assert len(wheels) == 1, wheels
    if not os.path.isfile(os.path.join(TREE_PACKAGE, "_torchmon.abi3.so")):
        pytest.fail(f"no build tree extension in {TREE_PACKAGE} (TORCHMON_BUILD_DIR)")
    where = tmp_path_factory.mktemp("packages")
    unpacked = where / "wheel"
    with zipfile.ZipFile(wheels[0]) as whl:
        whl.extractall(unpacked)
    shutil.copytree(unpacked / "torchmon", where / "torchmon_portable")
    shutil.copytree(TREE_PACKAGE, where / "torchmon_tree")
    return str(where)


def send(package: str, stat: str, target: str) -> str:
    """Python that sends 1000 samples of `stat` through `package`'s own client."""
    return (f"import datetime, {package}\n"
            f"c = {package}.Client(target={target!r}, labels_from_environment=False)\n"
            f"s = {package}.Stat({stat!r}, [{package}.COUNT], datetime.timedelta(seconds=60),"
            " client=c)\n"
            "for i in range(1000): s.add(float(i))\n"
            "assert c.flush(10)\n"
            f"print({stat!r}, 'sent')\n")


@pytest.fixture
def daemon():
    """The build tree's torchmond on a temp socket, stopped after the test."""
    with tempfile.TemporaryDirectory(prefix="torchmon-portable.") as tmpdir:
        d = Daemon(tmpdir)
        try:
            yield d
        finally:
            d.stop()


def run_python(code: str, cwd: str) -> subprocess.CompletedProcess:
    """Debian's python3 on `code` in `cwd` (where both packages are); asserts it exits 0."""
    run = subprocess.run(["/usr/bin/python3", "-c", code], capture_output=True, text=True,
                         timeout=120, env=clean_env(), cwd=cwd)
    assert run.returncode == 0, run.stdout + run.stderr
    return run


@pytest.mark.parametrize("portable_first", [True, False])
def test_the_portable_extension_lives_beside_the_tree_built_one(portable_first, packages, daemon):
    portable = send("torchmon_portable", "beside.portable", daemon.target)
    tree = send("torchmon_tree", "beside.tree", daemon.target)
    run = run_python(portable + tree if portable_first else tree + portable, packages)
    for stat in ("beside.portable", "beside.tree"):
        assert f"{stat} sent" in run.stdout
        (series,) = daemon.series(stat)
        assert series["counters"]["accepted"] == 1000, series


@pytest.mark.parametrize("portable_first", [True, False])
def test_the_portable_extension_lives_beside_debians_grpcio_and_torch(portable_first, packages,
                                                                      daemon):
    portable = send("torchmon_portable", "beside.grpcio", daemon.target)
    grpcio = ("import grpc, torch\n"
              f"ch = grpc.insecure_channel({daemon.target!r})\n"
              "grpc.channel_ready_future(ch).result(timeout=10)\n"
              "x = torch.ones(4) * 2\n"
              "print('grpcio ready', float(x.sum()))\n")
    run = run_python(portable + grpcio if portable_first else grpcio + portable, packages)
    assert "grpcio ready 8.0" in run.stdout
    (series,) = daemon.series("beside.grpcio")
    assert series["counters"]["accepted"] == 1000, series

"""A client-only build needs only the client's dependencies (issue 32).

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release -v

Configures this tree with TORCHMON_BUILD_SERVER=OFF against the portable
build's prefix (deploy/release/configure.sh: zig's clang, the build
machine's /usr and /usr/local hidden from every find_*), with Boost,
prometheus-cpp, snappy and curl disabled outright (zlib stays: gRPC links
it), then builds the
client library, torchmonctl and the Python extension. A configure that still
asked for any of them fails: CMAKE_DISABLE_FIND_PACKAGE_<name> makes a
REQUIRED find_package an error.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
RELEASE = os.path.join(ROOT, "deploy", "release")

pytestmark = pytest.mark.skipif(not os.environ.get("TORCHMON_RELEASE_DIR"),
                                reason="TORCHMON_RELEASE_DIR is not set: the portable "
                                "build's toolchain and libraries are made with its artefacts")


def test_the_client_configures_and_builds_without_the_servers_dependencies():
    # Under the clone, beside build.sh's own tree, not in a temporary
    # directory: the compiler cache takes paths relative to the clone
    # (deploy/dev/test.sh), so a warm run hits every file here instead of
    # compiling the client again (56 s). Emptied first: configured anew.
    build = pathlib.Path(ROOT) / "build-portable" / "client-only"
    shutil.rmtree(build, ignore_errors=True)
    configure = subprocess.run(
        [os.path.join(RELEASE, "configure.sh"), str(build), "-DCMAKE_BUILD_TYPE=Release",
         "-DTORCHMON_BUILD_SERVER=OFF",
         "-DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON",
         "-DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON",
         "-DCMAKE_DISABLE_FIND_PACKAGE_Snappy=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_CURL=ON"],
        capture_output=True, text=True, timeout=3600)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    cache = (build / "CMakeCache.txt").read_text()
    for absent in ("Snappy_DIR:PATH=/", "Boost_INCLUDE_DIR:PATH=/",
                   "TORCHMON_PROMETHEUS_CLIENT_MODEL_DIR:PATH=/"):
        assert absent not in cache, absent
    jobs = str(os.cpu_count() or 1)
    built = subprocess.run(["cmake", "--build", str(build), "-j", jobs, "--target",
                            "torchmon_client", "torchmonctl", "_torchmon"],
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    for artefact in ("client/cli/torchmonctl", "client/python/torchmon/_torchmon.abi3.so"):
        assert (build / artefact).is_file(), artefact
    usage = subprocess.run([str(build / "client/cli/torchmonctl"), "--help"],
                           capture_output=True, text=True, timeout=60)
    assert usage.returncode == 0 and "torchmonctl" in usage.stdout, usage

"""A client-only build needs only the client's dependencies (issue 32).

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release -v

Configures this tree with TORCHMON_BUILD_SERVER=OFF against the portable
build's prefix (deploy/release/deps.sh) with zig's clang, with the build
machine's /usr and /usr/local ignored by every find_* and civetweb's package
disabled, so that neither civetweb, Boost, zlib's CMake module, prometheus-cpp
nor metrics.proto can be found, then builds the client library, torchmonctl
and the Python extension. A configure that still asked for any of them fails.
"""

from __future__ import annotations

import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
RELEASE = os.path.join(ROOT, "deploy", "release")

pytestmark = pytest.mark.skipif(not os.environ.get("TORCHMON_RELEASE_DIR"),
                                reason="TORCHMON_RELEASE_DIR is not set: the portable "
                                "build's toolchain and libraries are made with its artefacts")


def script(name: str) -> str:
    out = subprocess.run([os.path.join(RELEASE, name)], capture_output=True, text=True,
                         check=True, timeout=3600)
    return out.stdout.strip().splitlines()[-1]


def test_the_client_configures_and_builds_without_the_servers_dependencies(tmp_path):
    toolchain = script("toolchain.sh")
    prefix = script("deps.sh")
    python_include = tmp_path / "python"
    subprocess.run(["cp", "-r", "/usr/include/python3.11", str(python_include)], check=True)
    subprocess.run(["cp", "/usr/include/x86_64-linux-gnu/python3.11/pyconfig.h",
                    str(python_include / "pyconfig.h")], check=True)
    build = tmp_path / "build"
    configure = subprocess.run(
        ["cmake", "-S", ROOT, "-B", str(build), "-G", "Unix Makefiles",
         f"-DCMAKE_TOOLCHAIN_FILE={toolchain}/toolchain.cmake", "-DCMAKE_BUILD_TYPE=Release",
         "-DTORCHMON_BUILD_SERVER=OFF", "-DTORCHMON_BUILD_TESTS=OFF", "-DTORCHMON_WERROR=ON",
         f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_FIND_PACKAGE_PREFER_CONFIG=ON",
         "-DCMAKE_IGNORE_PREFIX_PATH=/usr;/usr/local",
         "-DCMAKE_DISABLE_FIND_PACKAGE_civetweb=ON", "-DCMAKE_DISABLE_FIND_PACKAGE_Boost=ON",
         "-DCMAKE_DISABLE_FIND_PACKAGE_prometheus-cpp=ON",
         f"-DOPENSSL_ROOT_DIR={prefix}", "-DOPENSSL_USE_STATIC_LIBS=ON",
         f"-DZLIB_ROOT={prefix}", "-DZLIB_USE_STATIC_LIBS=ON",
         "-DPython3_EXECUTABLE=/usr/bin/python3", f"-DPython3_INCLUDE_DIR={python_include}",
         "-DTORCHMON_PROTOC=/usr/bin/protoc", "-DTORCHMON_GRPC_CPP_PLUGIN=/usr/bin/grpc_cpp_plugin"],
        capture_output=True, text=True, timeout=600)
    assert configure.returncode == 0, configure.stdout[-3000:] + configure.stderr[-3000:]
    cache = (build / "CMakeCache.txt").read_text()
    for absent in ("civetweb_DIR:PATH=/", "Boost_INCLUDE_DIR:PATH=/",
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

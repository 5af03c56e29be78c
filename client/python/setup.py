"""Builds the `_torchmon` extension with the project's CMake (see pyproject.toml).

The version is the CMake project's (the top-level CMakeLists.txt), the one
source of `torchmon.__version__`.

Environment:
  TORCHMON_WHEEL_BUILD_DIR  an existing CMake build of this tree to build the
                            `_torchmon` target in (it is not reconfigured);
                            default: a fresh Release build under build/.
  TORCHMON_WHEEL_CMAKE_ARGS extra arguments for a fresh configure.
  CMAKE_BUILD_PARALLEL_LEVEL  jobs (default: the number of CPUs).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))


def project_version() -> str:
    with open(os.path.join(ROOT, "CMakeLists.txt"), encoding="utf-8") as f:
        match = re.search(r"project\(\s*torchmon\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if match is None:
        raise RuntimeError("no `project(torchmon VERSION x.y.z)` in the top-level CMakeLists.txt")
    return match.group(1)


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[], py_limited_api=True)


class CMakeBuild(build_ext):
    def run(self) -> None:
        if shutil.which("cmake") is None:
            raise RuntimeError("building torchmon needs cmake (deploy/dev/install-deps.sh installs it)")
        super().run()

    def build_extension(self, ext: Extension) -> None:
        build_dir = os.environ.get("TORCHMON_WHEEL_BUILD_DIR")
        if build_dir:
            build_dir = os.path.abspath(build_dir)
            if not os.path.exists(os.path.join(build_dir, "CMakeCache.txt")):
                raise RuntimeError(f"TORCHMON_WHEEL_BUILD_DIR={build_dir} is not a configured CMake build")
        else:
            build_dir = os.path.abspath(os.path.join(self.build_temp, "cmake"))
            configure = [
                "cmake", "-S", ROOT, "-B", build_dir,
                "-DCMAKE_BUILD_TYPE=Release",
                "-DTORCHMON_BUILD_TESTS=OFF",
                f"-DPython3_EXECUTABLE={sys.executable}",
            ] + shlex.split(os.environ.get("TORCHMON_WHEEL_CMAKE_ARGS", ""))
            subprocess.run(configure, check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
        subprocess.run(["cmake", "--build", build_dir, "--target", "_torchmon", "-j", jobs],
                       check=True)
        built = os.path.join(build_dir, "client", "python", "torchmon", "_torchmon.abi3.so")
        if not os.path.exists(built):
            raise RuntimeError(f"the CMake build made no {built}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(built, target)


# Beside the package, not in it: `site` runs it at every interpreter start
# (TORCHMON_TORCH_METRICS=1 enables PyTorch's own metrics; without it, one
# environment read and nothing loaded).
PTH = "torchmon-torch-metrics.pth"


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode: bool = True) -> list:
        return super().get_outputs(include_bytecode) + [os.path.join(self.build_lib, PTH)]


setup(
    version=project_version(),
    ext_modules=[CMakeExtension("torchmon._torchmon")],
    cmdclass={"build_ext": CMakeBuild, "build_py": BuildPyWithPth},
    # One wheel for every CPython >= 3.10: cp310-abi3.
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)

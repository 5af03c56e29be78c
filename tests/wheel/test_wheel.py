"""The torchmon wheel as users get it (docs/install.md): built by
deploy/dev/build-wheels.sh, installed with plain `pip install` into fresh venvs
of every CPython the machine has from 3.10 on (pyenv's and Debian's), used
against a real daemon, audited for the libraries it needs, and refused by an
interpreter it does not support. The whole tests/python suite runs once
more with the module from the wheel beside these (suite_from_wheel.sh).

TORCHMON_WHEEL_DIR names the directory holding the wheel (CTest builds it
there first: the wheel_build fixture, tests/wheel/CMakeLists.txt).
"""

import glob
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

from torchmon_testing import OWN_USER, Daemon, load_source, project_version  # noqa: E402

repair_wheel = load_source("repair_wheel", "deploy/dev/repair_wheel.py")

SUPPORTED_MINORS = (10, 11, 12, 13)



@pytest.fixture(scope="session")
def wheel():
    wheel_dir = os.environ.get("TORCHMON_WHEEL_DIR", os.path.join(ROOT, "dist"))
    wheels = glob.glob(os.path.join(wheel_dir, "torchmon-*.whl"))
    assert len(wheels) == 1, f"expected one wheel in {wheel_dir} (deploy/dev/build-wheels.sh), found {wheels}"
    return wheels[0]


def pyenv_pythons():
    """{(3, minor): path} of pyenv's CPythons."""
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "versions", "3.*", "bin", "python3"))):
        match = re.search(r"/versions/3\.(\d+)\.\d+/", path)
        if match:
            out[(3, int(match.group(1)))] = path
    return out


def interpreters():
    pythons = {f"pyenv-3.{minor}": path for (_, minor), path in pyenv_pythons().items()
               if minor in SUPPORTED_MINORS}
    pythons["debian"] = "/usr/bin/python3"
    return pythons


def test_every_supported_python_is_on_this_machine():
    # The tests below run once per interpreter found; this one makes sure a
    # missing interpreter is a failure, not a silently shorter run.
    minors = {minor for (_, minor) in pyenv_pythons()}
    assert set(SUPPORTED_MINORS) <= minors, f"pyenv has 3.{sorted(minors)}"


def make_venv(python, where, *extra):
    subprocess.run([python, "-m", "venv", *extra, where], check=True)
    return os.path.join(where, "bin", "python")


def pip_install(venv_python, wheel):
    return subprocess.run([venv_python, "-m", "pip", "install", "--no-index",
                           "--disable-pip-version-check", wheel],
                          capture_output=True, text=True, timeout=300)


def clean_env():
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    return env


def test_metadata(wheel):
    name = os.path.basename(wheel)
    assert re.fullmatch(rf"torchmon-{re.escape(project_version())}-cp310-abi3-manylinux_2_\d+_x86_64\.whl",
                        name), name
    with zipfile.ZipFile(wheel) as z:
        dist_info = f"torchmon-{project_version()}.dist-info"
        metadata = z.read(f"{dist_info}/METADATA").decode()
        tags = z.read(f"{dist_info}/WHEEL").decode()
        names = z.namelist()
    assert "Name: torchmon\n" in metadata
    assert f"Version: {project_version()}\n" in metadata
    assert "Requires-Python: >=3.10\n" in metadata
    assert "License: BSD-3-Clause\n" in metadata
    assert "Requires-Dist" not in metadata  # torch is not required
    assert f"{dist_info}/LICENSE" in names
    assert "Copyright (c) 2026, the torchmon authors" in zipfile.ZipFile(wheel).read(
        f"{dist_info}/LICENSE").decode()
    assert re.search(r"^Tag: cp310-abi3-manylinux_2_\d+_x86_64$", tags, re.M), tags
    assert "torchmon/_torchmon.abi3.so" in names
    assert "torchmon/py.typed" in names and "torchmon/__init__.pyi" in names
    # Beside the package, where `site` runs it: the TORCHMON_TORCH_METRICS switch.
    assert "torchmon-torch-metrics.pth" in names
    assert "torchmon/_torch_metrics.py" in names


def test_every_needed_library_is_inside_the_wheel_or_glibc_or_the_cxx_runtime(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    elf_files = [p for p in glob.glob(str(tmp_path / "**" / "*"), recursive=True)
                 if os.path.isfile(p) and repair_wheel.is_elf(p)]
    libs = {os.path.basename(p) for p in glob.glob(str(tmp_path / "torchmon.libs" / "*"))}
    # gRPC, protobuf, absl and OpenSSL at least: the extension links them.
    for expected in ("libgrpc++-", "libprotobuf-", "libabsl_", "libssl-", "libcrypto-"):
        assert any(lib.startswith(expected) for lib in libs), (expected, sorted(libs))
    unresolved = []
    for path in elf_files:
        for soname in repair_wheel.needed(path):
            if soname not in repair_wheel.SYSTEM_LIBRARIES and soname not in libs:
                unresolved.append((os.path.relpath(path, tmp_path), soname))
        dynamic = subprocess.run(["readelf", "-d", path], capture_output=True, text=True,
                                 check=True).stdout
        assert "$ORIGIN" in dynamic, (path, dynamic)
    assert unresolved == [], unresolved
    # The extension exports its init function and the backend torch looks
    # up by name, nothing of the static client, gRPC templates included.
    extension = str(tmp_path / "torchmon" / "_torchmon.abi3.so")
    symbols = subprocess.run(["nm", "-D", "--defined-only", extension], capture_output=True,
                             text=True, check=True).stdout.splitlines()
    assert sorted(line.split()[-1] for line in symbols) == [
        "PyInit__torchmon", "c10_monitor_wait_counter_dynamic_backend_init_v1"], symbols


@pytest.mark.parametrize("name", sorted(interpreters()))
def test_wheel_installs_and_works_in_a_fresh_venv(name, wheel, tmp_path):
    python = interpreters()[name]
    venv_python = make_venv(python, str(tmp_path / "venv"))
    out = pip_install(venv_python, wheel)
    assert out.returncode == 0, out.stdout + out.stderr
    with tempfile.TemporaryDirectory(prefix="torchmon-wheel.") as tmpdir:
        daemon = Daemon(tmpdir)
        try:
            run = subprocess.run(
                [venv_python, os.path.join(HERE, "smoke.py"), daemon.target,
                 json.dumps(sorted(repair_wheel.SYSTEM_LIBRARIES))],
                capture_output=True, text=True, timeout=120, env=clean_env(), cwd=str(tmp_path))
            assert run.returncode == 0, run.stdout + run.stderr
            seen = json.loads(run.stdout)
            (window, *_) = daemon.wait_windows("wheel.step_ms", 2)
            (event,) = daemon.ctl("events", "wheel.epoch_end")["events"]
        finally:
            daemon.stop()

    # Imported from the venv, not the build tree; versioned as the project.
    assert seen["file"].startswith(str(tmp_path / "venv")), seen["file"]
    assert seen["version"] == project_version()
    assert seen["aggregation"] == ["Aggregation.MEAN", "MEAN", 2]
    # Nothing but glibc and the C++ runtime came from the host.
    assert seen["foreign_libraries"] == [], seen["foreign_libraries"]
    # In process, as torch.monitor: count, get() and the window event.
    assert seen["count"] == 100
    assert seen["get"] == {"MEAN": 50.5, "COUNT": 100.0, "MAX": 100.0}
    assert {"name": "torch.monitor.Stat",
            "data": {"wheel.step_ms.mean": 50.5, "wheel.step_ms.count": 100.0,
                     "wheel.step_ms.max": 100.0}} in seen["events"]
    assert seen["flushed"] is True and seen["errors"] == []
    assert seen["stats"]["samples_added"] == seen["stats"]["samples_delivered"] == 101
    # The daemon's view, read back with torchmonctl.
    assert window["accepted"] == 100
    aggregates = window["aggregates"]
    assert aggregates["mean"] == 50.5 and aggregates["count"] == 100 and aggregates["max"] == 100
    assert abs(aggregates["p99"] - 99) <= 0.01 * 99, aggregates
    assert window["labels"] == {"python": seen["python"], "user": OWN_USER}
    assert event["data"] == {"epoch": 3, "loss": 0.25, "tag": "best", "saved": True}


def test_an_unsupported_python_refuses_the_wheel_at_install_time(wheel, tmp_path):
    old = {minor: path for (_, minor), path in pyenv_pythons().items() if minor < 10}
    assert 9 in old, "pyenv's CPython 3.9 is the unsupported interpreter this test uses"
    venv_python = make_venv(old[9], str(tmp_path / "venv"))
    out = pip_install(venv_python, wheel)
    assert out.returncode != 0
    message = out.stdout + out.stderr
    assert ("is not a supported wheel on this platform" in message
            or "requires a different Python" in message), message
    probe = subprocess.run([venv_python, "-c", "import torchmon"], capture_output=True, text=True,
                           env=clean_env(), cwd=str(tmp_path))
    assert probe.returncode != 0 and "No module named 'torchmon'" in probe.stderr


@pytest.fixture(scope="module")
def debian_venv(wheel, tmp_path_factory):
    """Debian's python3 (where python3-torch, python3-grpcio and pytest live)
    in a venv that sees them, with torchmon installed from the wheel."""
    venv = tmp_path_factory.mktemp("debian") / "venv"
    venv_python = make_venv("/usr/bin/python3", str(venv), "--system-site-packages")
    out = pip_install(venv_python, wheel)
    assert out.returncode == 0, out.stdout + out.stderr
    return venv_python


@pytest.mark.parametrize("torchmon_first", [True, False])
def test_the_wheel_lives_beside_debians_grpcio_and_torch_in_one_process(torchmon_first,
                                                                        debian_venv, tmp_path):
    # Debian's python3-grpcio and python3-torch use the system's libgrpc and
    # libprotobuf; the wheel brings its own copies. Both must work in one
    # process, whichever is imported first.
    venv_python = debian_venv
    with tempfile.TemporaryDirectory(prefix="torchmon-wheel.") as tmpdir:
        daemon = Daemon(tmpdir)
        try:
            use_torchmon = (
                "import datetime, torchmon\n"
                f"c = torchmon.Client(target={daemon.target!r}, labels_from_environment=False)\n"
                "s = torchmon.Stat('beside.grpcio', [torchmon.COUNT], datetime.timedelta(seconds=60),"
                " client=c)\n"
                "for i in range(1000): s.add(float(i))\n"
                "assert c.flush(10)\n")
            use_grpcio = (
                "import grpc, torch\n"
                f"ch = grpc.insecure_channel({daemon.target!r})\n"
                "grpc.channel_ready_future(ch).result(timeout=10)\n"
                "print('grpcio ready')\n")
            code = use_torchmon + use_grpcio if torchmon_first else use_grpcio + use_torchmon
            run = subprocess.run([venv_python, "-c", code], capture_output=True, text=True,
                                 timeout=120, env=clean_env(), cwd=str(tmp_path))
            assert run.returncode == 0, run.stdout + run.stderr
            assert "grpcio ready" in run.stdout
            (series,) = daemon.series("beside.grpcio")
            assert series["counters"]["accepted"] == 1000, series
        finally:
            daemon.stop()


def raw_wheel(tmp_path, arch, source, *gcc_flags):
    """A wheel as pip leaves it before repair_wheel.py: `source` compiled by
    this machine's gcc (x86-64) as the extension, tagged linux_<arch>."""
    (tmp_path / "ext.c").write_text(source)
    extension = tmp_path / "_torchmon.abi3.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", *gcc_flags, str(tmp_path / "ext.c"), "-o",
                    str(extension)], check=True, timeout=120)
    wheel = tmp_path / f"torchmon-0.1.0-cp310-abi3-linux_{arch}.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        z.write(extension, "torchmon/_torchmon.abi3.so")
        z.writestr("torchmon-0.1.0.dist-info/WHEEL",
                   f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp310-abi3-linux_{arch}\n")
        z.writestr("torchmon-0.1.0.dist-info/METADATA",
                   "Metadata-Version: 2.1\nName: torchmon\nVersion: 0.1.0\n")
        z.writestr("torchmon-0.1.0.dist-info/RECORD", "")
    return wheel


def repair(wheel, out, *args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "deploy", "dev", "repair_wheel.py"),
                           str(wheel), "-w", str(out), *args],
                          capture_output=True, text=True, timeout=300)


def test_repair_refuses_an_extension_of_another_architecture_than_the_tag(tmp_path):
    """repair_wheel.py takes the wheel's architecture from its tag, which the
    portable build sets for aarch64 (_PYTHON_HOST_PLATFORM): an x86-64
    extension in a wheel tagged linux_aarch64 is refused, naming the file and
    its machine, and nothing is written."""
    source = "#include <stdio.h>\nint PyInit__torchmon(void) { return puts(\"x\"); }\n"
    out = tmp_path / "out"
    result = repair(raw_wheel(tmp_path, "aarch64", source), out)
    assert result.returncode != 0, result.stdout
    assert ("torchmon/_torchmon.abi3.so is not an aarch64 ELF file (e_machine 62), "
            "but the wheel is tagged linux_aarch64") in result.stderr, result.stderr
    assert not out.exists() or not list(out.iterdir())
    # The same extension under its own architecture's tag is repaired.
    result = repair(raw_wheel(tmp_path, "x86_64", source), out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert [p.name for p in out.iterdir()] == [
        "torchmon-0.1.0-cp310-abi3-manylinux_2_2_x86_64.whl"], list(out.iterdir())


def test_repair_refuses_to_guess_the_glibc_of_an_extension_that_names_none(tmp_path):
    """An extension that asks for no GLIBC_ version gives the wheel's tag
    nothing to read: refused, naming --min-glibc, not tagged manylinux_0_0."""
    wheel = raw_wheel(tmp_path, "x86_64", "int PyInit__torchmon(void) { return 0; }\n", "-nostdlib")
    result = repair(wheel, tmp_path / "out")
    assert result.returncode != 0
    assert "asks for a GLIBC_ version: give the glibc it needs with --min-glibc" in result.stderr
    # With the floor given, it is tagged for that floor.
    tagged = repair(wheel, tmp_path / "out", "--min-glibc", "2.28")
    assert tagged.returncode == 0, tagged.stderr
    assert "manylinux_2_28_x86_64.whl" in tagged.stdout, tagged.stdout

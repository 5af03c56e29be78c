"""torchmon installed as users install it (docs/install.md): `cmake --install`
into a temporary prefix, a C++ project of its own built against it with
find_package and with pkg-config and run against the installed torchmond, and
the Debian packages made by `cpack -G DEB`, unpacked, checked file by file,
their unit verified and their configuration checked by the packaged daemon.

TORCHMON_INSTALL_BUILD_DIR names the build to install from; deploy/dev/test.sh
passes its Release build configured with TORCHMON_BUILD_TESTS=OFF, so the
install needs no test target. Default: this CTest's build (TORCHMON_BUILD_DIR).
"""

import glob
import grp
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import torchmon_testing  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "deploy_conftest", os.path.join(ROOT, "tests", "deploy", "conftest.py"))
deploy_conftest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(deploy_conftest)

BUILD = os.path.abspath(os.environ.get("TORCHMON_INSTALL_BUILD_DIR")
                        or os.environ.get("TORCHMON_BUILD_DIR")
                        or os.path.join(ROOT, "build"))
VALUES = range(1, 101)


def run(*args, **kwargs):
    out = subprocess.run(args, capture_output=True, text=True, timeout=600, **kwargs)
    assert out.returncode == 0, f"{args}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def project_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(\s*torchmon\s+VERSION\s+([0-9.]+)", f.read()).group(1)


@pytest.fixture(scope="module")
def prefix():
    with tempfile.TemporaryDirectory(prefix="torchmon-install.") as tmp:
        run("cmake", "--install", BUILD, "--prefix", tmp)
        yield tmp


def one(pattern):
    (path,) = glob.glob(pattern)
    return path


def check_consumer_run(consumer, bindir, stat):
    """Runs a consumer binary against the installed torchmond (from `bindir`)
    and reads back, with the installed torchmonctl, what the daemon got."""
    saved = torchmon_testing.TORCHMOND, torchmon_testing.TORCHMONCTL
    torchmon_testing.TORCHMOND = os.path.join(bindir, "torchmond")
    torchmon_testing.TORCHMONCTL = os.path.join(bindir, "torchmonctl")
    try:
        with tempfile.TemporaryDirectory(prefix="torchmon-consumer.") as tmpdir:
            daemon = torchmon_testing.Daemon(tmpdir)
            try:
                out = run(consumer, daemon.target, stat)
                assert out.stdout.strip() == "added=100 dropped=0", out.stdout
                (series,) = daemon.series(stat)
                assert series["labels"] == {"built_with": "installed"}, series
                assert series["counters"]["accepted"] == len(VALUES), series
                (event,) = daemon.ctl("events", "consumer_done")["events"]
                assert event["data"] == {"samples": 100}
            finally:
                daemon.stop()
    finally:
        torchmon_testing.TORCHMOND, torchmon_testing.TORCHMONCTL = saved


def test_cmake_install_puts_every_part_in_its_place(prefix):
    for path in ("bin/torchmond", "bin/torchmonctl"):
        assert os.access(os.path.join(prefix, path), os.X_OK), path
    for path in ("include/torchmon/client.h", "include/torchmon/channel.h",
                 "include/torchmon/protocol/protocol.h", "include/torchmon/v1/torchmon.pb.h",
                 "include/torchmon/v1/torchmon.grpc.pb.h",
                 "share/torchmon/proto/torchmon/v1/torchmon.proto",
                 "etc/torchmon/torchmond.conf", "lib/sysusers.d/torchmon.conf",
                 "lib/tmpfiles.d/torchmon.conf", "share/doc/torchmond/copyright"):
        assert os.path.isfile(os.path.join(prefix, path)), path
    one(os.path.join(prefix, "lib*", "libtorchmon_client.a"))
    one(os.path.join(prefix, "lib*", "libtorchmon_proto.a"))
    one(os.path.join(prefix, "lib*", "cmake", "torchmon", "torchmonConfig.cmake"))
    one(os.path.join(prefix, "lib*", "pkgconfig", "torchmon.pc"))
    # A test tool is not part of a default install.
    assert not os.path.exists(os.path.join(prefix, "bin", "torchmon-loadgen"))
    # The unit names the installed binary and configuration.
    with open(os.path.join(prefix, "lib/systemd/system/torchmond.service")) as f:
        unit = f.read()
    assert f"ExecStart={prefix}/bin/torchmond --config {prefix}/etc/torchmon/torchmond.conf\n" in unit
    assert "@TORCHMOND" not in unit


def test_an_out_of_tree_project_finds_the_package_and_talks_to_the_daemon(prefix, tmp_path):
    build = tmp_path / "consumer-build"
    run("cmake", "-S", os.path.join(HERE, "consumer"), "-B", str(build),
        f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release")
    run("cmake", "--build", str(build), "-j2")
    check_consumer_run(str(build / "consumer"), os.path.join(prefix, "bin"), "consumer.cmake")


def test_a_newer_minor_version_is_not_accepted_by_the_package(prefix, tmp_path):
    # 0.x: SameMinorVersion. Asking for the next minor must fail to configure.
    major, minor, _ = project_version().split(".")
    project = tmp_path / "wants-newer"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(p LANGUAGES CXX)\n"
        f"find_package(torchmon {major}.{int(minor) + 1} CONFIG REQUIRED)\n")
    out = subprocess.run(["cmake", "-S", str(project), "-B", str(tmp_path / "b"),
                          f"-DCMAKE_PREFIX_PATH={prefix}"], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode != 0
    assert f"torchmonConfig.cmake, version: {project_version()}" in out.stderr, out.stderr
    assert "not accepted" in out.stderr


def test_pkg_config_builds_the_same_consumer(prefix, tmp_path):
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.dirname(one(os.path.join(prefix, "lib*", "pkgconfig",
                                                              "torchmon.pc")))
    version = run("pkg-config", "--modversion", "torchmon", env=env).stdout.strip()
    assert version == project_version()
    # Relocatable: the prefix is found from the .pc file's own place.
    includedir = run("pkg-config", "--variable=includedir", "torchmon", env=env).stdout.strip()
    assert os.path.realpath(includedir) == os.path.realpath(os.path.join(prefix, "include"))
    flags = run("pkg-config", "--cflags", "--libs", "torchmon", env=env).stdout.split()
    binary = tmp_path / "consumer"
    run("g++", "-std=c++17", "-O1", os.path.join(HERE, "consumer", "main.cc"), "-o", str(binary),
        *flags)
    check_consumer_run(str(binary), os.path.join(prefix, "bin"), "consumer.pkgconfig")


@pytest.fixture(scope="module")
def packages():
    with tempfile.TemporaryDirectory(prefix="torchmon-deb.") as tmp:
        run("cpack", "-G", "DEB", "-B", tmp, cwd=BUILD)
        debs = {run("dpkg-deb", "-f", path, "Package").stdout.strip(): path
                for path in glob.glob(os.path.join(tmp, "*.deb"))}
        assert set(debs) == {"torchmond", "libtorchmon-dev"}, debs
        root = os.path.join(tmp, "root")
        for path in debs.values():
            run("dpkg-deb", "-x", path, root)
        yield debs, root


def test_packages_hold_their_files_and_depend_on_the_runtime_libraries(packages):
    debs, root = packages
    version = f"{project_version()}-1"
    daemon_files = run("dpkg-deb", "-c", debs["torchmond"]).stdout
    dev_files = run("dpkg-deb", "-c", debs["libtorchmon-dev"]).stdout
    for path in ("./usr/bin/torchmond", "./usr/bin/torchmonctl", "./etc/torchmon/torchmond.conf",
                 "./lib/systemd/system/torchmond.service", "./usr/lib/sysusers.d/torchmon.conf",
                 "./usr/lib/tmpfiles.d/torchmon.conf", "./usr/share/doc/torchmond/copyright",
                 "./usr/share/doc/torchmond/changelog.Debian.gz",
                 "./usr/share/doc/torchmond/install.md"):
        assert f" {path}\n" in daemon_files, path
    for path in ("./usr/include/torchmon/client.h", "./usr/lib/libtorchmon_client.a",
                 "./usr/lib/cmake/torchmon/torchmonConfig.cmake",
                 "./usr/lib/pkgconfig/torchmon.pc", "./usr/share/doc/libtorchmon-dev/copyright"):
        assert f" {path}\n" in dev_files, path
    assert "include/" not in daemon_files and "bin/" not in dev_files
    assert "BSD-3-Clause" in open(os.path.join(root, "usr/share/doc/torchmond/copyright")).read()

    fields = {name: run("dpkg-deb", "-f", debs["torchmond"], name).stdout.strip()
              for name in ("Version", "Architecture", "Depends")}
    assert fields["Version"] == version
    # dpkg-shlibdeps found what the binaries link.
    for library in ("libc6", "libgrpc++1.51", "libprotobuf32", "libcivetweb1", "libstdc++6"):
        assert re.search(rf"(^|, ){re.escape(library)}( |,|$)", fields["Depends"]), fields
    dev_depends = run("dpkg-deb", "-f", debs["libtorchmon-dev"], "Depends").stdout
    for package in ("libgrpc++-dev", "libprotobuf-dev", "libabsl-dev"):
        assert package in dev_depends

    control = os.path.join(os.path.dirname(root), "control")
    run("dpkg-deb", "-e", debs["torchmond"], control)
    with open(os.path.join(control, "conffiles")) as f:
        assert f.read().split() == ["/etc/torchmon/torchmond.conf"]
    for script in ("postinst", "prerm", "postrm"):
        assert os.access(os.path.join(control, script), os.X_OK), script
        run("sh", "-n", os.path.join(control, script))


def test_the_packaged_unit_verifies_and_names_the_packaged_binary(packages, tmp_path):
    _, root = packages
    with open(os.path.join(root, "lib/systemd/system/torchmond.service")) as f:
        unit = f.read()
    assert "ExecStart=/usr/bin/torchmond --config /etc/torchmon/torchmond.conf\n" in unit
    assert "ExecStartPre=/usr/bin/torchmond --check-config /etc/torchmon/torchmond.conf\n" in unit
    # verify needs the binary where the unit says it is: point the unit's
    # paths into the unpacked root (systemd-analyze's --root also wants the
    # whole system there: sysinit.target, /bin/kill).
    copy = tmp_path / "torchmond.service"
    copy.write_text(unit.replace("/usr/bin/torchmond", os.path.join(root, "usr/bin/torchmond"))
                        .replace("/etc/torchmon/", os.path.join(root, "etc/torchmon/")))
    out = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr
    with open(os.path.join(root, "usr/lib/sysusers.d/torchmon.conf")) as f:
        assert re.search(r"(?m)^u torchmon ", f.read())
    with open(os.path.join(root, "usr/lib/tmpfiles.d/torchmon.conf")) as f:
        tmpfiles = f.read()
    assert re.search(r"(?m)^d /run/torchmon\s+0710 torchmon torchmon", tmpfiles)


def test_the_packaged_daemon_checks_the_packaged_configuration(packages, tmp_path):
    _, root = packages
    with open(os.path.join(root, "etc/torchmon/torchmond.conf")) as f:
        text = f.read()
    deploy_conftest.check_config(text, tmp_path, os.path.join(root, "usr/bin/torchmond"))


def test_lintian_reports_only_the_tags_docs_install_md_explains(packages):
    if shutil.which("lintian") is None:
        pytest.fail("lintian is not installed (deploy/dev/install-deps.sh --test installs it)")
    debs, _ = packages
    out = subprocess.run(["lintian", "--tag-display-limit", "0", *debs.values()],
                         capture_output=True, text=True, timeout=300)
    tags = set(re.findall(r"^[EWIXP]: [^:]+: ([a-z0-9-]+)", out.stdout, re.M))
    with open(os.path.join(ROOT, "docs", "install.md")) as f:
        docs = f.read()
    unexplained = sorted(t for t in tags if f"`{t}`" not in docs)
    assert unexplained == [], out.stdout

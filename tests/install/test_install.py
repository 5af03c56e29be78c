"""torchmon installed as users install it (docs/install.md): `cmake --install`
of the components daemon and dev into a temporary prefix, a C++ project of
its own built against it with find_package and with pkg-config and run
against the installed torchmond, and the Debian packages made by
`cpack -G DEB`, unpacked, checked file by file, their unit verified, their
configuration checked by the packaged daemon and their maintainer scripts run
against stand-ins of the system tools.

TORCHMON_INSTALL_BUILD_DIR names the build to install from; deploy/dev/test.sh
passes its Release build configured with TORCHMON_BUILD_TESTS=OFF, so the
install needs no test target. Default: this CTest's build (TORCHMON_BUILD_DIR).
"""

import glob
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import torchmon_testing  # noqa: E402
from torchmon_testing import load_source, project_version, wait_for  # noqa: E402

deploy_conftest = load_source("deploy_conftest", "tests/deploy/conftest.py")

BUILD = os.path.abspath(os.environ.get("TORCHMON_INSTALL_BUILD_DIR")
                        or os.environ.get("TORCHMON_BUILD_DIR")
                        or os.path.join(ROOT, "build"))
VALUES = range(1, 101)


def run(*args, **kwargs):
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, **kwargs)
    assert out.returncode == 0, f"{args}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out



def find_one(top, name):
    """The one file called `name` under `top`: the library directory is lib
    or, with GNUInstallDirs on Debian for the prefix /usr, lib/<multiarch>."""
    found = [os.path.join(d, name) for d, _, files in os.walk(top) if name in files]
    assert len(found) == 1, (name, found)
    return found[0]


def install(prefix, *components, destdir=None):
    env = dict(os.environ)
    if destdir is not None:
        env["DESTDIR"] = destdir
    for component in components:
        run("cmake", "--install", BUILD, "--prefix", prefix, "--component", component, env=env)


@pytest.fixture(scope="module")
def prefix():
    with tempfile.TemporaryDirectory(prefix="torchmon-install.") as tmp:
        install(tmp, "daemon", "dev")
        yield tmp


def check_consumer_run(consumer, bindir, stat_name):
    """Runs a consumer binary against the installed torchmond (from `bindir`)
    and reads back, with the installed torchmonctl, what the daemon got."""
    saved = torchmon_testing.TORCHMOND, torchmon_testing.TORCHMONCTL
    torchmon_testing.TORCHMOND = os.path.join(bindir, "torchmond")
    torchmon_testing.TORCHMONCTL = os.path.join(bindir, "torchmonctl")
    try:
        with tempfile.TemporaryDirectory(prefix="torchmon-consumer.") as tmpdir:
            daemon = torchmon_testing.Daemon(tmpdir)
            try:
                out = run(consumer, daemon.target, stat_name, str(torchmon_testing.WINDOW_MS))
                assert out.stdout.strip() == "added=100 dropped=0", out.stdout
                # The samples fall into one window, or two if a window edge
                # passed while they were added: wait until every one is closed.
                def all_closed():
                    windows = daemon.windows(stat_name)
                    return windows if sum(w["accepted"] for w in windows) >= len(VALUES) else []

                windows = wait_for(all_closed, 10, 0.05)
                assert windows, daemon.windows(stat_name)
                assert 1 <= len(windows) <= 2, windows
                assert all(w["labels"] == {"built_with": "installed",
                                           "user": torchmon_testing.OWN_USER}
                           for w in windows), windows
                assert all(not w["partial"] and w["capped"] == 0 for w in windows), windows
                assert sum(w["accepted"] for w in windows) == len(VALUES)
                assert sum(w["aggregates"]["count"] for w in windows) == len(VALUES)
                assert sum(w["aggregates"]["sum"] for w in windows) == sum(VALUES)
                assert max(w["aggregates"]["max"] for w in windows) == max(VALUES)
                (series,) = daemon.series(stat_name)
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
                 "include/torchmon/protocol/protocol.h", "include/torchmon/protocol/json.h",
                 "include/torchmon/protocol/socket_path.h", "include/torchmon/v1/torchmon.pb.h",
                 "include/torchmon/v1/torchmon.grpc.pb.h", "include/torchmon/v1/torchmon.proto",
                 "etc/torchmon/torchmond.conf", "lib/sysusers.d/torchmon.conf",
                 "lib/tmpfiles.d/torchmon.conf", "share/doc/torchmond/copyright",
                 "share/doc/libtorchmon-dev/copyright"):
        assert os.path.isfile(os.path.join(prefix, path)), path
    libdir = os.path.dirname(find_one(prefix, "libtorchmon_client.a"))
    assert os.path.isfile(os.path.join(libdir, "libtorchmon_proto.a"))
    for path in ("cmake/torchmon/torchmonConfig.cmake",
                 "cmake/torchmon/torchmonConfigVersion.cmake",
                 "cmake/torchmon/torchmonTargets.cmake", "pkgconfig/torchmon.pc"):
        assert os.path.isfile(os.path.join(libdir, path)), path
    # A test tool and the Python module are not part of these components.
    assert not os.path.exists(os.path.join(prefix, "bin", "torchmon-loadgen"))
    assert not glob.glob(os.path.join(prefix, "lib", "python3*"))
    # The unit names the installed binary, configuration and docs.
    with open(os.path.join(prefix, "lib/systemd/system/torchmond.service")) as f:
        unit = f.read()
    assert f"ExecStart={prefix}/bin/torchmond --config {prefix}/etc/torchmon/torchmond.conf\n" in unit
    assert f"Documentation=file:{prefix}/share/doc/torchmond/deploy.md " in unit
    assert not re.search(r"@[A-Z_]+@", unit), unit


@pytest.mark.parametrize("install_prefix, conf, unit_dir", [
    # Debian's places (the package uses this prefix), and GNUInstallDirs'
    # rule for /opt: /etc/opt/<name>.
    ("/usr", "/etc/torchmon/torchmond.conf", "/lib/systemd/system"),
    ("/opt/torchmon", "/etc/opt/torchmon/torchmon/torchmond.conf",
     "/opt/torchmon/lib/systemd/system"),
])
def test_the_configuration_goes_where_gnuinstalldirs_puts_it_for_the_prefix(
        install_prefix, conf, unit_dir, tmp_path):
    destdir = str(tmp_path / "root")
    install(install_prefix, "daemon", destdir=destdir)
    assert os.path.isfile(destdir + conf)
    with open(f"{destdir}{unit_dir}/torchmond.service") as f:
        unit = f.read()
    assert f"ExecStart={install_prefix}/bin/torchmond --config {conf}\n" in unit
    assert os.path.isfile(f"{destdir}{install_prefix}/lib/sysusers.d/torchmon.conf")
    assert os.path.isfile(f"{destdir}{install_prefix}/lib/tmpfiles.d/torchmon.conf")


def test_an_out_of_tree_project_finds_the_package_and_talks_to_the_daemon(prefix, tmp_path):
    build = tmp_path / "consumer-build"
    run("cmake", "-S", os.path.join(HERE, "consumer"), "-B", str(build),
        f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release")
    run("cmake", "--build", str(build))
    check_consumer_run(str(build / "consumer"), os.path.join(prefix, "bin"), "consumer.cmake")


def test_the_package_version_is_same_major_and_honours_ranges(prefix, tmp_path):
    major, minor, _ = (int(n) for n in project_version().split("."))
    requests = {
        f"{major}.{minor}": True,
        f"{major}.{minor}.0": True,
        f"{major}.{minor}...<{major}.{minor + 1}": True,  # one minor only
        f"{major}.{minor + 1}": False,                    # newer than installed
        f"{major + 1}.0": False,                          # another major
    }
    if minor > 0:
        requests[f"{major}.{minor - 1}"] = True  # SameMajorVersion: an older minor is fine
    if major == 0 and minor > 0:
        requests[f"0.{minor - 1}...<0.{minor}"] = False
    project = tmp_path / "versions"
    project.mkdir()
    lines = ["cmake_minimum_required(VERSION 3.19)", "project(p LANGUAGES CXX)"]
    for request in requests:
        lines += [f"find_package(torchmon {request} CONFIG QUIET)",
                  f'message(STATUS "request {request}: ${{torchmon_FOUND}}")',
                  "unset(torchmon_FOUND)", 'unset(torchmon_DIR CACHE)']
    (project / "CMakeLists.txt").write_text("\n".join(lines) + "\n")
    out = run("cmake", "-S", str(project), "-B", str(tmp_path / "b"),
              f"-DCMAKE_PREFIX_PATH={prefix}")
    found = dict(re.findall(r"-- request (\S+): (\w*)", out.stdout))
    assert {r: found[r] in ("1", "TRUE") for r in requests} == requests, out.stdout


def test_pkg_config_builds_the_same_consumer(prefix, tmp_path):
    env = dict(os.environ)
    env["PKG_CONFIG_PATH"] = os.path.dirname(find_one(prefix, "torchmon.pc"))
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
        control = os.path.join(tmp, "control")
        run("dpkg-deb", "-e", debs["torchmond"], control)
        yield debs, root, control


def test_packages_hold_their_files_and_depend_on_the_runtime_libraries(packages):
    debs, root, control = packages
    version = f"{project_version()}-1"
    daemon_files = run("dpkg-deb", "-c", debs["torchmond"]).stdout
    dev_files = run("dpkg-deb", "-c", debs["libtorchmon-dev"]).stdout
    for path in ("./usr/bin/torchmond", "./usr/bin/torchmonctl", "./etc/torchmon/torchmond.conf",
                 "./lib/systemd/system/torchmond.service", "./usr/lib/sysusers.d/torchmon.conf",
                 "./usr/lib/tmpfiles.d/torchmon.conf", "./usr/share/doc/torchmond/copyright",
                 "./usr/share/doc/torchmond/changelog.Debian.gz",
                 "./usr/share/doc/torchmond/install.md"):
        assert f" {path}\n" in daemon_files, path
    for path in ("./usr/include/torchmon/client.h", "./usr/include/torchmon/protocol/protocol.h",
                 "./usr/include/torchmon/v1/torchmon.pb.h",
                 "./usr/include/torchmon/v1/torchmon.grpc.pb.h",
                 "./usr/share/doc/libtorchmon-dev/copyright"):
        assert f" {path}\n" in dev_files, path
    # /usr/lib, or /usr/lib/<multiarch> from a build configured with prefix /usr.
    for name in ("libtorchmon_client.a", "libtorchmon_proto.a",
                 "cmake/torchmon/torchmonConfig.cmake", "cmake/torchmon/torchmonTargets.cmake",
                 "pkgconfig/torchmon.pc"):
        assert re.search(rf" \./usr/lib/([a-z0-9_]+-linux-gnu[a-z0-9_]*/)?{re.escape(name)}\n",
                         dev_files), name
    assert "include/" not in daemon_files and "bin/" not in dev_files
    assert "BSD-3-Clause" in open(os.path.join(root, "usr/share/doc/torchmond/copyright")).read()

    fields = {name: run("dpkg-deb", "-f", debs["torchmond"], name).stdout.strip()
              for name in ("Version", "Architecture", "Depends")}
    assert fields["Version"] == version
    assert run("dpkg-deb", "-f", debs["libtorchmon-dev"], "Version").stdout.strip() == version
    # dpkg-shlibdeps found what the binaries link.
    for library in ("libc6", "libgrpc++1.51", "libprotobuf32", "libssl3", "libstdc++6"):
        assert re.search(rf"(^|, ){re.escape(library)}( |,|$)", fields["Depends"]), fields
    dev_depends = run("dpkg-deb", "-f", debs["libtorchmon-dev"], "Depends").stdout
    for package in ("libgrpc++-dev", "libprotobuf-dev", "libabsl-dev"):
        assert package in dev_depends

    with open(os.path.join(control, "conffiles")) as f:
        assert f.read().split() == ["/etc/torchmon/torchmond.conf"]
    for script in ("postinst", "prerm", "postrm"):
        assert os.access(os.path.join(control, script), os.X_OK), script
        run("sh", "-n", os.path.join(control, script))


def read_unit(text):
    """section -> name -> last value."""
    sections, section = {}, None
    for line in text.splitlines():
        if line.startswith("["):
            section = sections.setdefault(line.strip("[]"), {})
        elif "=" in line and not line.startswith("#"):
            name, _, value = line.partition("=")
            section[name] = value
    return sections


def test_the_packaged_unit_verifies_and_agrees_with_sysusers_and_tmpfiles(packages, tmp_path):
    _, root, _ = packages
    with open(os.path.join(root, "lib/systemd/system/torchmond.service")) as f:
        unit = f.read()
    assert "ExecStart=/usr/bin/torchmond --config /etc/torchmon/torchmond.conf\n" in unit
    assert "ExecStartPre=/usr/bin/torchmond --check-config /etc/torchmon/torchmond.conf\n" in unit
    assert ("Documentation=file:/usr/share/doc/torchmond/deploy.md "
            "file:/usr/share/doc/torchmond/operating.md\n") in unit
    for doc in ("deploy.md", "operating.md"):
        assert os.path.isfile(os.path.join(root, "usr/share/doc/torchmond", doc))
    # verify needs the binary where the unit says it is: point the unit's
    # paths into the unpacked root (systemd-analyze's --root also wants the
    # whole system there: sysinit.target, /bin/kill).
    copy = tmp_path / "torchmond.service"
    copy.write_text(unit.replace("/usr/bin/torchmond", os.path.join(root, "usr/bin/torchmond"))
                        .replace("/etc/torchmon/", os.path.join(root, "etc/torchmon/")))
    out = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr

    service = read_unit(unit)["Service"]
    with open(os.path.join(root, "usr/lib/sysusers.d/torchmon.conf")) as f:
        assert re.search(rf"(?m)^u {service['User']} ", f.read())
    with open(os.path.join(root, "usr/lib/tmpfiles.d/torchmon.conf")) as f:
        tmpfiles = {fields[1]: fields for fields in
                    (line.split() for line in f if line.strip() and not line.startswith("#"))}
    # The same directories, modes and owner as the unit's RuntimeDirectory=
    # and StateDirectory=, for a daemon started outside systemd.
    assert tmpfiles == {
        "/run/" + service["RuntimeDirectory"]:
            ["d", "/run/" + service["RuntimeDirectory"], service["RuntimeDirectoryMode"],
             service["User"], service["Group"], "-"],
        "/var/lib/" + service["StateDirectory"]:
            ["d", "/var/lib/" + service["StateDirectory"], service["StateDirectoryMode"],
             service["User"], service["Group"], "-"],
    }
    config = deploy_conftest.config_settings(
        open(os.path.join(root, "etc/torchmon/torchmond.conf")).read())
    assert config["listen"] == [f"unix:///run/{service['RuntimeDirectory']}/torchmond.sock"]


def test_the_packaged_daemon_checks_the_packaged_configuration(packages, tmp_path):
    _, root, _ = packages
    with open(os.path.join(root, "etc/torchmon/torchmond.conf")) as f:
        text = f.read()
    deploy_conftest.check_config(text, tmp_path, os.path.join(root, "usr/bin/torchmond"))


STUBS = ("systemd-sysusers", "systemd-tmpfiles", "systemctl", "deb-systemd-helper",
         "deb-systemd-invoke", "getent", "groupadd", "useradd", "install")


def run_maintainer_script(control, tmp_path, script, *args, without=()):
    """Runs a maintainer script with every tool it may call replaced by a
    stand-in that logs its arguments (getent finds nobody); returns the log."""
    bindir = tmp_path / "bin"
    log = tmp_path / "calls.log"
    shutil.rmtree(bindir, ignore_errors=True)
    bindir.mkdir()
    log.write_text("")
    for name in STUBS:
        if name in without:
            continue
        stub = bindir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{log}"\n'
                        + ("exit 2\n" if name == "getent" else "exit 0\n"))
        stub.chmod(stub.stat().st_mode | stat.S_IEXEC)
    env = {"PATH": str(bindir)}
    run("/bin/sh", os.path.join(control, script), *args, env=env)
    return log.read_text().splitlines()


def test_maintainer_scripts_do_what_debhelper_would_and_never_start_on_install(packages,
                                                                                 tmp_path):
    _, _, control = packages
    systemd_running = os.path.isdir("/run/systemd/system")
    calls = run_maintainer_script(control, tmp_path, "postinst", "configure", "")
    assert "systemd-sysusers torchmon.conf" in calls
    assert "systemd-tmpfiles --create torchmon.conf" in calls
    assert "deb-systemd-helper update-state torchmond.service" in calls
    assert not any(re.search(r"\b(enable|start|restart|try-restart)\b", c) for c in calls), calls
    assert ("systemctl --system daemon-reload" in calls) == systemd_running

    # An upgrade restarts a running daemon only.
    calls = run_maintainer_script(control, tmp_path, "postinst", "configure", "0.0.1-1")
    assert not any(re.search(r"\b(enable|start|restart)\b", c) for c in calls), calls
    assert ("deb-systemd-invoke try-restart torchmond.service" in calls) == systemd_running

    # Without systemd (a container): the same user, group and directories.
    calls = run_maintainer_script(control, tmp_path, "postinst", "configure", "",
                                  without=("systemd-sysusers", "systemd-tmpfiles"))
    assert "groupadd --system torchmon" in calls
    assert ("useradd --system --gid torchmon --home-dir /var/lib/torchmon --no-create-home "
            "--shell /usr/sbin/nologin --comment torchmon daemon torchmon") in calls
    assert "install -d -o torchmon -g torchmon -m 0710 /run/torchmon" in calls
    assert "install -d -o torchmon -g torchmon -m 0750 /var/lib/torchmon" in calls

    calls = run_maintainer_script(control, tmp_path, "prerm", "remove")
    assert calls == (["deb-systemd-invoke stop torchmond.service"] if systemd_running else [])
    assert run_maintainer_script(control, tmp_path, "prerm", "upgrade", "0.2.0-1") == []
    calls = run_maintainer_script(control, tmp_path, "postrm", "purge")
    assert calls == ["deb-systemd-helper purge torchmond.service",
                     "deb-systemd-helper unmask torchmond.service"]


def test_lintian_reports_only_the_tags_docs_install_md_explains(packages):
    if shutil.which("lintian") is None:
        pytest.fail("lintian is not installed (deploy/dev/install-deps.sh --test installs it)")
    debs, _, _ = packages
    out = subprocess.run(["lintian", "--tag-display-limit", "0", *debs.values()],
                         capture_output=True, text=True, timeout=300)
    tags = set(re.findall(r"^[EWIXP]: [^:]+: ([a-z0-9-]+)", out.stdout, re.M))
    with open(os.path.join(ROOT, "docs", "install.md")) as f:
        docs = f.read()
    unexplained = sorted(t for t in tags if f"`{t}`" not in docs)
    assert unexplained == [], out.stdout

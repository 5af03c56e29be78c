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
sequences included). And the C++ side: tests/release/monitor_cpp/
sequence.cc built twice with trixie's g++ 14, against libtorch 2.6's own
torch::monitor (its headers from Debian's pytorch source package of the
installed version, tests/release/torch_headers.sh: libtorch-dev does not
ship them) and against the tarball's torchmon (pkg-config), its outputs
compared line by line; and tests/integration/torch_monitor_cpp_test.cc,
the GoogleTest case the suite runs against torchmon and a daemon, built with
-DTORCHMON_AGAINST_TORCH against libtorch's torch::monitor (Debian's
GoogleTest) and run: every in-process assertion holds there too. Needs what
test_roots.py needs (root, debootstrap, the artefacts of
deploy/release/build.sh).

The aarch64 wheel and daemon run upstream's torch.monitor cases
(test_monitor_mirror.py) the same way in the arm64 trixie root with
Debian's arm64 python3-torch 2.6, under emulation (test_torch26_aarch64.py):
the drop-in and torch metrics files, which train and redefine stats by the
ten thousand, would take most of an hour there and prove nothing more of
the architecture.
"""

import json
import os
import re
import shutil
import subprocess

import pytest

from test_roots import (HERE, RELEASE_DIR, REPO, chroot, chroot_daemon, poll, root_of, show,
                        throwaway_root, unpack_tarball, venv_with_the_wheel)

if not RELEASE_DIR:  # test_roots skips its module; this one must skip too
    pytest.skip("TORCHMON_RELEASE_DIR is not set", allow_module_level=True)

SUITES = ("test_monitor_mirror.py", "test_dropin.py", "test_torch_metrics.py")


def test_the_mirror_and_dropin_tests_pass_against_torch_2_6():
    mirror_and_dropin_against_torch_2_6("x86_64", SUITES)


def mirror_and_dropin_against_torch_2_6(arch, suites):
    """`suites` of tests/python with the wheel and the tarball's daemon of
    `arch` in its trixie-torch root (test_torch26_aarch64.py runs aarch64's,
    in a pytest process of its own in CI: under emulation it is the longest
    of tests/release)."""
    # Under emulation one `import torch` takes about a minute: one process
    # checks what the venv sees, then runs pytest.
    with throwaway_root(root_of("trixie-torch", arch)) as root:
        venv_with_the_wheel(root, arch, "--system-site-packages")
        prefix = unpack_tarball(root, arch)
        # tests/python find the daemon and torchmonctl as in a build tree.
        for tool, place in (("torchmond", "server"), ("torchmonctl", "client/cli")):
            os.makedirs(f"{root}/build/{place}")
            os.symlink(f"{prefix}/bin/{tool}", f"{root}/build/{place}/{tool}")
        # And the launcher its fixtures start the daemon with.
        for part in ("python", "support"):
            shutil.copytree(os.path.join(REPO, "tests", part), f"{root}/tests/{part}",
                            ignore=shutil.ignore_patterns("__pycache__"))
        # The venv sees Debian's torch 2.6 and the wheel's torchmon, on this
        # architecture (the first line), and pytest runs the suites.
        check_then_test = (
            "import json, os, platform, sys, torch, torchmon\n"
            "site = os.path.dirname(os.path.dirname(torchmon.__file__))\n"
            "print(json.dumps([torch.__version__, torch.__file__, platform.machine(), site]),"
            " flush=True)\n"
            "os.environ['TORCHMON_PYTHON_DIR'] = site  # where its child processes import from\n"
            "import pytest\n"
            "sys.exit(pytest.main(sys.argv[1:]))\n")
        # For aarch64 qemu's default CPU, not CHROOT_ENV's faster one: with
        # that, 3 runs of 7 hung in a fork of this multithreaded Python (a
        # test's daemon), the child stuck on a lock of qemu 7.2's own before
        # its exec; the slower default made that rare enough that no run
        # before met it.
        run = chroot(root, "env", "TORCHMON_BUILD_DIR=/build", "/venv/bin/python", "-c",
                     check_then_test, "-q", "-p", "no:cacheprovider",
                     *(f"/tests/python/{suite}" for suite in suites), check=False, timeout=1800,
                     env={"QEMU_CPU": "max"} if arch == "aarch64" else None)
    print(run.stdout[-3000:])
    try:
        version, torch_file, machine, site = json.loads(run.stdout.splitlines()[0])
    except (IndexError, ValueError):  # the imports failed: no first line
        pytest.fail(show(run))
    assert version.startswith("2.6"), version
    assert torch_file.startswith("/usr/lib/python3/dist-packages/"), torch_file
    assert machine == arch, machine
    assert site.startswith("/venv/"), site
    assert run.returncode == 0, show(run)
    # Every case it collected ran and passed on torch 2.6: the summary
    # names no other outcome (skipped, failed, errors, deselected, xfailed).
    summary = run.stdout.strip().splitlines()[-1]
    passed = re.fullmatch(r"([0-9]+) passed in [0-9.]+s( \([0-9:]+\))?", summary)
    assert passed and int(passed.group(1)) > 0, summary


def test_cxx_torch_monitor_and_torchmons_observe_the_same_on_torch_2_6():
    with throwaway_root("trixie-torch") as root:
        version = chroot(root, "dpkg-query", "-W", "-f=${Version}", "libtorch-dev").stdout
        assert version.startswith("2.6"), version
        headers = subprocess.run([os.path.join(HERE, "torch_headers.sh"), "trixie", version],
                                 stdout=subprocess.PIPE, text=True, timeout=900, check=True
                                 ).stdout.strip()
        shutil.copytree(os.path.join(headers, "torch"), root + "/src/torch-headers/torch")
        shutil.copy(os.path.join(HERE, "monitor_cpp", "sequence.cc"), root + "/src/")
        prefix = unpack_tarball(root)
        torch_build = chroot(root, "g++", "-std=c++17", "-O1", "-DAGAINST_TORCH",
                             "-I/src/torch-headers", "/src/sequence.cc", "-o", "/src/with-torch",
                             "-ltorch_cpu", "-lc10", check=False, timeout=600)
        assert torch_build.returncode == 0, show(torch_build)
        flags = chroot(root, "env", f"PKG_CONFIG_PATH={prefix}/lib/pkgconfig", "pkg-config",
                       "--cflags", "--libs", "torchmon").stdout.split()
        torchmon_build = chroot(root, "g++", "-std=c++17", "-O1", "/src/sequence.cc", "-o",
                                "/src/with-torchmon", *flags, check=False, timeout=600)
        assert torchmon_build.returncode == 0, show(torchmon_build)

        # tests/integration's torch::monitor-shaped test, as it runs in the
        # suite against torchmon, built against libtorch's torch::monitor:
        # its in-process assertions (all but the daemon's side) hold there.
        shutil.copy(os.path.join(REPO, "tests", "integration", "torch_monitor_cpp_test.cc"),
                    root + "/src/")
        gtest_build = chroot(root, "g++", "-std=c++17", "-O1", "-DTORCHMON_AGAINST_TORCH",
                             "-I/src/torch-headers", "/src/torch_monitor_cpp_test.cc", "-o",
                             "/src/integration-with-torch", "-lgmock", "-lgtest_main", "-lgtest",
                             "-ltorch_cpu", "-lc10", "-pthread", check=False, timeout=600)
        assert gtest_build.returncode == 0, show(gtest_build)
        integration = chroot(root, "/src/integration-with-torch", check=False, timeout=120)

        with_torch = chroot(root, "/src/with-torch", timeout=60)
        with chroot_daemon(root, prefix) as daemon:
            with_torchmon = chroot(root, "env", f"TORCHMON_TARGET=unix://{daemon.socket}",
                                   "/src/with-torchmon", timeout=60)
            # Its samples reached the daemon too: 9 of cpp.all, capped by
            # the daemon's rule (3 per window), not torch.monitor's.
            series = poll(lambda: daemon.ctl("series", "--stat", "cpp.all")["series"],
                          lambda s: len(s) == 1 and s[0]["counters"]["accepted"]
                          + s[0]["counters"]["capped"] == 9, 10, "cpp.all's 9 samples")
            daemon.stop()
    assert integration.returncode == 0, show(integration)
    with open(os.path.join(REPO, "tests", "integration", "torch_monitor_cpp_test.cc")) as f:
        cases = len(re.findall(r"^TEST_F\(TorchMonitorCppTest, ", f.read(), re.M))
    assert cases >= 5 and f"[  PASSED  ] {cases} tests." in integration.stdout, show(integration)
    assert series[0]["counters"]["accepted"] == 3, series
    lines = with_torch.stdout.splitlines()
    # What is compared is not trivial: windows logged by the cap, the
    # destructor's, an integer stat's and the custom event, with VALUE.
    for expected in ("  event torch.monitor.Stat cpp.all.count=d:3",
                     "  event torch.monitor.Stat cpp.int.max=i:6 cpp.int.sum=i:11 cpp.int.value=i:6",
                     "  event torch.monitor.Stat cpp.open.max=d:3",
                     "  event cpp.custom b=b:1 d=d:0.5 i=i:1 s=s:x"):
        assert any(line.startswith(expected) for line in lines), (expected, with_torch.stdout)
    assert with_torchmon.stdout.splitlines() == lines, (
        f"torch::monitor:\n{with_torch.stdout}\ntorchmon::monitor:\n{with_torchmon.stdout}")

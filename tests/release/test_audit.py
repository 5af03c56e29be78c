"""The ELF audit of the portable artefacts (issue 32), and the audit's own
ability to fail.

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release -v

OUT is what deploy/release/build.sh made. Without TORCHMON_RELEASE_DIR the
artefact tests skip; the audit's negative tests run anyway (they compile two
small programs with the build machine's gcc, whose glibc and libstdc++ are
newer than the floor).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tarfile
import zipfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
AUDIT = os.path.join(HERE, "audit_elf.py")
RELEASE_DIR = os.environ.get("TORCHMON_RELEASE_DIR")
needs_artefacts = pytest.mark.skipif(not RELEASE_DIR, reason="TORCHMON_RELEASE_DIR is not set "
                                     "(deploy/release/build.sh OUT makes the artefacts)")


def audit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, AUDIT, *args], capture_output=True, text=True,
                          timeout=600)


def artefact(pattern: str) -> str:
    found = glob.glob(os.path.join(RELEASE_DIR, pattern))
    assert len(found) == 1, f"{pattern} in {RELEASE_DIR}: {found}"
    return found[0]


#: Each architecture's names: Debian's, and the rest's (uname -m).
ARCHES = (("amd64", "x86_64"), ("arm64", "aarch64"))


@needs_artefacts
def test_every_artefact_is_there_under_its_name():
    version = "0.1.0"
    for debian, arch in ARCHES:
        for name in (f"torchmond_{version}-1_{debian}.deb", f"torchmond-{version}-1.{arch}.rpm",
                     f"torchmon-{version}-linux-{arch}.tar.gz",
                     f"torchmon-{version}-cp310-abi3-manylinux_2_28_{arch}.whl"):
            assert os.path.isfile(os.path.join(RELEASE_DIR, name)), name


@needs_artefacts
def test_every_elf_file_of_every_artefact_passes_the_audit():
    result = audit(RELEASE_DIR, "--glibc", "2.28")
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    # torchmond and torchmonctl in each of .deb, .rpm and .tar.gz, and the
    # extension in the wheel, for each architecture: fourteen ELF files,
    # none missed, seven of each.
    assert "audit_elf: 14 ELF files in 8 artefacts, 0 failed" in result.stdout
    for _, arch in ARCHES:
        assert result.stdout.count(f"({arch}): ok") == 7, (arch, result.stdout)


@needs_artefacts
@pytest.mark.parametrize("arch", [a for _, a in ARCHES])
def test_the_wheel_names_what_it_bundles(arch):
    with zipfile.ZipFile(artefact(f"torchmon-*-manylinux_2_28_{arch}.whl")) as whl:
        metadata = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        text = whl.read(metadata).decode()
        bundled = whl.read("torchmon/BUNDLED_VERSIONS").decode().split("\n")
        names = whl.namelist()
    for package in ("grpc", "protobuf", "abseil", "openssl", "c-ares", "re2", "zlib"):
        assert any(line.startswith(package + " ") for line in bundled), (package, bundled)
        assert f"- {package} " in text, package
        # and its licence, where PEP 639 keeps a distribution's licence files
        assert any(n.endswith(f".dist-info/licenses/bundled/{package}/copyright")
                   for n in names), (package, [n for n in names if "/licenses/" in n])


@needs_artefacts
@pytest.mark.parametrize("arch", [a for _, a in ARCHES])
def test_the_tarballs_cxx_client_is_compiled_for_libstdcxx(tmp_path, arch):
    """The tarball's static libraries are linked by the user's g++ against
    their libstdc++: not one reference to libc++ (std::__1, zig's own C++
    runtime) may be in them, and none to glibc 2.30's clock waits, which
    GCC 10's headers as bullseye configured them call from inline code
    (std::condition_variable::wait_for) and which a user's link on glibc
    2.28 (RHEL 8) would not find (deploy/release/toolchain.sh)."""
    tarball = artefact(f"torchmon-*-linux-{arch}.tar.gz")
    with tarfile.open(tarball) as t:
        members = [m for m in t.getmembers() if m.name.endswith(".a")]
        assert {os.path.basename(m.name) for m in members} == {
            "libtorchmon_client.a", "libtorchmon_proto.a", "libtorchmon_bundled.a"}, members
        t.extractall(tmp_path, members=members)
    # binutils' nm for the architecture (binutils-aarch64-linux-gnu on x86_64)
    nm = "nm" if arch == os.uname().machine else f"{arch}-linux-gnu-nm"
    for member in members:
        symbols = subprocess.run([nm, "-A", os.path.join(tmp_path, member.name)],
                                 capture_output=True, text=True, timeout=300, check=True).stdout
        assert symbols.count("\n") > 1000, member.name
        libcxx = [line for line in symbols.splitlines() if "St3__1" in line]
        assert not libcxx, f"{member.name} uses libc++: {libcxx[:5]}"
        clock_waits = [line for line in symbols.splitlines()
                       if re.search(r" U pthread_(cond_clockwait|mutex_clocklock|rwlock_clock)", line)]
        assert not clock_waits, f"{member.name} needs glibc 2.30: {clock_waits[:5]}"


@pytest.fixture(scope="module")
def host_programs(tmp_path_factory):
    """A C and a C++ program built by the build machine's own gcc: newer
    glibc symbol versions than 2.28, and a dynamic libstdc++."""
    tmp = tmp_path_factory.mktemp("audit")
    c_src = tmp / "c.c"
    c_src.write_text("#include <stdio.h>\nint main(void) { puts(\"c\"); return 0; }\n")
    cxx_src = tmp / "cxx.cc"
    cxx_src.write_text("#include <iostream>\n#include <string>\n"
                       "int main(int argc, char**) { std::string s(argc, 'x'); "
                       "std::cout << s << std::endl; return 0; }\n")
    so_src = tmp / "so.c"
    so_src.write_text("int PyInit_x(void) { return 0; }\nint leaked(void) { return 1; }\n")
    subprocess.run(["gcc", "-O1", str(c_src), "-o", str(tmp / "c")], check=True, timeout=120)
    subprocess.run(["g++", "-O1", str(cxx_src), "-o", str(tmp / "cxx")], check=True, timeout=120)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", str(so_src), "-o", str(tmp / "x.so")],
                   check=True, timeout=120)
    return tmp


def test_the_audit_refuses_a_glibc_newer_than_the_floor(host_programs):
    result = audit(str(host_programs / "c"), "--glibc", "2.28")
    assert result.returncode == 1
    # bookworm's gcc links __libc_start_main@GLIBC_2.34.
    assert "asks for GLIBC_2.34: above GLIBC_2.28" in result.stdout
    # At the build machine's own floor the same file passes: the audit reads
    # the versions, it does not refuse everything.
    assert audit(str(host_programs / "c"), "--glibc", "2.36").returncode == 0


def test_the_audit_refuses_a_dynamic_cxx_runtime(host_programs):
    result = audit(str(host_programs / "cxx"), "--glibc", "2.99")
    assert result.returncode == 1
    assert "NEEDED libstdc++.so.6: not part of glibc" in result.stdout
    assert "asks for GLIBCXX_" in result.stdout


def test_the_audit_refuses_an_extension_that_exports_more_than_its_init(host_programs):
    result = audit(str(host_programs / "x.so"), "--glibc", "2.99")
    assert result.returncode == 1
    assert "exports 1 symbols besides PyInit_* and the wait-counter backend: leaked" in result.stdout


def test_the_audit_refuses_an_elf_file_of_another_architecture(host_programs, tmp_path):
    """An x86_64 program in an artefact named for aarch64 fails on its
    e_machine; the same artefact named for x86_64 passes (the audit reads
    the machine, it does not refuse every aarch64 artefact)."""
    for arch, expected in (("aarch64", 1), ("x86_64", 0)):
        tarball = tmp_path / f"torchmon-0.1.0-linux-{arch}.tar.gz"
        with tarfile.open(tarball, "w:gz") as t:
            t.add(str(host_programs / "c"), arcname="torchmon/bin/c")
        result = audit(str(tarball), "--glibc", "2.99")
        assert result.returncode == expected, result.stdout
    assert "torchmon/bin/c (aarch64): FAILED" in audit(
        str(tmp_path / "torchmon-0.1.0-linux-aarch64.tar.gz"), "--glibc", "2.99").stdout
    assert "e_machine 62: not aarch64 (183)" in audit(
        str(tmp_path / "torchmon-0.1.0-linux-aarch64.tar.gz"), "--glibc", "2.99").stdout


def test_the_audit_refuses_an_aarch64_program_that_names_another_loader(host_programs, tmp_path):
    """An aarch64 ELF header over an x86_64 program: the machine is right,
    the program interpreter (/lib64/ld-linux-x86-64.so.2) is not aarch64's,
    nor is its NEEDED loader."""
    data = bytearray((host_programs / "c").read_bytes())
    data[18:20] = (183).to_bytes(2, "little")  # EM_AARCH64
    forged = tmp_path / "forged"
    forged.write_bytes(bytes(data))
    result = audit(str(forged), "--glibc", "2.99")
    assert result.returncode == 1, result.stdout
    assert "forged (aarch64): FAILED" in result.stdout
    assert ("program interpreter /lib64/ld-linux-x86-64.so.2: not aarch64's "
            "/lib/ld-linux-aarch64.so.1") in result.stdout


def test_the_audit_refuses_an_artefact_that_names_no_architecture(host_programs, tmp_path):
    tarball = tmp_path / "torchmon-0.1.0-linux-riscv64.tar.gz"
    with tarfile.open(tarball, "w:gz") as t:
        t.add(str(host_programs / "c"), arcname="torchmon/bin/c")
    result = audit(str(tarball), "--glibc", "2.99")
    assert result.returncode == 1
    assert "names no architecture this audit knows (x86_64, aarch64)" in result.stdout

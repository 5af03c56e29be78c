#!/usr/bin/env python3
"""Audits every ELF file of torchmon's portable artefacts (issue 32).

    tests/release/audit_elf.py OUT_DIR [--glibc 2.28]
    tests/release/audit_elf.py FILE...  (ELF files or artefacts)

Each artefact (.deb, .rpm, .tar.gz, .whl) is unpacked and each ELF file in
it must:
  - be built for the artefact's architecture, which its name says (amd64,
    x86_64: e_machine EM_X86_64; arm64, aarch64: EM_AARCH64), and an
    executable must name that architecture's dynamic loader;
  - NEED nothing but glibc: libc, libm, libpthread, libdl, librt and the
    architecture's dynamic loader;
  - ask for no symbol version above GLIBC_<glibc> (the same 2.28 floor on
    both: aarch64's oldest symbol version is GLIBC_2.17, x86_64's
    GLIBC_2.2.5), and for no GLIBCXX_,
    CXXABI_ or GCC_ version (the C++ runtime and libgcc are linked in);
  - if it is a shared object (the Python extension), export nothing but its
    PyInit_ function and the backend of c10's wait counters
    (c10_monitor_wait_counter_dynamic_backend_init_v1, which torch finds by
    name: client/python/src/wait_counters.h).
Prints one line per ELF file and every violation; exits 1 if any.
Needs readelf (binutils), dpkg-deb and rpm2cpio/cpio for the packages.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from typing import Iterator, List, Tuple

GLIBC_LIBRARIES = frozenset({
    "libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
})


class Arch:
    """What an architecture's ELF files are: e_machine and dynamic loader."""

    def __init__(self, name: str, machine: int, loader: str) -> None:
        self.name, self.machine, self.loader = name, machine, loader


ARCHES = {
    "x86_64": Arch("x86_64", 62, "/lib64/ld-linux-x86-64.so.2"),
    "aarch64": Arch("aarch64", 183, "/lib/ld-linux-aarch64.so.1"),
}


def arch_of_artefact(name: str) -> Arch | None:
    """The architecture an artefact's file name says, as build.sh names them."""
    for pattern, arch in ((r"_amd64\.deb$|\.x86_64\.rpm$|-linux-x86_64\.tar\.gz$|_x86_64\.whl$",
                           "x86_64"),
                          (r"_arm64\.deb$|\.aarch64\.rpm$|-linux-aarch64\.tar\.gz$|_aarch64\.whl$",
                           "aarch64")):
        if re.search(pattern, name):
            return ARCHES[arch]
    return None
FORBIDDEN_VERSION_PREFIXES = ("GLIBCXX_", "CXXABI_", "GCC_")


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True,
                          text=True, timeout=120).stdout


def is_elf(path: str) -> bool:
    if not os.path.isfile(path) or os.path.islink(path):
        return False
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_machine(path: str) -> int:
    """The ELF header's e_machine (little-endian, as both architectures are)."""
    with open(path, "rb") as f:
        return int.from_bytes(f.read(20)[18:20], "little")


def interpreter(path: str) -> str | None:
    match = re.search(r"\[Requesting program interpreter: ([^\]]+)\]", readelf("-l", path))
    return match.group(1) if match else None


def elf_type(path: str) -> str:
    match = re.search(r"^\s*Type:\s+(\S+)", readelf("-h", path), re.M)
    return match.group(1) if match else "?"


def needed(path: str) -> List[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", path))


def version_references(path: str) -> List[str]:
    """Every version the file asks of its libraries (.gnu.version_r)."""
    return sorted(set(re.findall(r"Name: (\S+)\s+Flags:", readelf("-V", path))))


def exported_symbols(path: str) -> List[str]:
    """Defined, global or weak, default-visibility dynamic symbols."""
    names = []
    for line in readelf("--dyn-syms", path).splitlines():
        fields = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(fields) < 8 or not fields[0].rstrip(":").isdigit():
            continue
        bind, vis, ndx, name = fields[4], fields[5], fields[6], fields[7]
        if ndx == "UND" or bind not in ("GLOBAL", "WEAK") or vis != "DEFAULT":
            continue
        names.append(name.split("@")[0])
    return sorted(set(names))


def glibc_version(name: str) -> Tuple[int, ...] | None:
    match = re.fullmatch(r"GLIBC_(\d+(?:\.\d+)*)", name)
    return tuple(int(p) for p in match.group(1).split(".")) if match else None


# What an extension may export besides its PyInit_ function: the entry
# point c10 looks up with dlsym (client/python/src/wait_counters.h).
ALLOWED_EXPORTS = ("c10_monitor_wait_counter_dynamic_backend_init_v1",)


def audit_file(path: str, floor: Tuple[int, ...], arch: Arch) -> List[str]:
    problems = []
    if elf_machine(path) != arch.machine:
        return [f"e_machine {elf_machine(path)}: not {arch.name} ({arch.machine})"]
    loader = interpreter(path)
    if loader is not None and loader != arch.loader:
        problems.append(f"program interpreter {loader}: not {arch.name}'s {arch.loader}")
    for lib in needed(path):
        if lib not in GLIBC_LIBRARIES and lib != os.path.basename(arch.loader):
            problems.append(f"NEEDED {lib}: not part of glibc")
    for version in version_references(path):
        if version.startswith(FORBIDDEN_VERSION_PREFIXES):
            problems.append(f"asks for {version}: the C++ runtime must be linked in")
        v = glibc_version(version)
        if v is not None and v > floor:
            problems.append(f"asks for {version}: above GLIBC_{'.'.join(map(str, floor))}")
    # A shared object: ELF type DYN without a program interpreter (a PIE
    # executable is DYN too, but names ld-linux as its interpreter).
    if elf_type(path) == "DYN" and loader is None:
        exports = exported_symbols(path)
        extra = [s for s in exports if not s.startswith("PyInit_") and s not in ALLOWED_EXPORTS]
        if extra:
            shown = ", ".join(extra[:8]) + (f" and {len(extra) - 8} more" if len(extra) > 8 else "")
            problems.append(f"exports {len(extra)} symbols besides PyInit_* and the wait-counter "
                            f"backend: {shown}")
        if not any(s.startswith("PyInit_") for s in exports):
            problems.append("a shared object that exports no PyInit_ function")
    return problems


def unpack(artefact: str, into: str) -> None:
    name = os.path.basename(artefact)
    if name.endswith(".deb"):
        subprocess.run(["dpkg-deb", "-x", artefact, into], check=True, timeout=300)
    elif name.endswith(".rpm"):
        rpm2cpio = subprocess.Popen(["rpm2cpio", artefact], stdout=subprocess.PIPE)
        subprocess.run(["cpio", "-idm", "--quiet"], stdin=rpm2cpio.stdout, cwd=into, check=True,
                       timeout=300)
        if rpm2cpio.wait(timeout=300) != 0:
            raise RuntimeError(f"rpm2cpio {artefact} failed")
    elif name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(artefact) as tar:
            tar.extractall(into, filter="tar") if hasattr(tarfile, "data_filter") else tar.extractall(into)
    elif name.endswith(".whl"):
        with zipfile.ZipFile(artefact) as whl:
            whl.extractall(into)
    else:
        raise ValueError(f"{artefact}: not an artefact this audit knows (.deb, .rpm, .tar.gz, .whl)")


def elf_files(root: str) -> Iterator[str]:
    for dirpath, _, files in os.walk(root):
        for f in sorted(files):
            path = os.path.join(dirpath, f)
            if is_elf(path):
                yield path


def audit(paths: List[str], floor: Tuple[int, ...]) -> int:
    artefacts: List[str] = []
    for p in paths:
        if os.path.isdir(p):
            artefacts += sorted(os.path.join(p, f) for f in os.listdir(p)
                                if f.endswith((".deb", ".rpm", ".tar.gz", ".whl")))
        else:
            artefacts.append(p)
    if not artefacts:
        print("audit_elf: no artefacts to audit", file=sys.stderr)
        return 1
    failures = 0
    checked = 0
    for artefact in artefacts:
        if is_elf(artefact):
            targets = [(artefact, artefact)]
            tmp = None
            arch = next((a for a in ARCHES.values() if a.machine == elf_machine(artefact)), None)
        else:
            arch = arch_of_artefact(os.path.basename(artefact))
            tmp = tempfile.mkdtemp(prefix="audit-elf-")
            unpack(artefact, tmp)
            targets = [(f, os.path.relpath(f, tmp)) for f in elf_files(tmp)]
            if not targets:
                print(f"{os.path.basename(artefact)}: holds no ELF file")
                failures += 1
        if arch is None:
            print(f"{os.path.basename(artefact)}: names no architecture this audit knows "
                  f"({', '.join(ARCHES)})")
            failures += 1
            targets = []
        try:
            for path, shown in targets:
                checked += 1
                problems = audit_file(path, floor, arch)
                label = f"{os.path.basename(artefact)}: {shown} ({arch.name})"
                label = label if tmp else f"{shown} ({arch.name})"
                print(f"{label}: {'ok' if not problems else 'FAILED'} "
                      f"(NEEDED {', '.join(needed(path)) or 'nothing'})")
                for problem in problems:
                    print(f"  {problem}")
                failures += bool(problems)
        finally:
            if tmp:
                shutil.rmtree(tmp, ignore_errors=True)
    print(f"audit_elf: {checked} ELF files in {len(artefacts)} artefacts, {failures} failed "
          f"(glibc floor {'.'.join(map(str, floor))})")
    return 1 if failures else 0


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paths", nargs="+", help="artefacts, ELF files or a directory of artefacts")
    parser.add_argument("--glibc", default="2.28", help="newest GLIBC_ version allowed")
    args = parser.parse_args(argv)
    return audit(args.paths, tuple(int(p) for p in args.glibc.split(".")))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

#!/usr/bin/env python3
"""Makes a torchmon wheel self-contained, as auditwheel's `repair` does.

    repair_wheel.py dist-raw/torchmon-0.1.0-cp310-abi3-linux_x86_64.whl -w dist/

Every shared library the wheel's extension needs, directly or through
another, that is not part of glibc or the C++ runtime (SYSTEM_LIBRARIES) is
copied into `torchmon.libs/` under a name carrying a hash of its content
(libgrpc++.so.1.51 -> libgrpc++-1a2b3c4d.so.1.51), so it can never be taken
for another copy of that library loaded in the same process (torch's, the
host's). patchelf then points each ELF file at those copies: NEEDED entries
renamed, SONAME set, and a run path of `$ORIGIN` (the extension:
`$ORIGIN/../torchmon.libs`).

The platform tag becomes manylinux_2_<N>_<arch>, N the highest GLIBC_2.N
symbol version any ELF file in the wheel asks for: the wheel installs on a
host with glibc 2.N or newer (and a libstdc++ at least as new as the
GLIBCXX version printed). Without a manylinux build image the N is that of
the build host; docs/install.md says how to build on an older glibc.

The extension's debug information is stripped (its symbols are kept).

A wheel of another architecture than the build machine's (the portable
build's aarch64 wheel, cross-compiled on x86_64: its `linux_aarch64` tag
comes from _PYTHON_HOST_PLATFORM, deploy/dev/build-wheels.sh) is repaired
the same way, but it can graft nothing: the machine's dynamic linker cannot
resolve another architecture's libraries, so its extension must need only
SYSTEM_LIBRARIES (the portable build links everything else statically).
Every ELF file's machine must be the tag's architecture.

Needs patchelf, readelf and strip (binutils; for another architecture its
<arch>-linux-gnu-strip, binutils-aarch64-linux-gnu) on PATH; libraries are
found as the dynamic linker finds them for the extension (ldd).
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from typing import Dict, Iterable, List, Tuple

#: Libraries a wheel may need from the host: glibc's and the C++ runtime.
#: Everything else ships inside the wheel (the manylinux policy's spirit;
#: its list also has libX11 and friends, which torchmon has no use for).
SYSTEM_LIBRARIES = frozenset({
    # glibc
    "libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
    "libresolv.so.2", "libutil.so.1", "libanl.so.1", "ld-linux-x86-64.so.2",
    "ld-linux-aarch64.so.1",
    # the C++ runtime
    "libstdc++.so.6", "libgcc_s.so.1",
})

LIBS_DIR = "torchmon.libs"

#: ELF e_machine values of the architectures a wheel is tagged for.
ELF_MACHINES = {"x86_64": 62, "aarch64": 183}


def is_elf(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def elf_machine(path: str) -> int:
    """The ELF header's e_machine (a little-endian ELF: both architectures')."""
    with open(path, "rb") as f:
        header = f.read(20)
    return int.from_bytes(header[18:20], "little")


def strip_tool(arch: str) -> str:
    """binutils' strip for `arch`: the machine's own, or its cross one."""
    return "strip" if arch == os.uname().machine else f"{arch}-linux-gnu-strip"


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def needed(path: str) -> List[str]:
    return [line for line in run("patchelf", "--print-needed", path).split() if line]


def resolve_with_ldd(path: str) -> Dict[str, str]:
    """soname -> path, as the dynamic linker resolves the whole tree of `path`."""
    out: Dict[str, str] = {}
    for line in run("ldd", path).splitlines():
        match = re.match(r"\s*(\S+)\s+=>\s+(\S+)\s+\(0x", line)
        if match:
            out[match.group(1)] = match.group(2)
        elif "not found" in line:
            raise SystemExit(f"repair_wheel: {path} needs {line.split()[0]}, which is not found")
    return out


def symbol_versions(path: str, prefix: str) -> List[Tuple[int, ...]]:
    """The <prefix>x.y versions in the version-needs section of `path`."""
    text = run("readelf", "--version-info", "--wide", path)
    return [tuple(int(p) for p in v.split("."))
            for v in re.findall(r"Name: " + re.escape(prefix) + r"([0-9.]+)", text)]


def hashed_name(soname: str, content: bytes) -> str:
    digest = hashlib.sha256(content).hexdigest()[:8]
    stem, sep, rest = soname.partition(".so")
    return f"{stem}-{digest}{sep}{rest}"


def record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def graft(root: str, extensions: Iterable[str]) -> Dict[str, str]:
    """Copies every non-system dependency into root/LIBS_DIR; returns old -> new soname."""
    libs_dir = os.path.join(root, LIBS_DIR)
    renamed: Dict[str, str] = {}
    for extension in extensions:
        resolved: Dict[str, str] | None = None  # ldd's, once something is to graft
        queue = list(needed(extension))
        while queue:
            soname = queue.pop()
            if soname in SYSTEM_LIBRARIES or soname in renamed:
                continue
            if ELF_MACHINES.get(os.uname().machine) != elf_machine(extension):
                raise SystemExit(f"repair_wheel: {extension} needs {soname}, and this machine's "
                                 "ldd cannot find another architecture's libraries: link it "
                                 "statically (deploy/release/build.sh)")
            if resolved is None:
                resolved = resolve_with_ldd(extension)
            source = resolved.get(soname)
            if source is None:
                raise SystemExit(f"repair_wheel: cannot resolve {soname} needed by {extension}")
            with open(source, "rb") as f:
                content = f.read()
            new_name = hashed_name(soname, content)
            os.makedirs(libs_dir, exist_ok=True)
            copy = os.path.join(libs_dir, new_name)
            with open(copy, "wb") as f:
                f.write(content)
            os.chmod(copy, 0o755)
            renamed[soname] = new_name
            queue.extend(needed(copy))
    return renamed


def patch(path: str, renamed: Dict[str, str], rpath: str, soname: str | None = None) -> None:
    # One change per patchelf run: patchelf 0.14 (bookworm's) mixes up
    # strings when --set-soname and --replace-needed share a run.
    if soname is not None:
        subprocess.run(["patchelf", "--set-soname", soname, path], check=True)
    replace = []
    for old in needed(path):
        if old in renamed:
            replace += ["--replace-needed", old, renamed[old]]
    if replace:
        subprocess.run(["patchelf", *replace, path], check=True)
    subprocess.run(["patchelf", "--remove-rpath", path], check=True)
    # DT_RPATH, as auditwheel sets: it also covers the copies' own
    # dependencies and is not overridden by LD_LIBRARY_PATH.
    subprocess.run(["patchelf", "--force-rpath", "--set-rpath", rpath, path], check=True)


def elf_files_of(root: str, extensions: List[str], libs_dir: str,
                 renamed: Dict[str, str]) -> List[str]:
    return extensions + [os.path.join(libs_dir, n) for n in sorted(renamed.values())]


def check(elf_files: List[str], renamed: Dict[str, str]) -> None:
    """What patchelf made: each copy named by its SONAME, each NEEDED a copy
    or a system library, and every symbol resolved (ldd -r) within them."""
    copies = set(renamed.values())
    for path in elf_files:
        soname = run("patchelf", "--print-soname", path).strip()
        if path.endswith(tuple(copies)) and soname != os.path.basename(path):
            raise SystemExit(f"repair_wheel: {path} got SONAME {soname}")
        for dep in needed(path):
            if dep not in copies and dep not in SYSTEM_LIBRARIES:
                raise SystemExit(f"repair_wheel: {path} still needs {dep}")
    for path in elf_files:
        if os.path.basename(path) in copies:
            report = subprocess.run(["ldd", "-r", path], capture_output=True, text=True)
            missing = [l for l in (report.stdout + report.stderr).splitlines()
                       if "undefined symbol" in l or "not found" in l]
            if missing:
                raise SystemExit(f"repair_wheel: {path}: " + "; ".join(missing[:5]))


def rewrite_wheel_metadata(root: str, dist_info: str, platform: str) -> None:
    wheel_file = os.path.join(root, dist_info, "WHEEL")
    with open(wheel_file, encoding="utf-8") as f:
        lines = f.read().splitlines()
    out = []
    for line in lines:
        if line.startswith("Tag: "):
            python, abi, _ = line[len("Tag: "):].split("-")
            line = f"Tag: {python}-{abi}-{platform}"
        out.append(line)
    with open(wheel_file, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def write_wheel(root: str, dist_info: str, path: str) -> None:
    """Zips `root` with a fresh RECORD, entries sorted, .dist-info last."""
    files = []
    for dirpath, _, filenames in os.walk(root):
        for name in filenames:
            files.append(os.path.relpath(os.path.join(dirpath, name), root))
    record_name = f"{dist_info}/RECORD"
    files = [f for f in files if f != record_name]
    files.sort(key=lambda f: (f.startswith(dist_info + "/"), f))
    record = io.StringIO()
    writer = csv.writer(record, lineterminator="\n")
    # A fixed timestamp keeps the wheel reproducible.
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    date_time = tuple(time.gmtime(max(epoch, 315532800))[:6])
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                data = f.read()
            writer.writerow([name, record_hash(data), len(data)])
            info = zipfile.ZipInfo(name, date_time)
            mode = os.stat(os.path.join(root, name)).st_mode & 0o777
            info.external_attr = (0o100000 | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
        writer.writerow([record_name, "", ""])
        info = zipfile.ZipInfo(record_name, date_time)
        info.external_attr = 0o100644 << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        z.writestr(info, record.getvalue())


def add_bundled_versions(root: str, dist_info: str, bundled: List[str]) -> None:
    """Names the libraries linked into the extension in the wheel's METADATA
    (its description, which `pip show -v` and PyPI show) and in
    torchmon/BUNDLED_VERSIONS, which `torchmon.bundled_versions()` reads."""
    text = "".join(f"{entry}\n" for entry in bundled)
    with open(os.path.join(root, "torchmon", "BUNDLED_VERSIONS"), "w", encoding="utf-8") as f:
        f.write(text)
    metadata = os.path.join(root, dist_info, "METADATA")
    with open(metadata, encoding="utf-8") as f:
        content = f.read()
    if "\n\n" not in content:
        content += "\n"
    content = content.rstrip("\n") + (
        "\n\n## Bundled libraries\n\nLinked statically into the extension, built from "
        "Debian's source packages:\n\n" + "".join(f"- {entry}\n" for entry in bundled))
    with open(metadata, "w", encoding="utf-8") as f:
        f.write(content)


def add_bundled_licenses(root: str, dist_info: str, bundled: List[str], licenses: str) -> None:
    """Copies the licences of the bundled libraries (licenses/<package>/ of
    deploy/release/deps.sh's prefix) into the wheel's .dist-info/licenses/,
    where PEP 639 puts a distribution's licence files."""
    for entry in bundled:
        package = entry.split()[0]
        source = os.path.join(licenses, package)
        if not os.path.isdir(source):
            raise SystemExit(f"repair_wheel: no licences of {package} in {licenses}")
        shutil.copytree(source, os.path.join(root, dist_info, "licenses", "bundled", package))


def repair(wheel: str, out_dir: str, min_glibc: Tuple[int, ...] = (0, 0),
           bundled: List[str] | None = None, licenses: str | None = None) -> str:
    name = os.path.basename(wheel)
    match = re.fullmatch(r"(?P<dist>[^-]+)-(?P<version>[^-]+)-(?P<python>[^-]+)-(?P<abi>[^-]+)"
                         r"-(?P<platform>linux_(?P<arch>[^-]+))\.whl", name)
    if match is None:
        raise SystemExit(f"repair_wheel: {name} is not a linux_<arch> wheel")
    with tempfile.TemporaryDirectory(prefix="torchmon-repair.") as tmp:
        root = os.path.join(tmp, "wheel")
        with zipfile.ZipFile(wheel) as z:
            z.extractall(root)
        dist_info = f"{match['dist']}-{match['version']}.dist-info"
        extensions = []
        for dirpath, _, filenames in os.walk(root):
            for filename in filenames:
                path = os.path.join(dirpath, filename)
                if is_elf(path):
                    extensions.append(path)
        if not extensions:
            raise SystemExit(f"repair_wheel: {name} holds no ELF file")
        machine = ELF_MACHINES.get(match["arch"])
        for extension in extensions:
            if elf_machine(extension) != machine:
                raise SystemExit(f"repair_wheel: {os.path.relpath(extension, root)} is not an "
                                 f"{match['arch']} ELF file (e_machine {elf_machine(extension)}), "
                                 f"but the wheel is tagged {match['platform']}")
        # Debug information stays out of the wheel (a RelWithDebInfo build
        # makes an extension ten times its stripped size); symbols stay.
        for extension in extensions:
            subprocess.run([strip_tool(match["arch"]), "--strip-debug", extension], check=True)
        renamed = graft(root, extensions)
        libs_dir = os.path.join(root, LIBS_DIR)
        for extension in extensions:
            relative = os.path.relpath(libs_dir, os.path.dirname(extension))
            patch(extension, renamed, f"$ORIGIN/{relative}")
        for new_name in renamed.values():
            patch(os.path.join(libs_dir, new_name), renamed, "$ORIGIN", soname=new_name)
        check(elf_files_of(root, extensions, libs_dir, renamed), renamed)

        elf_files = elf_files_of(root, extensions, libs_dir, renamed)
        glibc = max((v for f in elf_files for v in symbol_versions(f, "GLIBC_")), default=None)
        if glibc is None and min_glibc == (0, 0):
            raise SystemExit(f"repair_wheel: no ELF file of {name} asks for a GLIBC_ version: "
                             "give the glibc it needs with --min-glibc")
        glibc = glibc or min_glibc
        # The portable build targets a glibc (deps.lock) whose tag it wants
        # even where no symbol needs one that new: the floor it was built and
        # audited for, not a lower one it was never checked against.
        glibc = max(glibc, min_glibc)
        glibcxx = max((v for f in elf_files for v in symbol_versions(f, "GLIBCXX_")), default=None)
        platform = f"manylinux_{glibc[0]}_{glibc[1]}_{match['arch']}"
        rewrite_wheel_metadata(root, dist_info, platform)
        if bundled:
            add_bundled_versions(root, dist_info, bundled)
            if licenses:
                add_bundled_licenses(root, dist_info, bundled, licenses)

        os.makedirs(out_dir, exist_ok=True)
        out_name = f"{match['dist']}-{match['version']}-{match['python']}-{match['abi']}-{platform}.whl"
        out = os.path.join(out_dir, out_name)
        write_wheel(root, dist_info, out)
    print(f"repair_wheel: {out}")
    print(f"  {len(renamed)} libraries grafted into {LIBS_DIR}/: "
          + ", ".join(sorted(renamed)))
    print(f"  needs glibc >= {'.'.join(map(str, glibc))}"
          + (f", libstdc++ with GLIBCXX_{'.'.join(map(str, glibcxx))}" if glibcxx else ""))
    return out


def main(argv: List[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel")
    parser.add_argument("-w", "--wheel-dir", required=True, help="where the repaired wheel goes")
    parser.add_argument("--min-glibc", default="0.0",
                        help="tag the wheel for at least this glibc (the portable build's 2.28)")
    parser.add_argument("--bundled", default="",
                        help="comma-separated \"package version\" of the libraries linked in")
    parser.add_argument("--licenses", default="",
                        help="a folder with a folder of licence files per --bundled package")
    args = parser.parse_args(argv)
    arch = re.search(r"-linux_([^-]+)\.whl$", args.wheel)
    for tool in ("patchelf", "readelf", "ldd", strip_tool(arch[1] if arch else os.uname().machine)):
        if shutil.which(tool) is None:
            raise SystemExit(f"repair_wheel: {tool} is needed (deploy/dev/install-deps.sh installs it)")
    repair(args.wheel, args.wheel_dir, tuple(int(p) for p in args.min_glibc.split(".")),
           [entry for entry in args.bundled.split(",") if entry], args.licenses or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""deploy/container/Dockerfile, checked without docker: it takes the portable
tarball deploy/release/build.sh makes (whose binaries need glibc alone:
tests/release audits them), its runtime stage installs no library, and the
hadolint-style rules that matter here hold. The image build itself is not
run (no docker on the test machines)."""

import fnmatch
import json
import os
import re
import shlex
import subprocess

import pytest

from conftest import DEPLOY, REPO, TORCHMOND, config_settings

DOCKERFILE = os.path.join(DEPLOY, "container", "Dockerfile")
INSTALL_DEPS = os.path.join(DEPLOY, "dev", "install-deps.sh")
BUILD_DIR = os.path.dirname(os.path.dirname(os.path.abspath(TORCHMOND)))


def read_dockerfile(path):
    """[(stage index, INSTRUCTION, arguments)], continuation lines joined."""
    instructions, stage, pending = [], -1, ""
    with open(path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not pending and (not line.strip() or line.lstrip().startswith("#")):
                continue
            if line.endswith("\\"):
                pending += line[:-1] + " "
                continue
            line, pending = pending + line, ""
            word, _, args = line.strip().partition(" ")
            word = word.upper()
            if word == "FROM":
                stage += 1
            instructions.append((stage, word, args.strip()))
    return instructions


@pytest.fixture(scope="module")
def dockerfile():
    return read_dockerfile(DOCKERFILE)


@pytest.fixture(scope="module")
def final(dockerfile):
    last = dockerfile[-1][0]
    return [(word, args) for stage, word, args in dockerfile if stage == last]


def apt_installed(run):
    """Packages an `apt-get install` in a RUN names."""
    words = shlex.split(run.replace("&&", " && "))
    start = [i for i in range(len(words) - 1) if words[i:i + 2] == ["apt-get", "install"]]
    packages = []
    for i in start:
        for w in words[i + 2:]:
            if w == "&&":
                break
            if not w.startswith("-"):
                packages.append(w)
    return packages


_installed = None


def installed_depends():
    """Package -> the package names it depends on, for every package installed
    here (one dpkg-query, cached)."""
    global _installed
    if _installed is None:
        out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Depends}, "
                              "${Pre-Depends}\n"], capture_output=True, text=True, check=True)
        _installed = {}
        for line in out.stdout.splitlines():
            package, status, depends = line.split("\t")
            if not status.endswith(" installed"):
                continue
            _installed[package] = [
                alternative.strip().split(" ")[0].split(":")[0]
                for dep in depends.split(",") for alternative in dep.split("|")
                if alternative.strip()]
    return _installed


def depends_closure(packages):
    """The packages and, recursively, what they depend on, among the packages
    installed here (Debian bookworm, as in the image)."""
    installed = installed_depends()
    seen, todo = set(), list(packages)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        assert p in installed, f"{p}: not a package installed here"
        seen.add(p)
        todo.extend(d for d in installed[p] if d in installed)
    return seen


def packages_of(paths):
    """path -> the Debian package that installed it (dpkg -S, once for all),
    trying each path as given, resolved, and across the /usr merge."""
    candidates = {}
    for path in paths:
        real = os.path.realpath(path)
        candidates[path] = [path, real, "/usr" + path, re.sub(r"^/usr", "", real)]
    out = subprocess.run(["dpkg", "-S", *{c for cs in candidates.values() for c in cs}],
                         capture_output=True, text=True)
    owner = {}
    for line in out.stdout.splitlines():
        package, _, path = line.partition(": ")
        owner[path] = package.split(",")[0].split(":")[0].strip()
    result = {}
    for path, cs in candidates.items():
        found = [owner[c] for c in cs if c in owner]
        assert found, f"{path}: no Debian package owns it"
        result[path] = found[0]
    return result


def test_the_runtime_stage_installs_no_library(final):
    # The binaries link everything but glibc (tests/release/audit_elf.py);
    # the base image's glibc is all they need. curl is the HEALTHCHECK's.
    runtime = [p for word, args in final if word == "RUN" for p in apt_installed(args)]
    assert runtime == ["curl"], runtime


def project_version():
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(torchmon VERSION ([0-9.]+)", f.read()).group(1)


def test_the_image_takes_the_portable_tarball(dockerfile):
    unpack = [(word, args) for stage, word, args in dockerfile if stage == 0]
    assert unpack[0] == ("FROM", "debian:bookworm-slim AS unpack")
    args = dict(a.split("=", 1) for word, a in unpack if word == "ARG")
    assert args["TORCHMON_VERSION"] == project_version()
    (copy,) = [a for word, a in unpack if word == "COPY"]
    source = copy.split()[0].replace("${TORCHMON_VERSION}", args["TORCHMON_VERSION"])
    # The name deploy/release/build.sh gives its tarball, in the folder the
    # Dockerfile's comment and docs/deploy.md tell to build into.
    assert source == f"dist/torchmon-{project_version()}-linux-x86_64.tar.gz"
    with open(os.path.join(DEPLOY, "release", "build.sh")) as f:
        build = f.read()
    assert "name=torchmon-$version-linux-$release_arch" in build
    # build.sh's architecture for the image's (x86-64) tarball, as arch.sh names it.
    arch = subprocess.run(["bash", "-c", 'TORCHMON_RELEASE_ARCH=x86_64; source "$1"; '
                           'echo "$release_arch"', "-", os.path.join(DEPLOY, "release", "arch.sh")],
                          capture_output=True, text=True, timeout=60, check=True).stdout
    assert arch == "x86_64\n"
    assert 'tar -C "$stage" --owner=0 --group=0 --sort=name -czf "$out/$name.tar.gz" "$name"' in build
    runs = " ".join(a for word, a in unpack if word == "RUN")
    for binary in ("torchmond", "torchmonctl"):
        assert f"/unpacked/bin/{binary} /out/{binary}" in runs


def daemon_packages():
    out = subprocess.run(
        ["bash", "-c", 'eval "$(sed -n "/^daemon_packages=(/,/^)/p" "$1")"; '
                       'echo "${daemon_packages[@]}"', "-", INSTALL_DEPS],
        capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_daemon_packages_cover_what_the_daemon_build_finds():
    """install-deps.sh --daemon (the build stage) installs the packages of every
    file CMake found for torchmond and torchmonctl in the build tree here."""
    cache = {}
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"([A-Za-z_]+):[A-Z]+=(.*)", line.strip())
            if m:
                cache[m.group(1)] = m.group(2)
    files = [
        os.path.join(cache["gRPC_DIR"], "gRPCConfig.cmake"),
        os.path.join(cache["absl_DIR"], "abslConfig.cmake"),
        os.path.join(cache["Snappy_DIR"], "SnappyConfig.cmake"),
        os.path.join(cache["Boost_INCLUDE_DIR"], "boost", "version.hpp"),
        os.path.join(cache["Protobuf_INCLUDE_DIR"], "google", "protobuf", "message.h"),
        cache["Protobuf_PROTOC_EXECUTABLE"],
        "/usr/bin/grpc_cpp_plugin",
        "/usr/bin/cmake",
        "/usr/bin/g++",
    ]
    closure = depends_closure(daemon_packages())
    needed = {package: f for f, package in packages_of(files).items()}
    missing = {p: f for p, f in needed.items() if p not in closure}
    assert not missing, f"install-deps.sh --daemon does not bring: {missing}"


def test_install_deps_refuses_an_unknown_option():
    out = subprocess.run(["bash", INSTALL_DEPS, "--deamon"], capture_output=True, text=True)
    assert out.returncode == 2
    assert '"--deamon"' in out.stderr


def test_every_copied_source_exists_and_is_in_the_build_context(dockerfile):
    with open(os.path.join(REPO, ".dockerignore")) as f:
        ignored = [line.strip().rstrip("/") for line in f
                   if line.strip() and not line.startswith("#")]
    assert ".git" in ignored and "build*" in ignored
    for _, word, args in dockerfile:
        if word != "COPY" or args.startswith("--from"):
            continue
        *sources, _ = args.split()
        for source in sources:
            if source == ".":
                continue
            # dist/ holds what deploy/release/build.sh makes: checked by name
            # (test_the_image_takes_the_portable_tarball), not by existence.
            if not source.startswith("dist/"):
                assert os.path.exists(os.path.join(REPO, source)), source
            assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), source


def test_apt_hygiene(dockerfile):
    for stage, word, args in dockerfile:
        if word == "RUN" and "apt-get install" in args:
            assert "apt-get update" in args and "-y" in args.split()
            assert "--no-install-recommends" in args
        if word == "RUN" and ("apt-get" in args or "install-deps.sh" in args):
            assert "rm -rf /var/lib/apt/lists/*" in args, args
        if word == "FROM":
            image = args.split()[0]
            assert ":" in image and not image.endswith(":latest"), image
            assert image.split(":")[1].startswith("bookworm"), image  # the packages named here


def test_runs_as_a_fixed_unprivileged_user(final):
    users = [args for word, args in final if word == "USER"]
    assert users, "no USER: the daemon would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) > 0  # numeric, so runAsNonRoot can check it
    assert gid.isdigit() and int(gid) > 0
    runs = " ".join(args for word, args in final if word == "RUN")
    assert f"--gid {gid} torchmon" in runs and f"--uid {uid} --gid torchmon" in runs
    words = [word for word, _ in final]
    assert words.index("USER") < words.index("ENTRYPOINT")


def test_entrypoint_config_port_and_healthcheck_agree(final):
    args = {word: a for word, a in final}
    entrypoint = json.loads(args["ENTRYPOINT"])
    cmd = json.loads(args["CMD"])
    assert entrypoint == ["/usr/local/bin/torchmond"]
    assert cmd[0] == "--config"
    copies = {a.split()[-1]: a.split()[:-1] for word, a in final if word == "COPY"}
    assert copies[cmd[1]] == ["deploy/torchmond.conf"]
    assert "/out/torchmond" in copies["/usr/local/bin/"][1:]
    with open(os.path.join(DEPLOY, "torchmond.conf")) as f:
        port = config_settings(f.read())["metrics-listen"][0].rsplit(":", 1)[1]
    assert args["EXPOSE"] == port
    health = args["HEALTHCHECK"]
    assert f"http://127.0.0.1:{port}/healthz" in health
    assert "curl" in health and "-f" in health.replace("-fsS", "-f")  # fails on 503
    runtime = [p for word, a in final if word == "RUN" for p in apt_installed(a)]
    assert "curl" in runtime

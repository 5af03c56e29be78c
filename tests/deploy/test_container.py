"""deploy/container/Dockerfile, checked without docker: its runtime packages
cover every shared library the built torchmond and torchmonctl need, its
build stage uses the repository's own script and targets, and the
hadolint-style rules that matter here hold. The image build itself is not
run (no docker on the test machines)."""

import fnmatch
import json
import os
import re
import shlex
import subprocess

import pytest

from conftest import DEPLOY, REPO, TORCHMOND, TORCHMONCTL, config_settings

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


def shared_libraries(binary):
    out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True)
    libs = re.findall(r"=> (/\S+)", out.stdout)
    assert "not found" not in out.stdout, out.stdout
    assert libs, out.stdout
    return libs


def test_runtime_packages_cover_every_shared_library(final):
    runtime = [p for word, args in final if word == "RUN" for p in apt_installed(args)]
    assert "libgrpc++1.51" in runtime
    closure = depends_closure(runtime)
    libs = shared_libraries(TORCHMOND) + shared_libraries(TORCHMONCTL)
    needed = {}
    for lib, package in packages_of(libs).items():
        needed.setdefault(package, []).append(os.path.basename(lib))
    missing = {p: libs for p, libs in needed.items() if p not in closure}
    assert not missing, f"libraries whose packages the runtime stage does not install: {missing}"


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
        os.path.join(cache["civetweb_DIR"], "civetweb-config.cmake"),
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


def test_build_stage_uses_the_repositorys_script_and_targets(dockerfile):
    build = [(word, args) for stage, word, args in dockerfile if stage == 0]
    assert build[0] == ("FROM", "debian:bookworm AS build")
    runs = " ".join(args for word, args in build if word == "RUN")
    assert "deploy/dev/install-deps.sh --daemon" in runs
    assert "-DCMAKE_BUILD_TYPE=Release" in runs
    targets = re.search(r"--target ([\w ]+?) &&", runs).group(1).split()
    assert sorted(targets) == ["torchmonctl", "torchmond"]
    for target, cmake in (("torchmond", "server/CMakeLists.txt"),
                          ("torchmonctl", "client/cli/CMakeLists.txt")):
        with open(os.path.join(REPO, cmake)) as f:
            assert f"add_executable({target}" in f.read()
    # The binaries are taken from where the build tree puts them (as here).
    for binary in (TORCHMOND, TORCHMONCTL):
        relative = os.path.relpath(binary, BUILD_DIR)
        assert f"/build/{relative} " in runs + " ", relative


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

"""The portable release artefacts, used in real Debian roots that are not the
build host: bullseye (glibc 2.31, the oldest Debian release still on
Debian's mirrors; the artefacts ask for glibc 2.28) and trixie (the newest,
with its own CPython 3.13). Each test runs for both architectures: the
x86_64 artefacts in the amd64 roots, the aarch64 ones in the same roots of
Debian's arm64 packages, under emulation (qemu-user-static through
binfmt_misc: roots.sh), which proves they install, run and answer exactly,
never how fast. And the wire is one: an aarch64 client records exactly into
an x86_64 daemon, and the other way round.

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 -m pytest tests/release -v

OUT is the folder `deploy/release/build.sh OUT` filled. Needs root (chroot,
mount), debootstrap and, the first time only, Debian's archive (the mirror
in this machine's apt sources, or TORCHMON_DEBIAN_MIRROR): the roots come
from tests/release/roots.sh, which caches them under
${TORCHMON_RELEASE_CACHE:-~/.cache/torchmon-release}. Without
TORCHMON_RELEASE_DIR every test is skipped.

What it proves, each test in a throwaway copy of a cached root (an overlay
mount, or `cp -a` where overlayfs is not available), with nothing from the
build host inside it but the artefact under test:

- the .deb installs with apt in bullseye and in trixie offline (every
  dependency is in a minimal system), `torchmond --check-config` accepts the
  shipped configuration, postinst made the torchmon user, purge works;
- the tarball's torchmond serves gRPC (TCP and a Unix socket) and /metrics in
  bullseye, its torchmonctl pushes and reads back, SIGTERM ends it with 0;
- the tarball's torchmond pushes remote-write over TLS to a receiver whose
  CA is only in the system's store, laid out as Debian's and as RHEL 8's
  (/etc/pki, no /etc/ssl);
- the wheel installs with pip --no-index into a venv of trixie's python3, and
  1..1000 recorded through the Python API come back from the tarball's daemon
  exactly (count, sum, max; p99 within the sketch's documented 1 %), with an
  event and its data;
- the tarball's C++ client library builds tests/install/consumer with
  bullseye's g++ 10 and cmake 3.18 in a bullseye root (find_package and
  pkg-config, nothing but the tarball), and what that program records comes
  back from the tarball's daemon exactly (count, sum, max, p99, an event);
- the .rpm requires exactly glibc >= 2.28 and systemd, and its torchmond
  (extracted with rpm2cpio) runs in bullseye and accepts its configuration
  once the package's own %post has made the torchmon user.

Also: every artefact carries the version of CMakeLists.txt, the tarball
has one top directory with the documented layout, and the packages and the
tarball carry the licences of every library they link in.
"""

import contextlib
import glob
import http.server
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tarfile
import tempfile
import threading
import urllib.request

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from certificates import make_certificate  # noqa: E402
from torchmond import LaunchedDaemon, wait_for  # noqa: E402  (the shared helpers)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
RELEASE_DIR = os.environ.get("TORCHMON_RELEASE_DIR")

if not RELEASE_DIR:
    pytest.skip("TORCHMON_RELEASE_DIR is not set: point it at the folder "
                "deploy/release/build.sh filled (the .deb, .rpm, tarball and wheel)",
                allow_module_level=True)

# The CPU qemu-aarch64 emulates in the arm64 roots (QEMU_CPU; roots.sh
# reads the same file): qemu's "max", but with its own cheap algorithm for
# pointer authentication, which the Arm architecture allows. Debian's arm64
# programs sign and check return addresses in every function, and qemu 7.2
# computes the architected QARMA5 for each: `import torch` took 62 s that
# way and 14 s this way, every aarch64 program still checked.
with open(os.path.join(HERE, "qemu-cpu")) as f:
    QEMU_CPU = f.read().strip()

# The environment of every command run in a root: nothing of this host's
# (no XDG_RUNTIME_DIR, no TORCHMON_*), apt without questions, the CPU an
# aarch64 program is emulated on.
CHROOT_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "DEBIAN_FRONTEND": "noninteractive",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    "QEMU_CPU": QEMU_CPU,
}


def project_version():
    """The version in the top-level CMakeLists.txt: what every artefact carries."""
    with open(os.path.join(REPO, "CMakeLists.txt")) as f:
        return re.search(r"project\(\s*torchmon\s+VERSION\s+([0-9.]+)", f.read()).group(1)


VERSION = project_version()

#: The architectures of the artefacts (uname -m's names) and, for each, the
#: suffix of its Debian roots' names and its .deb's architecture.
ARCHES = ("x86_64", "aarch64")
ROOT_SUFFIX = {"x86_64": "", "aarch64": "-arm64"}
DEBIAN_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def root_of(suite, arch):
    """The name of the root of `suite` for `arch` (roots.sh's table)."""
    return suite + ROOT_SUFFIX[arch]


def artefact(pattern):
    """The one file of RELEASE_DIR matching `pattern`."""
    found = glob.glob(os.path.join(RELEASE_DIR, pattern))
    assert len(found) == 1, f"want exactly one {pattern} in {RELEASE_DIR}, found {found}"
    return found[0]


def show(proc):
    """A finished process, for an assertion message."""
    return (f"{proc.args} exited {proc.returncode}\n--- stdout\n{proc.stdout}"
            f"\n--- stderr\n{proc.stderr}")


def run(argv, timeout=120, check=True, **kwargs):
    """Runs argv on the host, bounded; with check, asserts exit status 0."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, **kwargs)
    if check:
        assert proc.returncode == 0, show(proc)
    return proc


def chroot(root, *argv, timeout=120, check=True, input=None, env=None):
    """Runs argv inside `root`, as root, with CHROOT_ENV (and `env` over it)."""
    return run(["chroot", root, *argv], timeout=timeout, check=check, input=input,
               env={**CHROOT_ENV, **(env or {})})


# --- Roots ------------------------------------------------------------------

_cached_roots = {}


def cached_root(suite):
    """The cached root of `suite` (roots.sh builds it the first time, a few
    minutes; its progress goes to this test's stderr). Never written to."""
    if suite not in _cached_roots:
        assert os.geteuid() == 0, "the release tests need root (debootstrap, chroot, mount)"
        proc = subprocess.run([os.path.join(HERE, "roots.sh"), suite], stdout=subprocess.PIPE,
                              text=True, timeout=1800)
        assert proc.returncode == 0, f"roots.sh {suite} failed (its stderr is above)"
        _cached_roots[suite] = proc.stdout.strip()
    return _cached_roots[suite]


def mounts_under(path):
    """Mount points at or below `path`, deepest first."""
    prefix = os.path.realpath(path)
    with open("/proc/self/mounts") as f:
        points = [line.split()[1] for line in f]
    return sorted((p for p in points if p == prefix or p.startswith(prefix + "/")),
                  key=len, reverse=True)


def unmount(point):
    if subprocess.run(["umount", point], capture_output=True, timeout=30).returncode != 0:
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)


@contextlib.contextmanager
def throwaway_root(suite):
    """A writable copy of the cached root of `suite`, with /proc and a
    private /dev/pts (apt's log wants a pty) mounted:
    an overlay (the cached root as the lower layer, changes in a temp upper
    layer) where the kernel allows it, else `cp -a`. Everything is unmounted
    and deleted afterwards; the cached root is never modified."""
    lower = cached_root(suite)
    tmp = tempfile.mkdtemp(prefix=f"torchmon-release-{suite}.")
    root = os.path.join(tmp, "root")
    try:
        for d in ("upper", "work", "root"):
            os.mkdir(os.path.join(tmp, d))
        overlay = subprocess.run(
            ["mount", "-t", "overlay", "overlay", "-o",
             f"lowerdir={lower},upperdir={tmp}/upper,workdir={tmp}/work", root],
            capture_output=True, text=True, timeout=30)
        if overlay.returncode != 0:
            print(f"overlayfs refused ({overlay.stderr.strip()}): copying {lower}")
            run(["cp", "-a", lower + "/.", root], timeout=600)
        run(["mount", "-t", "proc", "proc", os.path.join(root, "proc")], timeout=30)
        run(["mount", "-t", "devpts", "-o", "newinstance,ptmxmode=0666", "devpts",
             os.path.join(root, "dev", "pts")], timeout=30)
        yield root
    finally:
        for point in mounts_under(tmp):
            unmount(point)
        left = mounts_under(tmp)
        # Deleting through a mount (/proc, or the lower layer) would be a
        # disaster: leave the folder rather than risk it.
        assert not left, f"still mounted, {tmp} left in place: {left}"
        shutil.rmtree(tmp)


def put(root, host_file, directory="/tmp"):
    """Copies a host file into the root; returns its path inside the root."""
    inside = os.path.join(directory, os.path.basename(host_file))
    shutil.copy(host_file, root + inside)
    return inside


def unpack_tarball(root, arch="x86_64"):
    """Unpacks the tarball of `arch` under /opt of the root with the root's
    own tar; returns its top directory inside the root
    (/opt/torchmon-<v>-linux-<arch>)."""
    tarball = artefact(f"torchmon-*-linux-{arch}.tar.gz")
    top = os.path.basename(tarball)[:-len(".tar.gz")]
    chroot(root, "tar", "-xzf", put(root, tarball), "-C", "/opt", timeout=120)
    for tool in ("torchmond", "torchmonctl"):
        assert os.access(f"{root}/opt/{top}/bin/{tool}", os.X_OK), f"no bin/{tool} in {top}/"
    return f"/opt/{top}"


# --- A daemon inside a root ---------------------------------------------------

class ChrootDaemon:
    """The tarball's torchmond in `root`, on a Unix socket in a temp folder of
    the root, a loopback TCP port and a loopback metrics port (port 0: the
    daemon binds free ports and names them in its ready line, as
    tests/support/torchmond.py reads it).

    A grace of 5 s: under emulation a client's batch can reach the daemon
    more than its window and a short grace after its samples' times, and is
    then rightly counted late, with no window at all. 100 ms failed that way
    in four tests, one CI run at a time (torchmonctl push over TLS and into
    bullseye, the C++ consumer; aarch64 each time). A 1 s window closes 6 s
    after its end."""

    def __init__(self, root, prefix, *flags):
        self.root, self.prefix = root, prefix
        self.run_dir = tempfile.mkdtemp(prefix="torchmond.", dir=root + "/tmp")
        self.socket = self.run_dir[len(root):] + "/torchmond.sock"  # path inside the root
        self.stderr = open(os.path.join(self.run_dir, "stderr"), "w+")
        # chroot(8) execs torchmond: the child's pid is the daemon's.
        try:
            self.launched = LaunchedDaemon(
                ["chroot", root, f"{prefix}/bin/torchmond", "--listen", f"unix://{self.socket}",
                 "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--grace",
                 "5s", *flags], stderr=self.stderr, timeout=30, env=CHROOT_ENV)
        except RuntimeError as e:
            self.stderr.close()
            pytest.fail(str(e))
        self.proc = self.launched.proc
        ready = self.launched.ready
        try:
            assert f"unix://{self.socket}" in ready.grpc, ready.line
            self.tcp, self.metrics = ready.tcp_target, ready.metrics
            assert self.tcp.startswith("127.0.0.1:") and self.metrics.startswith("127.0.0.1:"), (
                ready.line)
        except BaseException:
            self.kill()
            raise

    def read_stderr(self):
        return self.launched.read_stderr()

    def scrape(self):
        """/metrics, scraped from the host (the chroot shares its network):
        (status, Content-Type, body)."""
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()

    def ctl(self, *args, target=None, check=True, timeout=60):
        """The tarball's torchmonctl in the root, on the Unix socket unless
        `target` says otherwise; --json output parsed (None if empty)."""
        proc = chroot(self.root, f"{self.prefix}/bin/torchmonctl", "--target",
                      target or f"unix://{self.socket}", "--json", *args, check=False,
                      timeout=timeout)
        if check:
            assert proc.returncode == 0, show(proc)
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    def stop(self, timeout=15):
        """SIGTERM; asserts the daemon exits 0 within `timeout` seconds."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"torchmond still running {timeout} s after SIGTERM; stderr:\n"
                        f"{self.read_stderr()}")
        assert status == 0, f"torchmond exited {status} on SIGTERM; stderr:\n{self.read_stderr()}"

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)
        self.stderr.close()


@contextlib.contextmanager
def chroot_daemon(root, prefix, *flags):
    """A ChrootDaemon that is killed on the way out, whatever happened."""
    daemon = ChrootDaemon(root, prefix, *flags)
    try:
        yield daemon
    finally:
        daemon.kill()


def poll(fetch, done, timeout, what):
    """Calls fetch() until done(result), every 50 ms, for at most `timeout`
    seconds; returns the last result, failing with it past the deadline.
    `what` names the wait in the failure: a string, or a function called
    then (for what the daemon said meanwhile)."""
    last = [None]  # fetch()'s latest result: returned, or shown in the failure

    def fetched_and_done():
        last[0] = fetch()
        return done(last[0])

    if not wait_for(fetched_and_done, timeout, 0.05):
        pytest.fail(f"{what() if callable(what) else what}: not within {timeout} s; "
                    f"last: {last[0]!r}")
    return last[0]


# --- The tests ----------------------------------------------------------------

@pytest.mark.parametrize("arch", ARCHES)
def test_artefacts_are_named_for_this_version(arch):
    for pattern in (f"torchmond_{VERSION}-*_{DEBIAN_ARCH[arch]}.deb",
                    f"torchmond-{VERSION}-*.{arch}.rpm",
                    f"torchmon-{VERSION}-linux-{arch}.tar.gz",
                    f"torchmon-{VERSION}-cp310-abi3-manylinux_2_28_{arch}.whl"):
        artefact(pattern)


@pytest.mark.parametrize("arch", ARCHES)
def test_tarball_has_one_top_directory_and_the_documented_layout(arch):
    tarball = artefact(f"torchmon-*-linux-{arch}.tar.gz")
    top = os.path.basename(tarball)[:-len(".tar.gz")]
    with tarfile.open(tarball) as t:
        names = [n.rstrip("/") for n in t.getnames()]
    outside = [n for n in names if n != top and not n.startswith(top + "/")]
    assert not outside, f"entries outside {top}/: {outside[:10]}"
    for path in ("bin/torchmond", "bin/torchmonctl", "etc/torchmon/torchmond.conf",
                 "share/torchmon/torchmond.service", "share/torchmon/bundled-versions",
                 "LICENSE", "include/torchmon/client.h", "include/torchmon/v1/torchmon.pb.h",
                 "include/grpcpp/grpcpp.h", "include/absl/status/status.h",
                 "lib/libtorchmon_client.a", "lib/libtorchmon_proto.a",
                 "lib/libtorchmon_bundled.a", "lib/cmake/torchmon/torchmonConfig.cmake",
                 "lib/pkgconfig/torchmon.pc"):
        assert f"{top}/{path}" in names, f"{path} missing from {tarball}"
    assert any(n.startswith(f"{top}/share/doc/") for n in names), "no share/doc/ in the tarball"
    # What is linked in comes with its licences: the daemon's and the C++
    # client's (which has neither snappy nor curl).
    with tarfile.open(tarball) as t:
        versions = t.extractfile(f"{top}/share/torchmon/bundled-versions").read().decode()
    bundled = [line.split()[0] for line in versions.splitlines()]
    assert {"grpc", "openssl", "protobuf", "abseil", "curl", "snappy"} <= set(bundled), bundled
    assert "civetweb" not in bundled, bundled  # torchmond serves HTTP itself
    for package in bundled:
        for component in ("torchmond", "libtorchmon-dev"):
            if component == "libtorchmon-dev" and package in ("curl", "snappy"):
                continue
            assert f"{top}/share/doc/{component}/bundled/{package}/copyright" in names, (
                f"{package}'s licence missing from share/doc/{component}/bundled/")
    assert f"{top}/share/doc/torchmond/bundled/openssl/LICENSE.txt" in names
    assert f"{top}/share/doc/torchmond/bundled/snappy/COPYING" in names
    for package in ("curl", "snappy"):
        assert not any(n.startswith(f"{top}/share/doc/libtorchmon-dev/bundled/{package}")
                       for n in names), package


@pytest.mark.parametrize("arch", ARCHES)
@pytest.mark.parametrize("suite", ["bullseye", "trixie"])
def test_deb_installs_offline_checks_its_config_and_purges(suite, arch):
    deb = artefact(f"torchmond_*_{DEBIAN_ARCH[arch]}.deb")
    with throwaway_root(root_of(suite, arch)) as root:
        inside = put(root, deb)
        # Offline: the root's package lists name the archive, so a
        # dependency missing from the minimal system would be fetched; the
        # dead proxy makes that fail, and only torchmond may be new.
        # (--no-download would refuse the local .deb itself.)
        install = chroot(root, "apt-get", "install", "-y",
                         "-o", "Acquire::http::Proxy=http://127.0.0.1:9/", inside,
                         check=False, timeout=300)
        assert install.returncode == 0, show(install)
        new = re.search(r"The following NEW packages will be installed:\n((?:  .*\n)+)",
                        install.stdout)
        assert new and new.group(1).split() == ["torchmond"], (
            "apt installed something besides torchmond:\n" + install.stdout)

        check = chroot(root, "torchmond", "--check-config", "/etc/torchmon/torchmond.conf",
                       check=False)
        assert (check.returncode, check.stdout) == (0, "/etc/torchmon/torchmond.conf: ok\n"), \
            show(check)
        version = chroot(root, "torchmond", "--version")
        assert version.stdout == f"torchmond {VERSION}\n", show(version)
        chroot(root, "torchmonctl", "--help")

        # The licences of what torchmond links in come with it.
        for licence in ("grpc/LICENSE", "grpc/NOTICE.txt", "openssl/LICENSE.txt",
                        "abseil/copyright", "curl/copyright", "snappy/copyright"):
            assert os.path.isfile(f"{root}/usr/share/doc/torchmond/bundled/{licence}"), licence

        # postinst made the system user and its group.
        user = chroot(root, "getent", "passwd", "torchmon", check=False)
        assert user.returncode == 0, show(user)
        assert user.stdout.split(":")[5] == "/var/lib/torchmon", user.stdout
        chroot(root, "getent", "group", "torchmon")

        purge = chroot(root, "apt-get", "purge", "-y", "torchmond", check=False, timeout=300)
        assert purge.returncode == 0, show(purge)
        assert not os.path.lexists(root + "/usr/bin/torchmond")
        assert not os.path.lexists(root + "/etc/torchmon/torchmond.conf")
        status = chroot(root, "dpkg-query", "-W", "-f=${Status}", "torchmond", check=False)
        assert "installed" not in status.stdout.split(), show(status)


@pytest.mark.parametrize("arch", ARCHES)
def test_tarball_daemon_serves_grpc_and_metrics_in_bullseye(arch):
    with throwaway_root(root_of("bullseye", arch)) as root:
        prefix = unpack_tarball(root, arch)
        with chroot_daemon(root, prefix) as daemon:
            # Samples in over TCP, read back over the Unix socket.
            push = chroot(root, f"{prefix}/bin/torchmonctl", "--target", daemon.tcp, "push",
                          "release.smoke", "1", "2", "3", "--agg", "count,sum",
                          "--window", "1s", "--label", "check=tarball", check=False)
            assert push.returncode == 0, show(push)
            series = poll(lambda: daemon.ctl("series", "--stat", "release.smoke")["series"],
                          lambda s: len(s) == 1 and s[0]["counters"]["accepted"] == 3,
                          60, "series release.smoke with 3 samples accepted")
            assert series[0]["labels"]["check"] == "tarball"
            assert series[0]["aggregations"] == ["count", "sum"]

            status, content_type, body = poll(
                daemon.scrape, lambda r: re.search(
                    r'^torchmon_samples_accepted_total\{[^}]*stat="release\.smoke"[^}]*\} 3$',
                    r[2], re.M), 60, "torchmon_samples_accepted_total of release.smoke")
            assert status == 200 and content_type.startswith("text/plain"), content_type
            assert re.search(r"^# TYPE torchmon_\w+ ", body, re.M), body[:2000]
            assert f'torchmon_daemon_build_info{{version="{VERSION}"}} 1' in body, body[:2000]

            daemon.stop()


class TlsReceiver:
    """An HTTPS receiver on 127.0.0.1 (a certificate for 127.0.0.1 that
    `ca` signed) that answers every POST 204 and counts them."""

    def __init__(self, directory):
        make_certificate(directory, "ca", "ca_ext")
        make_certificate(directory, "server", "server_ext", "ca")
        self.ca = os.path.join(directory, "ca.pem")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(os.path.join(directory, "server.pem"),
                                os.path.join(directory, "server.key"))
        self.posts = 0
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.posts += 1
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def export_metrics(daemon):
    """The daemon's own counters (push, windows, samples received, dropped and
    why), scraped: what a push that did not arrive left there."""
    try:
        _, _, body = daemon.scrape()
    except OSError as e:
        return f"(no scrape: {e})"
    return "\n".join(line for line in body.splitlines()
                     if line.startswith(("torchmon_export_", "torchmon_daemon_",
                                         "torchmon_samples_")))


@pytest.mark.parametrize("arch", ARCHES)
def test_tarball_daemon_pushes_over_tls_with_the_systems_cas_in_debian_and_el_layouts(
        tmp_path, arch):
    """No ca_file=: the CA is found where Debian keeps it, and where RHEL 8
    and its rebuilds keep theirs (no /etc/ssl at all)."""
    receiver = TlsReceiver(str(tmp_path))
    with open(receiver.ca) as f:
        ca = f.read()
    try:
        with throwaway_root(root_of("bullseye", arch)) as root:
            prefix = unpack_tarball(root, arch)
            for layout, path in (("debian", "/etc/ssl/certs/ca-certificates.crt"),
                                 ("el", "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem")):
                shutil.rmtree(root + "/etc/ssl", ignore_errors=True)
                shutil.rmtree(root + "/etc/pki", ignore_errors=True)
                os.makedirs(os.path.dirname(root + path))
                with open(root + path, "w") as f:
                    f.write(ca)
                before = receiver.posts
                with chroot_daemon(root, prefix, "--remote-write-url",
                                   f"https://127.0.0.1:{receiver.port}/api/v1/write") as daemon:
                    push = chroot(root, f"{prefix}/bin/torchmonctl", "--target", daemon.tcp,
                                  "push", "release.tls", "1", "--window", "100ms", check=False)
                    assert push.returncode == 0, show(push)
                    # Its stderr and the daemon's own counters as they are at
                    # the deadline, which say where a push that did not come
                    # was lost (the stderr read when the wait began said
                    # nothing, the push counters alone not enough).
                    poll(lambda: receiver.posts, lambda n: n > before, 60,
                         lambda: f"a push over TLS with the {layout} layout's CAs; stderr:\n"
                                 f"{daemon.read_stderr()}\n{export_metrics(daemon)}")
                    daemon.stop()
    finally:
        receiver.stop()


RECORD_PY = r'''
"""Records 1..1000 and an event through the torchmon Python API, against the
daemon at argv[1]; prints what it did as JSON."""
import datetime, json, sys, time
import torchmon as monitor

WINDOW_MS = 1000
client = monitor.Client(target=sys.argv[1], labels={"test": "release"},
                        labels_from_environment=False)
monitor.set_default_client(client)
for attempt in range(3):
    # Start in the first half of a 1 s window (a wait of at most 0.5 s), so
    # the 1000 adds (about a millisecond) land in one window; checked after,
    # with a margin for the client's clock, and tried again if not.
    position = time.time() * 1000 % WINDOW_MS
    if position > WINDOW_MS / 2:
        time.sleep((WINDOW_MS - position + 20) / 1000)
    name = f"release.values{attempt}"
    stat = monitor.Stat(name, [monitor.SUM, monitor.COUNT, monitor.MAX, "p99"],
                        datetime.timedelta(milliseconds=WINDOW_MS))
    first = time.time() * 1000
    for v in range(1, 1001):
        stat.add(float(v))
    last = time.time() * 1000
    if (first - 20) // WINDOW_MS == (last + 20) // WINDOW_MS:
        break
else:
    sys.exit("three tries straddled a window boundary")
monitor.log_event(monitor.Event("release.done", datetime.datetime.now(),
                                {"epoch": 3, "loss": 0.25, "tag": "best", "saved": True}))
flushed = monitor.flush(30)
print(json.dumps({"stat": name, "flushed": flushed, "errors": client.errors(),
                  "stats": client.stats(), "version": monitor.__version__,
                  "file": monitor.__file__}))
client.close(10)
'''


def venv_with_the_wheel(root, arch, *venv_options):
    """A venv of the root's python3 at /venv (venv_options: python3 -m
    venv's) with the wheel of `arch` installed into it by pip, offline.

    The pip is Debian's (python3-pip-whl, which python3-venv needs), run
    from its wheel as ensurepip runs it, but not installed into the venv
    first: under emulation ensurepip's install of pip took 90 of a test's
    110 s, and proves nothing of torchmon's wheel."""
    wheel = artefact(f"torchmon-*-cp310-abi3-manylinux_2_28_{arch}.whl")
    chroot(root, "python3", "-m", "venv", "--without-pip", *venv_options, "/venv", timeout=600)
    pips = glob.glob(root + "/usr/share/python-wheels/pip-*-py3-none-any.whl")
    assert len(pips) == 1, pips
    pip = chroot(root, "/venv/bin/python", pips[0][len(root):] + "/pip", "install",
                 "--no-index", put(root, wheel), check=False, timeout=600)
    assert pip.returncode == 0, show(pip)


def wheel_venv(root, arch):
    """venv_with_the_wheel, and RECORD_PY at /tmp/record.py."""
    venv_with_the_wheel(root, arch)
    with open(root + "/tmp/record.py", "w") as f:
        f.write(RECORD_PY)


def record_with_the_wheel(root, daemon, target):
    """RECORD_PY in the root's /venv against `target`, and what `daemon`
    (a ChrootDaemon, perhaps in another root) then holds: its checks of the
    recording, the closed window and the event."""
    record = chroot(root, "/venv/bin/python", "/tmp/record.py", target, check=False, timeout=300)
    assert record.returncode == 0, show(record)
    seen = json.loads(record.stdout)
    assert seen["file"].startswith("/venv/"), seen
    assert seen["version"] == VERSION, seen
    assert seen["flushed"] is True and seen["errors"] == [], seen
    assert seen["stats"]["samples_added"] == seen["stats"]["samples_delivered"], seen
    # The window closes 6 s after its end (the chroot daemon's grace): later
    # under emulation, where the daemon itself may be emulated.
    windows = poll(lambda: daemon.ctl("windows", seen["stat"])["windows"],
                   lambda w: len(w) >= 1, 60, f"a closed window of {seen['stat']}")
    events = daemon.ctl("events", "release.done")["events"]
    return windows, events


def check_recorded_exactly(windows, events, user="root"):
    """What RECORD_PY recorded, as the daemon reports it: 1..1000 in one
    window, exactly, and the event with its typed data."""
    (window,) = windows
    # The client runs as root in the root (chroot needs it): the daemon
    # names it by the root's /etc/passwd (--peer-labels, on by default), or
    # not at all over TCP.
    labels = {"test": "release", **({"user": user} if user else {})}
    assert window["labels"] == labels, window
    assert (window["accepted"], window["capped"], window["partial"]) == (1000, 0, False), window
    aggregates = window["aggregates"]
    assert set(aggregates) == {"count", "sum", "max", "p99"}, aggregates
    assert (aggregates["count"], aggregates["sum"], aggregates["max"]) == (1000, 500500, 1000)
    # docs/semantics.md#quantiles: a DDSketch estimate within 1 % of the
    # sample of rank floor(q * (COUNT - 1)) = 989 of 1..1000, which is 990.
    assert abs(aggregates["p99"] - 990) <= 0.01 * 990, aggregates
    (event,) = events
    assert event["labels"] == labels, event
    assert event["data"] == {"epoch": 3, "loss": 0.25, "tag": "best", "saved": True}, event
    assert event["data_types"] == {"epoch": "int", "loss": "double", "tag": "string",
                                   "saved": "bool"}, event


@pytest.mark.parametrize("arch", ARCHES)
def test_wheel_in_a_trixie_venv_records_exactly_what_the_daemon_reports(arch):
    with throwaway_root(root_of("trixie", arch)) as root:
        wheel_venv(root, arch)
        prefix = unpack_tarball(root, arch)
        with chroot_daemon(root, prefix) as daemon:
            windows, events = record_with_the_wheel(root, daemon, f"unix://{daemon.socket}")
            daemon.stop()
    check_recorded_exactly(windows, events)


@pytest.mark.parametrize("client_arch, daemon_arch", [("aarch64", "x86_64"),
                                                      ("x86_64", "aarch64")])
def test_one_architectures_wheel_records_exactly_into_the_others_daemon(client_arch,
                                                                        daemon_arch):
    """The wire is the same: the wheel of one architecture, in its trixie
    root, records over TCP into the other's tarball daemon in its own root
    (the two chroots share the host's loopback)."""
    with throwaway_root(root_of("trixie", client_arch)) as client_root, \
            throwaway_root(root_of("trixie", daemon_arch)) as daemon_root:
        wheel_venv(client_root, client_arch)
        prefix = unpack_tarball(daemon_root, daemon_arch)
        with chroot_daemon(daemon_root, prefix) as daemon:
            windows, events = record_with_the_wheel(client_root, daemon, daemon.tcp)
            daemon.stop()
    # Over TCP the daemon vouches for no user (--peer-labels: Unix sockets).
    check_recorded_exactly(windows, events, user=None)


CONSUMER = os.path.join(REPO, "tests", "install", "consumer")


@pytest.mark.parametrize("arch", ARCHES)
def test_tarball_cxx_client_builds_with_bullseye_gxx_and_records_exactly(arch):
    """The tarball's static client library, its CMake package and torchmon.pc
    used as a C++ trainer on Debian 11 would: its own g++ 10 (libstdc++ 10),
    cmake 3.18 and pkg-config, nothing from this host but the tarball (for
    aarch64, bullseye's arm64 g++, emulated)."""
    with throwaway_root(root_of("bullseye-cxx", arch)) as root:
        prefix = unpack_tarball(root, arch)
        shutil.copytree(CONSUMER, root + "/tmp/consumer")
        configure = chroot(root, "cmake", "-S", "/tmp/consumer", "-B", "/tmp/consumer-cmake",
                           f"-DCMAKE_PREFIX_PATH={prefix}", "-DCMAKE_BUILD_TYPE=Release",
                           check=False, timeout=300)
        assert configure.returncode == 0, show(configure)
        build = chroot(root, "cmake", "--build", "/tmp/consumer-cmake", check=False, timeout=1200)
        assert build.returncode == 0, show(build)
        flags = chroot(root, "env", f"PKG_CONFIG_PATH={prefix}/lib/pkgconfig", "pkg-config",
                       "--cflags", "--libs", "torchmon").stdout.split()
        assert f"-I{prefix}/lib/pkgconfig/../../include" in flags or \
            f"-I{prefix}/include" in flags, flags
        gxx = chroot(root, "g++", "-std=c++17", "-O1", "/tmp/consumer/main.cc", "-o",
                     "/tmp/consumer-pkgconfig", *flags, check=False, timeout=1200)
        assert gxx.returncode == 0, show(gxx)

        with chroot_daemon(root, prefix) as daemon:
            seen = {}
            for binary, stat in (("/tmp/consumer-cmake/consumer", "cxx.cmake"),
                                 ("/tmp/consumer-pkgconfig", "cxx.pkgconfig")):
                out = chroot(root, binary, f"unix://{daemon.socket}", stat, "1000",
                             check=False, timeout=60)
                assert (out.returncode, out.stdout) == (0, "added=100 dropped=0\n"), show(out)
                # 1..100 in 1 s windows: one window, or two if an edge fell
                # between the adds (microseconds apart); every one closed.
                seen[stat] = poll(
                    lambda: daemon.ctl("windows", stat)["windows"],
                    lambda w: sum(x["accepted"] for x in w) >= 100, 60,
                    f"closed windows of {stat} holding 100 samples")
            events = daemon.ctl("events", "consumer_done")["events"]
            daemon.stop()

    for stat, windows in seen.items():
        assert 1 <= len(windows) <= 2, (stat, windows)
        assert all(w["labels"] == {"built_with": "installed", "user": "root"}
                   for w in windows), windows
        assert all(not w["partial"] and w["capped"] == 0 for w in windows), windows
        assert sum(w["aggregates"]["count"] for w in windows) == 100, windows
        assert sum(w["aggregates"]["sum"] for w in windows) == 5050, windows
        assert max(w["aggregates"]["max"] for w in windows) == 100, windows
        assert all(set(w["aggregates"]) == {"count", "sum", "max", "p50", "p99"}
                   for w in windows), windows
        if len(windows) == 1:
            # docs/semantics.md#quantiles: within 1 % of the sample of rank
            # floor(q * (COUNT - 1)): 98 of 1..100 for p99 (99), 49 for p50 (50).
            (aggregates,) = [w["aggregates"] for w in windows]
            assert abs(aggregates["p99"] - 99) <= 0.01 * 99, aggregates
            assert abs(aggregates["p50"] - 50) <= 0.01 * 50, aggregates
    assert len(events) == 2, events
    assert all(e["data"] == {"samples": 100} and e["data_types"] == {"samples": "int"}
               for e in events), events


def test_tarball_cxx_package_refuses_a_project_with_its_own_grpc(tmp_path):
    """Two gRPCs in one program do not work: a project that already has a
    gRPC::grpc++ target gets a clear refusal from find_package(torchmon),
    naming the target and the way out (this host's cmake; no root needed)."""
    tarball = artefact("torchmon-*-linux-x86_64.tar.gz")
    with tarfile.open(tarball) as t:
        t.extractall(tmp_path)
    prefix = tmp_path / os.path.basename(tarball)[:-len(".tar.gz")]
    project = tmp_path / "project"
    project.mkdir()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(p LANGUAGES CXX)\n"
        "add_library(gRPC::grpc++ INTERFACE IMPORTED)\n"
        "find_package(torchmon CONFIG REQUIRED)\n")
    refused = run(["cmake", "-S", str(project), "-B", str(tmp_path / "b"),
                   f"-DCMAKE_PREFIX_PATH={prefix}"], check=False)
    assert refused.returncode != 0, show(refused)
    assert "gRPC::grpc++ is already defined by another package" in refused.stderr, show(refused)
    assert "bundled-versions" in refused.stderr, show(refused)

    # Without it, the same project configures.
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(p LANGUAGES CXX)\n"
        "find_package(torchmon CONFIG REQUIRED)\n")
    run(["cmake", "-S", str(project), "-B", str(tmp_path / "c"), f"-DCMAKE_PREFIX_PATH={prefix}"])


def extract_rpm(rpm, directory):
    """rpm2cpio | cpio -idm into `directory`; where this host has no cpio,
    rpm2archive (same rpm package as rpm2cpio) into a tar read by tarfile."""
    if shutil.which("cpio"):
        run(["sh", "-c", 'rpm2cpio "$1" | cpio -idm --quiet', "sh", rpm], cwd=directory,
            timeout=300)
    else:
        with open(rpm, "rb") as source:
            archive = subprocess.run(["rpm2archive", "-"], stdin=source, capture_output=True,
                                     timeout=300)
        assert archive.returncode == 0, archive.stderr.decode()
        with tempfile.TemporaryFile() as f:
            f.write(archive.stdout)
            f.seek(0)
            with tarfile.open(fileobj=f) as t:
                t.extractall(directory)


@pytest.mark.parametrize("arch", ARCHES)
def test_rpm_requires_glibc_and_systemd_only_and_runs_in_bullseye(arch):
    rpm = artefact(f"torchmond-*.{arch}.rpm")
    requires = run(["rpm", "-qp", "--requires", rpm]).stdout.splitlines()
    # rpmlib(...) are rpm's own features; /bin/sh runs the scriptlets.
    assert sorted(r for r in requires
                  if not r.startswith("rpmlib(") and r != "/bin/sh") == [
        "glibc >= 2.28", "systemd"], requires

    files = run(["rpm", "-qpl", rpm]).stdout.splitlines()
    for licence in ("grpc/LICENSE", "openssl/LICENSE.txt", "curl/copyright", "snappy/copyright"):
        assert f"/usr/share/doc/torchmond/bundled/{licence}" in files, licence

    assert run(["rpm", "-qp", "--qf", "%{ARCH}", rpm]).stdout == arch
    with throwaway_root(root_of("bullseye", arch)) as root:
        os.mkdir(root + "/tmp/rpm")
        extract_rpm(rpm, root + "/tmp/rpm")
        version = chroot(root, "/tmp/rpm/usr/bin/torchmond", "--version", check=False)
        assert (version.returncode, version.stdout) == (0, f"torchmond {VERSION}\n"), show(version)
        # The shipped configuration names socket-group torchmon, which the
        # package's %post creates: run it as rpm would on a first install.
        post = run(["rpm", "-qp", "--qf", "%{POSTIN}", rpm]).stdout
        chroot(root, "/bin/sh", "-s", "1", input=post)
        conf = "/tmp/rpm/etc/torchmon/torchmond.conf"
        check = chroot(root, "/tmp/rpm/usr/bin/torchmond", "--check-config", conf, check=False)
        assert (check.returncode, check.stdout) == (0, f"{conf}: ok\n"), show(check)

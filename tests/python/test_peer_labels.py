"""torchmond --peer-labels on (docs/security.md, "Labels the daemon vouches
for"): on a Unix socket the daemon accepts each connection itself, asks the
kernel who is at the other end (SO_PEERCRED) and labels every series and
event of that client with its user and with what its cgroup says (Slurm job
and step, Kubernetes pod and container, systemd unit). A client that sends
one of those labels is refused, naming it.

The clients run in cgroups this test creates in the machine's cgroup v2
hierarchy, laid out as Slurm and Kubernetes lay theirs out, so the daemon
reads real /proc/<pid>/cgroup files. Where no cgroup v2 hierarchy can be
written (not root, none mounted) those tests are skipped, saying why; the
parsing of every layout is unit-tested in tests/unit/identity either way.
"""

import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import uuid

import pytest

from torchmon_testing import PYTHON_DIR, Daemon

USER = pwd.getpwuid(os.getuid()).pw_name

CLIENT = """
import datetime, sys, torchmon
labels = dict(arg.split("=", 1) for arg in sys.argv[2:])
stat = torchmon.Stat(sys.argv[1], [torchmon.Aggregation.MEAN], datetime.timedelta(seconds=1),
                     labels=labels or None)
stat.add(1.0)
stat.add(3.0)
torchmon.log_event(torchmon.Event("checkpoint", datetime.datetime.now(), {"path": "/ckpt/" + sys.argv[1]}))
assert torchmon.flush(10)
"""


def writable_hierarchy(fstype, option=None):
    """Where a cgroup hierarchy of `fstype` ("cgroup2", or v1's "cgroup"
    with the controller `option`) is mounted, if this process may create
    cgroups in it; else None."""
    with open("/proc/self/mounts") as f:
        for line in f:
            fields = line.split()
            if (fields[2] == fstype and os.access(fields[1], os.W_OK)
                    and (option is None or option in fields[3].split(","))):
                return fields[1]
    return None


NO_CGROUPS = ("no writable cgroup {} hierarchy here (needs root and a mount of it); "
              "the cgroup layouts are unit-tested in tests/unit/identity")


@pytest.fixture
def peer_daemon():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        d = Daemon(tmpdir, "--peer-labels", "on", "--listen", "127.0.0.1:0")
        try:
            yield d
        finally:
            d.stop()


@pytest.fixture
def made_cgroup():
    """make(path, v1=False) creates the cgroup `path` (e.g.
    "system.slice/x.scope") in the cgroup v2 hierarchy (v1: its "pids"
    hierarchy) and returns it; all are removed afterwards."""
    roots = {False: writable_hierarchy("cgroup2"), True: writable_hierarchy("cgroup", "pids")}
    made = []

    def make(path, v1=False):
        root = roots[v1]
        if root is None:
            pytest.skip(NO_CGROUPS.format("v1 (pids)" if v1 else "v2"))
        full = os.path.join(root, path)
        os.makedirs(full)
        made.append((root, full))
        return full

    yield make
    for root, full in reversed(made):
        # Deepest first, up to the root.
        while full != root and os.path.isdir(full):
            try:
                os.rmdir(full)
            except OSError:
                break  # a sibling is still there
            full = os.path.dirname(full)


@pytest.fixture
def namespaced_daemon(made_cgroup):
    """start(*cgroups) runs a torchmond placed in `cgroups` (made_cgroup's
    paths) with a cgroup namespace of its own, rooted there: it reads every
    client's cgroup relative to those, as a daemon in a container does, and
    the layouts the tests make under them read as the host's own. Needs root
    (unshare --cgroup)."""
    started = []

    def start(*cgroups):
        # bash -c SCRIPT bash CGROUP... TORCHMOND FLAG...: joins each, then
        # execs torchmond (the same pid) in a new cgroup namespace.
        script = ('for g in "${@:1:%d}"; do echo $$ > "$g/cgroup.procs"; done; '
                  'shift %d; exec unshare --cgroup -- "$@"' % (len(cgroups), len(cgroups)))
        tmpdir = tempfile.mkdtemp(prefix="torchmon-pytest.")
        d = Daemon(tmpdir, "--peer-labels", "on", wrapper=("bash", "-c", script, "bash", *cgroups))
        started.append((d, tmpdir))
        return d

    yield start
    for d, tmpdir in started:
        d.stop()
        shutil.rmtree(tmpdir, ignore_errors=True)


def top():
    """A unique top cgroup, so that parallel runs and leftovers never collide."""
    return f"torchmon-test-{uuid.uuid4().hex[:8]}"


def run_client(daemon, target, stat, *labels, cgroup=None):
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR, TORCHMON_TARGET=target,
               TORCHMON_LABELS="job=pytest")

    def join_cgroup():
        with open(os.path.join(cgroup, "cgroup.procs"), "w") as f:
            f.write("0")  # this process

    out = subprocess.run([sys.executable, "-c", CLIENT, stat, *labels], env=env,
                         capture_output=True, text=True, timeout=60,
                         preexec_fn=join_cgroup if cgroup else None)
    return out


def series_labels(daemon, stat):
    series = daemon.series(stat)
    assert len(series) == 1, series
    assert series[0]["counters"]["accepted"] == 2, series
    return series[0]["labels"]


def event_labels(daemon, stat):
    events = [e for e in daemon.ctl("events", "checkpoint")["events"]
              if e["data"]["path"] == "/ckpt/" + stat]
    assert len(events) == 1, events
    return events[0]["labels"]


def test_a_unix_client_is_labelled_with_its_user(peer_daemon):
    out = run_client(peer_daemon, peer_daemon.target, "peer.plain")
    assert out.returncode == 0, out.stderr
    labels = series_labels(peer_daemon, "peer.plain")
    assert labels["user"] == USER
    assert labels["job"] == "pytest"  # the client's own labels stay
    assert event_labels(peer_daemon, "peer.plain")["user"] == USER


def test_a_vouched_label_from_the_client_is_refused_naming_it(peer_daemon):
    out = run_client(peer_daemon, peer_daemon.target, "peer.forged", "user=mallory")
    # flush() completes: refused samples are settled, not lost in flight.
    assert out.returncode == 0, out.stderr
    assert ('definition of stat "peer.forged": label "user" is set by torchmond, from what the '
            f'kernel says of this connection (here "{USER}"); a client may not send it'
            in out.stderr), out.stderr
    assert peer_daemon.series("peer.forged") == []
    scrape = peer_daemon.scrape()
    assert "torchmon_daemon_labels_refused_vouched_total 1\n" in scrape, scrape


def test_a_tcp_client_gets_no_vouched_labels_and_may_not_send_them(peer_daemon):
    out = run_client(peer_daemon, peer_daemon.tcp_target, "peer.tcp")
    assert out.returncode == 0, out.stderr
    labels = series_labels(peer_daemon, "peer.tcp")
    assert "user" not in labels, labels
    out = run_client(peer_daemon, peer_daemon.tcp_target, "peer.tcp_forged", "slurm_job_id=1")
    assert 'label "slurm_job_id" is set by torchmond' in out.stderr, out.stderr
    assert "could not be derived for this connection" in out.stderr, out.stderr


POD = "6b2c0b9e-8d7f-4c2a-9a51-5c1d2e3f4a5b"
CONTAINER = "0123456789abcdef" * 4
USER_TREE = "user.slice/user-0.slice/user@0.service/app.slice"


def pod_path(pod=POD, container=CONTAINER, qos="burstable"):
    """The kubelet's systemd driver: the pod's UID with '_' for '-', the
    container runtime's scope named for the container id."""
    return (f"kubepods.slice/kubepods-{qos}.slice/"
            f"kubepods-{qos}-pod{pod.replace('-', '_')}.slice/cri-containerd-{container}.scope")


def vouched(labels):
    return {k: v for k, v in labels.items()
            if k in ("slurm_job_id", "slurm_step", "k8s_pod_uid", "container_id", "systemd_unit")}


def test_a_slurm_steps_cgroup_gives_its_job_and_step(namespaced_daemon, made_cgroup):
    # Slurm's cgroup v2 layout: slurmstepd's scope, then job, step, task.
    t = top()
    d = namespaced_daemon(made_cgroup(t))
    cgroup = made_cgroup(f"{t}/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0")
    out = run_client(d, d.target, "peer.slurm", cgroup=cgroup)
    assert out.returncode == 0, out.stderr
    labels = series_labels(d, "peer.slurm")
    assert labels["slurm_job_id"] == "4242", labels
    assert labels["slurm_step"] == "0", labels
    assert labels["systemd_unit"] == "slurmstepd.scope", labels
    assert labels["user"] == USER
    assert "k8s_pod_uid" not in labels, labels  # not a pod: absent, not guessed
    event = event_labels(d, "peer.slurm")
    assert (event["slurm_job_id"], event["slurm_step"]) == ("4242", "0"), event


def test_a_slurm_steps_cgroup_v1_gives_its_job_and_step(namespaced_daemon, made_cgroup):
    t = top()
    d = namespaced_daemon(made_cgroup(t, v1=True))
    cgroup = made_cgroup(f"{t}/slurm/uid_0/job_77/step_batch/task_0", v1=True)
    out = run_client(d, d.target, "peer.slurm1", cgroup=cgroup)
    assert out.returncode == 0, out.stderr
    labels = series_labels(d, "peer.slurm1")
    assert (labels.get("slurm_job_id"), labels.get("slurm_step")) == ("77", "batch"), labels


def test_a_pods_cgroup_gives_its_pod_and_container(namespaced_daemon, made_cgroup):
    t = top()
    d = namespaced_daemon(made_cgroup(t))
    cgroup = made_cgroup(f"{t}/{pod_path()}")
    out = run_client(d, d.target, "peer.pod", cgroup=cgroup)
    assert out.returncode == 0, out.stderr
    labels = series_labels(d, "peer.pod")
    assert labels["k8s_pod_uid"] == POD, labels
    assert labels["container_id"] == CONTAINER, labels
    assert "slurm_job_id" not in labels, labels


@pytest.mark.parametrize("forged,v1", [
    # What a user makes under the subtree systemd delegates to it
    # (user@<uid>.service has Delegate=yes): mkdir, or systemd-run --user
    # --scope --unit=...-slurmstepd.
    (f"{USER_TREE}/slurm/job_42/step_0", False),
    (f"{USER_TREE}/slurm/uid_0/job_42/step_0", False),
    (f"{USER_TREE}/system.slice/x-slurmstepd.scope/job_42/step_0/user/task_0", False),
    (f"{USER_TREE}/{pod_path()}", False),
    # cgroup v1: Slurm's hierarchy anywhere but at the top.
    ("home/slurm/uid_0/job_42/step_0", True),
])
def test_slurm_and_pod_markers_a_user_can_make_give_no_label(namespaced_daemon, made_cgroup,
                                                             forged, v1):
    t = top()
    d = namespaced_daemon(made_cgroup(t, v1=v1))
    cgroup = made_cgroup(f"{t}/{forged}", v1=v1)
    out = run_client(d, d.target, "peer.forged_path", cgroup=cgroup)
    assert out.returncode == 0, out.stderr
    labels = series_labels(d, "peer.forged_path")
    assert labels["user"] == USER, labels
    # The unit is the user's manager, which root's systemd made, not the
    # scope the user named.
    assert vouched(labels) == ({} if v1 else {"systemd_unit": "user@0.service"}), labels


def test_a_daemon_in_a_pod_sees_another_pod_but_not_a_users_lookalike(namespaced_daemon,
                                                                      made_cgroup):
    # The daemon in a pod with a cgroup namespace of its own (a DaemonSet):
    # another pod reads as "/../../../kubepods-besteffort.slice/...".
    t = top()
    other = "0f1e2d3c-4b5a-4697-8877-665544332211"
    d = namespaced_daemon(made_cgroup(f"{t}/{pod_path()}"))
    cgroup = made_cgroup(f"{t}/{pod_path(other, 'ab' * 32, 'besteffort')}")
    out = run_client(d, d.target, "peer.other_pod", cgroup=cgroup)
    assert out.returncode == 0, out.stderr
    labels = series_labels(d, "peer.other_pod")
    assert (labels.get("k8s_pod_uid"), labels.get("container_id")) == (other, "ab" * 32), labels
    # The same layout in a user's tree reads as ".../user.slice/...": none.
    cgroup = made_cgroup(f"{t}/{USER_TREE}/{pod_path(other, 'cd' * 32, 'besteffort')}")
    out = run_client(d, d.target, "peer.user_pod", cgroup=cgroup)
    assert out.returncode == 0, out.stderr
    assert vouched(series_labels(d, "peer.user_pod")) == {"systemd_unit": "user@0.service"}


@pytest.mark.skipif(os.geteuid() != 0, reason="a pid namespace of its own needs root")
def test_a_client_in_a_pid_namespace_the_daemon_cannot_see_is_named_by_its_user_alone():
    """A daemon in a container without the host's pids (a Kubernetes
    DaemonSet without hostPID) is told pid 0 by SO_PEERCRED for a client
    outside its pid namespace: the connection is served, labelled with the
    user the kernel recorded, and nothing is read of a cgroup."""
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        d = Daemon(tmpdir, wrapper=("unshare", "--pid", "--fork", "--mount-proc", "--kill-child"))
        try:
            out = run_client(d, d.target, "peer.unseen")
            assert out.returncode == 0, out.stderr
            labels = series_labels(d, "peer.unseen")
            assert labels["user"] == USER, labels
            assert not set(labels) & {"slurm_job_id", "slurm_step", "k8s_pod_uid",
                                      "container_id", "systemd_unit"}, labels
            assert "torchmon_daemon_connections_unidentified_total 0\n" in d.scrape()
        finally:
            # unshare passes no signal on: SIGTERM goes to torchmond, whose
            # exit status unshare then returns.
            with open(f"/proc/{d.proc.pid}/task/{d.proc.pid}/children") as f:
                for child in f.read().split():
                    os.kill(int(child), signal.SIGTERM)
            d.proc.wait(timeout=20)
            d.stop()


def test_the_labels_are_on_by_default(daemon):
    out = run_client(daemon, daemon.target, "peer.default")
    assert out.returncode == 0, out.stderr
    assert series_labels(daemon, "peer.default")["user"] == USER


def test_with_the_flag_off_a_clients_labels_are_its_own():
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        d = Daemon(tmpdir, "--peer-labels", "off")
        try:
            out = run_client(d, d.target, "peer.off", "user=anyone")
            assert out.returncode == 0, out.stderr
            assert series_labels(d, "peer.off")["user"] == "anyone"
        finally:
            d.stop()

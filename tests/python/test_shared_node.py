"""One daemon for several users of a node (docs/security.md, "Who sees
what"), with real users: the test creates unprivileged users (removed
afterwards) and runs one torchmond as root with --peer-labels on and a group
socket, as an operator of a shared GPU node would. Clients run as those
users, with the uid and groups the kernel then reports on the socket.

Shown here: each user's series and events carry the daemon's `user` label;
a user sees only its own series, windows and events; another user's stat of
the same name is a series of its own and leaves the first one untouched; a
job label another user's streams hold is refused; both users are in one
scrape of /metrics; root and --admin-group's members see everyone.

Needs root and useradd (skipped, saying why, without them).
"""

import grp
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid

import pytest

from torchmon_testing import PYTHON_DIR, TORCHMONCTL, Daemon

# Defines "shared.loss", adds the values given, logs a checkpoint event
# naming its path, flushes, says "flushed" and stays connected until its
# stdin closes: its stream (and the job it labels) stays alive meanwhile.
CLIENT = """
import datetime, sys, torchmon
stat = torchmon.Stat("shared.loss", [torchmon.Aggregation.MEAN, torchmon.Aggregation.COUNT],
                     datetime.timedelta(seconds=1))
for value in sys.argv[1].split(","):
    stat.add(float(value))
torchmon.log_event(torchmon.Event("checkpoint", datetime.datetime.now(), {"path": sys.argv[2]}))
if len(sys.argv) > 3:  # a stat that names its job itself
    named = torchmon.Stat("shared.named", [torchmon.Aggregation.MEAN], datetime.timedelta(seconds=1),
                          labels={"job": sys.argv[3]})
    named.add(1.0)
assert torchmon.flush(10)
print("flushed", flush=True)
sys.stdin.read()
"""


def run(*args):
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def users():
    """Three users made for the test: alice and bob in the socket's group,
    carol in the admin group. Their names are unique to this run."""
    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("needs root and useradd to create the users it runs clients as")
    tag = uuid.uuid4().hex[:6]
    socket_group, admin_group = f"tmsock{tag}", f"tmadm{tag}"
    names = {"alice": f"tma{tag}", "bob": f"tmb{tag}", "carol": f"tmc{tag}"}
    made_groups, made_users = [], []
    try:
        for group in (socket_group, admin_group):
            run("groupadd", group)
            made_groups.append(group)
        for who, name in names.items():
            extra = socket_group + ("," + admin_group if who == "carol" else "")
            run("useradd", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
                "/usr/sbin/nologin", "--user-group", "--groups", extra, name)
            made_users.append(name)
        yield {"names": names, "socket_group": socket_group, "admin_group": admin_group}
    finally:
        for name in made_users:
            subprocess.run(["userdel", name], capture_output=True, timeout=60)
        for group in made_groups:
            subprocess.run(["groupdel", group], capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def shared(users):
    """The daemon, and what users need to run clients: the Python package and
    torchmonctl, copied where any user can read them (the build tree may be
    under a directory only root can enter)."""
    with tempfile.TemporaryDirectory(prefix="torchmon-pytest.") as tmpdir:
        os.chmod(tmpdir, 0o755)
        tools = os.path.join(tmpdir, "tools")
        os.mkdir(tools)
        for entry in os.listdir(PYTHON_DIR):  # the package, and the wheel's torchmon.libs
            if entry.startswith("torchmon"):
                source = os.path.join(PYTHON_DIR, entry)
                if os.path.isdir(source):
                    shutil.copytree(source, os.path.join(tools, entry),
                                    ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    shutil.copy(source, tools)
        shutil.copy(TORCHMONCTL, tools)
        for path, dirs, files in os.walk(tools):
            os.chmod(path, 0o755)
            for f in files:
                os.chmod(os.path.join(path, f), 0o755)
        d = Daemon(tmpdir, "--peer-labels", "on", "--socket-group", users["socket_group"],
                   "--admin-group", users["admin_group"])
        d.tools = tools
        d.python = usable_python(users["names"]["alice"], tools)
        try:
            yield d
        finally:
            d.stop()


def usable_python(name, tools):
    """This interpreter (or the one a venv's links lead to) if user `name`
    can run it, else a copy in `tools` (an interpreter built into a tree
    only root can enter). The clients need the standard library and
    torchmon (on PYTHONPATH) only."""
    for python in (sys.executable, os.path.realpath(sys.executable)):
        try:
            if subprocess.run([python, "-c", "pass"], preexec_fn=as_user(name), cwd="/",
                              capture_output=True, timeout=60).returncode == 0:
                return python
        except OSError:
            pass
    copy = os.path.join(tools, os.path.basename(sys.executable))
    shutil.copy(sys.executable, copy)
    os.chmod(copy, 0o755)
    return copy


def as_user(name):
    entry = pwd.getpwnam(name)

    def drop():
        os.setgroups(os.getgrouplist(name, entry.pw_gid))
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)

    return drop


def env_of(daemon, job):
    env = dict(os.environ, HOME="/nonexistent", PYTHONPATH=daemon.tools,
               PYTHONDONTWRITEBYTECODE="1", TORCHMON_TARGET=daemon.target)
    env.pop("TORCHMON_LABELS", None)
    if job is not None:
        env["TORCHMON_LABELS"] = f"job={job}"
    return env


class Client:
    """A client process of user `name`, connected until close()."""

    def __init__(self, daemon, name, job, values, path, named_job=None):
        args = [daemon.python, "-c", CLIENT, values, path] + ([named_job] if named_job else [])
        self.proc = subprocess.Popen(args, env=env_of(daemon, job), preexec_fn=as_user(name),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd="/")
        line = self.proc.stdout.readline()  # "flushed", or EOF if it failed
        if line.strip() != "flushed":
            self.close()
            raise AssertionError(f"client of {name} failed:\n{self.stderr}")

    def close(self):
        _, self.stderr = self.proc.communicate(timeout=60)
        return self.stderr


def ctl_as(daemon, name, *args):
    out = subprocess.run([os.path.join(daemon.tools, "torchmonctl"), "--target", daemon.target,
                          "--json", *args], env=env_of(daemon, None), preexec_fn=as_user(name),
                         capture_output=True, text=True, timeout=30, cwd="/")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def users_of(series):
    return sorted(s["labels"]["user"] for s in series)


@pytest.fixture(scope="module")
def two_jobs(users, shared):
    """alice's job "train-a" and bob's "train-b", both still connected."""
    names = users["names"]
    alice = Client(shared, names["alice"], "train-a", "1,3", "/ckpt/alice")
    bob = Client(shared, names["bob"], "train-b", "10,30", "/ckpt/bob")
    yield alice, bob
    for client in (alice, bob):
        assert "error" not in client.close().lower(), client.stderr


def test_each_users_series_carry_its_user_and_one_does_not_touch_the_other(users, shared,
                                                                           two_jobs):
    names = users["names"]
    series = shared.series("shared.loss")  # the test runs as root: an admin
    by_user = {s["labels"]["user"]: s for s in series}
    assert sorted(by_user) == sorted([names["alice"], names["bob"]]), series
    # The same stat name from bob is bob's own series: alice's has only hers.
    assert by_user[names["alice"]]["labels"]["job"] == "train-a"
    assert by_user[names["alice"]]["counters"]["accepted"] == 2
    assert by_user[names["bob"]]["labels"]["job"] == "train-b"
    assert by_user[names["bob"]]["counters"]["accepted"] == 2
    windows = shared.wait_windows("shared.loss", 2, timeout=15)
    means = {w["labels"]["user"]: w["aggregates"]["mean"] for w in windows}
    assert means == {names["alice"]: 2.0, names["bob"]: 20.0}, windows


def test_a_user_sees_only_its_own_series_windows_and_events(users, shared, two_jobs):
    names = users["names"]
    shared.wait_windows("shared.loss", 2, timeout=15)
    for who, other in (("alice", "bob"), ("bob", "alice")):
        me = names[who]
        assert users_of(ctl_as(shared, me, "series")["series"]) == [me], who
        windows = ctl_as(shared, me, "windows", "shared.loss")["windows"]
        assert windows and {w["labels"]["user"] for w in windows} == {me}, windows
        # Asking for the other user by label finds nothing either.
        asked = ctl_as(shared, me, "series", "--label", f"user={names[other]}")["series"]
        assert asked == [], asked
        events = ctl_as(shared, me, "events", "checkpoint")["events"]
        assert [e["data"]["path"] for e in events] == [f"/ckpt/{who}"], events


def test_admins_see_every_user(users, shared, two_jobs):
    names = users["names"]
    both = sorted([names["alice"], names["bob"]])
    assert users_of(shared.series("shared.loss")) == both  # root
    # carol, in --admin-group, who sent nothing herself.
    assert users_of(ctl_as(shared, names["carol"], "series", "--stat", "shared.loss")["series"]) \
        == both
    events = ctl_as(shared, names["carol"], "events", "checkpoint")["events"]
    assert sorted(e["data"]["path"] for e in events) == ["/ckpt/alice", "/ckpt/bob"]


def test_a_job_label_of_another_users_running_job_is_refused(users, shared, two_jobs):
    names = users["names"]
    why = (f'job "train-a" belongs to user "{names["alice"]}", whose streams label it on this '
           "daemon; a client may label only its own user's jobs")
    # In the client's identity labels (the hello) ...
    stderr = Client(shared, names["bob"], "train-a", "100", "/ckpt/forged").close()
    assert f"hello.labels: {why}; the label is ignored" in stderr, stderr
    # ... and in a stat's own labels.
    stderr = Client(shared, names["bob"], None, "100", "/ckpt/forged",
                    named_job="train-a").close()
    assert f'definition of stat "shared.named": {why}' in stderr, stderr
    # Nothing of bob's carries alice's job; alice's series has her samples only.
    for s in shared.series("shared.loss") + shared.series("shared.named"):
        if s["labels"]["user"] == names["bob"]:
            assert s["labels"].get("job") != "train-a", s
        else:
            assert s["counters"]["accepted"] == 2, s
    scrape = shared.scrape()
    assert "torchmon_daemon_labels_refused_job_total 2\n" in scrape, scrape


def test_one_scrape_holds_every_user(users, shared, two_jobs):
    names = users["names"]
    shared.wait_windows("shared.loss", 2, timeout=15)
    scrape = shared.scrape()
    for who, job, mean in (("alice", "train-a", 2), ("bob", "train-b", 20)):
        line = (f'torchmon_stat{{stat="shared.loss",agg="mean",host="{socket.gethostname()}",'
                f'job="{job}",user="{names[who]}"}} {mean}\n')
        assert line in scrape, scrape


def test_the_users_are_real(users):
    # The clients above ran with these uids and groups, not as root.
    for who, name in users["names"].items():
        entry = pwd.getpwnam(name)
        assert entry.pw_uid != 0
        groups = {g.gr_name for g in grp.getgrall() if name in g.gr_mem}
        assert users["socket_group"] in groups
        assert (users["admin_group"] in groups) == (who == "carol")

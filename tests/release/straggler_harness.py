"""Real synchronous training jobs with a straggler, watched by the shipped
Prometheus rules: the harness of tests/release/test_stragglers.py and
tests/bench/straggler_detection.py.

A job of tests/support/straggler_job.py runs on torch 2.6 in a throwaway
copy of the cached trixie-torch root (tests/release/roots.sh), with the
portable wheel pip-installed and TORCHMON_TORCH_METRICS=1: nothing in the
job knows torchmon. Its ranks run on two "nodes": each node is a UTS
namespace with its own hostname, its own torchmond (the tarball's) and its
ranks, so the job's series carry two hosts and two instances, as across
machines. A real Prometheus (trixie's 2.53, from the trixie-receivers
root) scrapes both daemons with a copy of deploy/prometheus whose only
change is the targets file: the shipped scrape interval, rule groups and
alert. Its alerts are polled every 0.25 s through the HTTP API.

An episode makes one rank slow (extra compute, factor x its own) from a
step that falls at a random moment, then waits for TorchmonStraggler to
fire naming that rank and its host; detection latency is measured from
the moment the rank applied the change (its own clock, printed by the
job) to the first poll that sees the alert firing.
"""

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(HERE, "..", "prometheus"))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

from prom_cluster import Prometheus, free_loopback_port, shipped_config  # noqa: E402
from test_roots import CHROOT_ENV, artefact, chroot, put, throwaway_root, unpack_tarball  # noqa: E402
from torchmond import wait_for  # noqa: E402

# The straggler split's window (torchmon._torch_metrics' default), and the
# shipped torchmon-stragglers group's evaluation interval.
WINDOW_S = 10.0
EVALUATION_S = 5.0
# The bound the issue set: three windows plus one rule evaluation.
DETECTION_BOUND_S = 3 * WINDOW_S + EVALUATION_S
NODES = ("node-a", "node-b")


def receivers_root():
    out = subprocess.run([os.path.join(HERE, "roots.sh"), "trixie-receivers"], check=True,
                         stdout=subprocess.PIPE, text=True, timeout=1800)
    return out.stdout.strip()


def in_node(root, hostname, *argv):
    """argv inside `root`, in a new UTS namespace named `hostname`."""
    return ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec chroot "$@"', hostname, root,
            *argv]


def node_of(rank, world):
    """The node of `rank` in a job of `world` ranks: the last rank alone on
    the last node, the others on the first (so a straggler can be either)."""
    return NODES[-1] if rank == world - 1 else NODES[0]


class Job:
    """The ranks of one training job, named `name` (its `job` label, as
    torchrun's TORCHELASTIC_RUN_ID gives it), placed by node_of()."""

    def __init__(self, world, name):
        self.world = world
        self.name = name
        self.procs = []
        self.events = []  # (rank, JSON object) as the ranks print them
        self._threads = []

    def node_of(self, rank):
        return node_of(rank, self.world)


class Cluster:
    """The root, two daemons (one per node), Prometheus, and the job's
    control file. Use as a context manager."""

    def __init__(self):
        self._stack = contextlib.ExitStack()

    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self._show_logs()
            self._stack.close()
            raise
        return self

    def __exit__(self, exc_type, *_):
        if exc_type is not None:
            self._show_logs()
        self._stack.close()

    def _start(self):
        wheel = artefact("torchmon-*-cp310-abi3-manylinux_2_28_x86_64.whl")
        receivers = receivers_root()
        self.root = root = self._stack.enter_context(throwaway_root("trixie-torch"))
        chroot(root, "python3", "-m", "venv", "--system-site-packages", "/venv", timeout=300)
        chroot(root, "/venv/bin/pip", "install", "-q", "--no-index", put(root, wheel), timeout=300)
        self.prefix = unpack_tarball(root)
        shutil.copy(os.path.join(REPO, "tests", "support", "straggler_job.py"), root + "/tmp/")
        self.tmp = tempfile.mkdtemp(prefix="torchmon-stragglers.")
        self._stack.callback(shutil.rmtree, self.tmp, ignore_errors=True)
        self.daemons = {}
        for node in NODES:
            port = free_loopback_port()
            os.makedirs(f"{root}/run/{node}", mode=0o700)
            socket_path = f"/run/{node}/torchmond.sock"
            log = open(os.path.join(self.tmp, f"{node}.log"), "w")
            proc = subprocess.Popen(in_node(root, node, f"{self.prefix}/bin/torchmond",
                                            "--listen", f"unix://{socket_path}",
                                            "--metrics-listen", f"127.0.0.1:{port}"),
                                    stdout=log, stderr=subprocess.STDOUT, env=CHROOT_ENV)
            self._stack.callback(stop, proc)
            self.daemons[node] = {"socket": socket_path, "metrics": f"127.0.0.1:{port}",
                                  "proc": proc}
        for node, d in self.daemons.items():
            wait_until(lambda: os.path.exists(root + d["socket"]), 20, f"{node}'s daemon")
        config = shipped_config(self.tmp, [d["metrics"] for d in self.daemons.values()])
        self.prometheus = Prometheus(config, self.tmp,
                                     binary=os.path.join(receivers, "usr", "bin", "prometheus"))
        self._stack.callback(self.prometheus.stop)
        self.control = "/tmp/straggler-control"
        self.set_slow(None)

    def _show_logs(self):
        """The daemons' logs and the ranks' stderr, for a failure."""
        if getattr(self, "tmp", None) and os.path.isdir(self.tmp):
            for name in sorted(os.listdir(self.tmp)):
                if name.endswith((".log", ".err")):
                    with open(os.path.join(self.tmp, name)) as f:
                        sys.stderr.write(f"--- {name}\n{f.read()[-3000:]}\n")

    def set_slow(self, rank, factor=2.0):
        """Makes `rank` slow by `factor` from its next step (None: no rank)."""
        with open(self.root + self.control, "w") as f:
            f.write("" if rank is None else f"{rank} {factor}\n")

    def stop_job(self, job, timeout=120):
        """Ends the job within 16 steps, and waits for it."""
        with open(self.root + self.control, "w") as f:
            f.write("stop\n")
        try:
            return self.wait_job(job, timeout)
        finally:
            self.set_slow(None)

    def start_job(self, kind, world, seconds, name):
        """A job of `name`: a name of its own, so that no series of an
        earlier job (a daemon keeps a series' last window for its TTL) is
        taken for one of its ranks."""
        job = Job(world, name)
        init = f"tcp://127.0.0.1:{free_loopback_port()}"
        for rank in range(world):
            node = job.node_of(rank)
            env = ["env", f"RANK={rank}", f"LOCAL_RANK={rank}", f"WORLD_SIZE={world}",
                   f"TORCHELASTIC_RUN_ID={name}", "TORCHMON_TORCH_METRICS=1", "USE_LIBUV=0",
                   f"TORCHMON_TARGET=unix://{self.daemons[node]['socket']}"]
            proc = subprocess.Popen(
                in_node(self.root, node, *env, "/venv/bin/python", "/tmp/straggler_job.py",
                        "--kind", kind, "--world", str(world), "--seconds", str(seconds),
                        "--control", self.control, "--init", init),
                stdout=subprocess.PIPE, stderr=open(os.path.join(self.tmp, f"rank{rank}.err"), "w"),
                text=True, env=CHROOT_ENV)
            job.procs.append(proc)
            reader = threading.Thread(target=_read_events, args=(proc, rank, job.events),
                                      daemon=True)
            reader.start()
            job._threads.append(reader)
        return job

    def wait_job(self, job, timeout):
        codes = [p.wait(timeout=timeout) for p in job.procs]
        for t in job._threads:
            t.join(5)
        if any(codes):
            errors = "".join(open(os.path.join(self.tmp, f"rank{r}.err")).read()[-2000:]
                             for r in range(job.world))
            raise AssertionError(f"the job's ranks exited {codes}:\n{errors}")
        return job

    def firing(self, job_name):
        """The TorchmonStraggler alerts of job `job_name` firing now: [labels]."""
        alerts = self.prometheus.api("alerts")["alerts"]
        return [a["labels"] for a in alerts
                if a["labels"].get("alertname") == "TorchmonStraggler" and a["state"] == "firing"
                and a["labels"].get("job") == job_name]

    def query(self, expr):
        return self.prometheus.query(expr)

    def cluster_ranks(self, *args):
        """`python -m torchmon.cluster ranks ... --prometheus` with the
        wheel, inside the root (Prometheus listens on the shared loopback)."""
        return chroot(self.root, "/venv/bin/python", "-m", "torchmon.cluster", "ranks", *args,
                      "--prometheus", f"http://{self.prometheus.address}", check=False,
                      timeout=60)


def _read_events(proc, rank, events):
    for line in proc.stdout:
        line = line.strip()
        if line.startswith("{"):
            try:
                events.append((rank, json.loads(line)))
            except ValueError:
                pass


def wait_until(condition, timeout, what, interval=0.1):
    if not wait_for(condition, timeout, interval):
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def stop(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def compute_means(cluster, job):
    """rank -> the newest window mean of torch.dist.compute_s of `job`, from Prometheus."""
    out = {}
    for sample in cluster.query(f'job_rank:torchmon_dist_compute_seconds:mean{{job="{job.name}"}}'):
        labels, value = sample
        out[int(labels["rank"])] = value
    return out


def watch_healthy(cluster, job, seconds, poll_s=0.25):
    """Polls `job`'s alerts for `seconds`; returns every one seen firing (its
    labels, with the time it was first seen)."""
    seen = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for labels in cluster.firing(job.name):
            key = tuple(sorted(labels.items()))
            if key not in seen:
                seen[key] = dict(labels, seen_at=time.time())
        time.sleep(poll_s)
    return list(seen.values())


def episode(cluster, job, slow_rank, factor, give_up_s=60.0, poll_s=0.25, resolve=True,
            on_detect=None, settle_s=0.0):
    """Makes `slow_rank` slow now, waits for TorchmonStraggler to fire, then
    makes it healthy again and waits for the alert to resolve. Returns
    {"latency_s" (None: not within give_up_s), "named" (the alert's rank and
    host), "wrong" (alerts naming another rank), "slowdown" (the slow rank's
    compute time while slow over before, from Prometheus, `settle_s` after
    the alert fired: with 0, the window seen then may be slow for part of
    it only), "on_detect": what on_detect() returned, called then, while
    the rank is still slow, "timeline": timeline()'s account of it}."""
    before = compute_means(cluster, job).get(slow_rank)
    applied = len(job.events)
    cluster.set_slow(slow_rank, factor)
    # The moment the rank applied the change, by its own clock.
    wait_until(lambda: any(rank == slow_rank and e.get("slow")
                           for rank, e in job.events[applied:]), 10, "the slow rank's change")
    started = next(e["time"] for rank, e in job.events[applied:] if rank == slow_rank
                   and e.get("slow"))
    latency, named, wrong = None, None, []
    while time.time() - started < give_up_s:
        for labels in cluster.firing(job.name):
            if labels.get("rank") == str(slow_rank):
                latency = time.time() - started
                named = {"rank": labels.get("rank"), "host": labels.get("host"),
                         "job": labels.get("job")}
            elif labels not in wrong:
                wrong.append(labels)
        if latency is not None:
            break
        time.sleep(poll_s)
    if latency is not None:
        time.sleep(settle_s)
    during = compute_means(cluster, job).get(slow_rank)
    detected = on_detect() if on_detect is not None and latency is not None else None
    history = timeline(cluster, job, slow_rank, started)
    cluster.set_slow(None)
    if resolve:
        # Healthy again: the alert resolves once a healthy window is scraped.
        wait_until(lambda: not cluster.firing(job.name), 4 * WINDOW_S, "the alert to resolve",
                   0.5)
    return {"latency_s": latency, "named": named, "wrong": wrong,
            "slowdown": during / before if before and during else None, "on_detect": detected,
            "timeline": history}


def timeline(cluster, job, slow_rank, started):
    """What Prometheus stored from `started` (a Unix time) to now, as seconds
    after it: each rank's scrapes of the split's mean, with the end of the
    window scraped ("rank R": [(at, window end, mean)], a row where either
    changed), and each evaluation of the slow rank's ratio, score and alert
    state ("evaluations": [(at, ratio, score, state)]). The steps between a
    slow rank's first step and the alert, for a detection slower than
    expected."""
    span = f"[{max(1, int(time.time() - started) + 15)}s]"

    def raw(expr):  # {labels: [(at - started, value)]}, the stored samples themselves
        data = cluster.prometheus.api("query", query=expr + span)
        return [(s["metric"], [(round(float(t) - started, 2), float(v)) for t, v in s["values"]])
                for s in data["result"]]

    selector = f'stat="torch.dist.compute_s",job="{job.name}"'
    out = {}
    ends = {m["rank"]: dict(v) for m, v in
            raw(f'torchmon_window_end_timestamp_seconds{{{selector}}}')}
    for m, values in raw(f'torchmon_stat{{{selector},agg="mean"}}'):
        rows, last = [], None
        for at, mean in values:
            end = ends.get(m["rank"], {}).get(at)
            row = (at, None if end is None else round(end - started, 2), round(mean, 5))
            if last is None or row[1:] != last[1:]:
                rows.append(row)
            last = row
        out[f"rank {m['rank']}"] = rows
    rank = f'job="{job.name}",rank="{slow_rank}"'
    ratio = dict(next((v for _, v in raw(f'job_rank:torchmon_straggler:ratio{{{rank}}}')), []))
    score = dict(next((v for _, v in raw(f'job_rank:torchmon_straggler:score{{{rank}}}')), []))
    states = {}
    for m, values in raw(f'ALERTS{{alertname="TorchmonStraggler",{rank}}}'):
        states.update((at, m["alertstate"]) for at, _ in values)
    out["evaluations"] = [(at, round(ratio[at], 3), round(score.get(at, float("nan")), 2),
                           states.get(at, "")) for at in sorted(ratio)]
    return out



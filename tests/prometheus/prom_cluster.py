"""A small cluster for the Prometheus tests: torchmond "nodes" fed by fake
ranks (feed_rank.py, one process each) and a real Prometheus scraping them
with a copy of deploy/prometheus."""

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

from torchmon_testing import PYTHON_DIR, Daemon

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY_PROMETHEUS = os.path.join(REPO, "deploy", "prometheus")
FEED_RANK = os.path.join(os.path.dirname(__file__), "feed_rank.py")

NODES = 3
RANKS_PER_NODE = 4
# Feeders stop by themselves after this long even if the test never ends them.
FEED_SECONDS = 120


def global_rank(node, local_rank):
    return node * RANKS_PER_NODE + local_rank


def step_time_ms(node, local_rank):
    return 100.0 + 10.0 * node + local_rank


def loss(node, local_rank):
    # Multiples of 1/8: sums and means of them are exact in binary.
    return 2.0 - 0.125 * global_rank(node, local_rank)


def host(node):
    return f"node-{node}"


# Node 0's rank 0 also sends a stat capped at 1 sample per window (drops
# counted as `capped`); node 1's local rank 2 also sends eval.loss = NaN.
CAPPED = (0, 0)
NAN_EVAL_LOSS = (1, 2)


def prom_quantile(q, values):
    """PromQL's quantile(): linear interpolation between closest ranks."""
    values = sorted(values)
    rank = q * (len(values) - 1)
    lower = math.floor(rank)
    upper = min(lower + 1, len(values) - 1)
    weight = rank - lower
    return values[lower] * (1 - weight) + values[upper] * weight


def free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Feeders:
    """One process per fake rank."""

    def __init__(self, daemons, tmpdir):
        env = dict(os.environ)
        env["PYTHONPATH"] = PYTHON_DIR + os.pathsep + env.get("PYTHONPATH", "")
        for var in ("TORCHMON_LABELS", "TORCHMON_TARGET", "RANK", "LOCAL_RANK",
                    "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_LOCALID"):
            env.pop(var, None)
        self.procs = []
        for node, daemon in enumerate(daemons):
            for local_rank in range(RANKS_PER_NODE):
                args = [sys.executable, FEED_RANK, daemon.target, host(node),
                        str(global_rank(node, local_rank)), str(local_rank),
                        repr(step_time_ms(node, local_rank)), repr(loss(node, local_rank)),
                        str(FEED_SECONDS)]
                if (node, local_rank) == CAPPED:
                    args.append("--capped")
                if (node, local_rank) == NAN_EVAL_LOSS:
                    args.append("--nan-eval-loss")
                log = open(os.path.join(tmpdir, f"feed-{node}-{local_rank}.log"), "w")
                self.procs.append((subprocess.Popen(args, env=env, stdout=log, stderr=log), log))

    def failed(self):
        """Feeders that exited with an error (they only exit early on one)."""
        return [p.args for p, _ in self.procs if p.poll() not in (None, 0)]

    def stop(self):
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc, log in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()


def copy_config(tmpdir, targets, interval="1s"):
    """Copies deploy/prometheus and drops a file_sd targets file into it.
    The one change to the shipped prometheus.yml: the global scrape and
    evaluation intervals, shortened so that a test sees data in seconds."""
    config_dir = os.path.join(tmpdir, "prometheus")
    shutil.copytree(DEPLOY_PROMETHEUS, config_dir)
    config_path = os.path.join(config_dir, "prometheus.yml")
    with open(config_path) as f:
        config = yaml.safe_load(f)
    config["global"]["scrape_interval"] = interval
    config["global"]["evaluation_interval"] = interval
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f, sort_keys=False)
    with open(os.path.join(config_dir, "targets", "test-nodes.json"), "w") as f:
        json.dump([{"targets": targets}], f)
    return config_path


class PrometheusError(Exception):
    def __init__(self, code, body):
        super().__init__(f"HTTP {code}: {body}")
        self.code = code
        self.body = body


class Prometheus:
    """prometheus on a free loopback port with a temporary TSDB."""

    def __init__(self, config_path, tmpdir, start_timeout=30.0):
        self.log_path = os.path.join(tmpdir, "prometheus.log")
        self.proc = None
        # A free port can be taken between our probe and Prometheus's bind:
        # try a few.
        for _ in range(3):
            self.address = f"127.0.0.1:{free_loopback_port()}"
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen(
                ["prometheus", "--config.file=" + config_path,
                 "--storage.tsdb.path=" + os.path.join(tmpdir, "tsdb"),
                 "--web.listen-address=" + self.address, "--log.level=warn"],
                stdout=self.log, stderr=subprocess.STDOUT)
            if self._wait_ready(start_timeout):
                return
            self.stop()
        raise AssertionError("prometheus did not become ready:\n" + self.read_log())

    def _wait_ready(self, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                with urllib.request.urlopen(f"http://{self.address}/-/ready", timeout=2) as r:
                    if r.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            time.sleep(0.1)
        return False

    def read_log(self):
        with open(self.log_path) as f:
            return f.read()[-4000:]

    def api(self, path, **params):
        url = f"http://{self.address}/api/v1/{path}?" + urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(url, timeout=10) as r:
                body = json.load(r)
        except urllib.error.HTTPError as e:
            raise PrometheusError(e.code, e.read().decode()) from None
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr):
        """Instant vector result as [(labels, float value)]."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


class Cluster:
    """NODES daemons with RANKS_PER_NODE feeders each, scraped by Prometheus."""

    def __init__(self, tmpdir):
        self.daemons, self.feeders, self.prometheus = [], None, None
        try:
            for node in range(NODES):
                node_dir = os.path.join(tmpdir, f"node{node}")
                os.mkdir(node_dir)
                self.daemons.append(Daemon(node_dir))
            self.instances = [d.metrics for d in self.daemons]
            self.feeders = Feeders(self.daemons, tmpdir)
            self.config_path = copy_config(tmpdir, self.instances)
            self.prometheus = Prometheus(self.config_path, tmpdir)
        except BaseException:
            self.stop()
            raise

    def stop(self):
        # Everything is stopped even if one step fails; the first failure wins.
        errors = []
        for step in ([self.prometheus.stop] if self.prometheus else []) + \
                    ([self.feeders.stop] if self.feeders else []) + \
                    [d.stop for d in self.daemons]:
            try:
                step()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        if errors:
            raise errors[0]

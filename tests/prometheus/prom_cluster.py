"""A small cluster for the Prometheus tests: torchmond "nodes" fed by fake
ranks (feed_rank.py, one process each) and a real Prometheus scraping them
with a copy of deploy/prometheus, with native histograms enabled; beside it a
second Prometheus without them scrapes one node (the OpenMetrics path)."""

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

# The stat whose quantiles are checked: every rank defines it (with p50 and
# p99, so the daemon keeps its native histogram) at start, and sends its
# samples, once, only when the cluster releases them, after Prometheus has
# scraped every rank's empty histogram. rate() over a range reaching back to
# that scrape then covers every sample.
#
# rate() extrapolates each series by its own factor, from the times of its
# first and last samples in the range. A node's series share those (the
# cluster starts Prometheus only once every rank has defined the stat, so
# they appear in the same scrape), but nodes are scraped at different
# moments, so a sum over nodes weighs them differently (by several percent
# when the range reaches back to the series' first samples, as here).
# So every node gets the same samples, spread differently over its ranks
# (local rank r on node n sends slot (n + r) % 4): reweighting identical
# nodes leaves the job's pooled distribution, and so its quantiles, exactly
# as they are. Ranks differ: slot j sends 100 + 12 j ms onwards.
EVAL_STEP = "eval.step_time_ms"
# Slot 0 (one rank per node) also has a few slow steps: its own p99 is one
# of them, far from the job's p99, which is why per-rank p99s are not
# combined into a job's.
OUTLIERS = (400.25, 475.5, 550.25, 625.75)
# Samples of each slot besides the outliers: the slots of the local ranks 0
# that test_per_rank_quantiles checks (0, 1, 2) have an odd count, and a
# node 807, the job 2421, so that q N is never a whole number at q = 0.5
# and 0.99 (see test_prometheus.check_quantile).
SLOT_COUNTS = (201, 201, 201, 200)


def eval_slot(node, local_rank):
    return (node + local_rank) % RANKS_PER_NODE


def eval_step_times(node, local_rank):
    """The eval step times rank (node, local_rank) sends: multiples of 1/4
    (sums exact in binary) spread over 50 ms above its slot's base."""
    slot = eval_slot(node, local_rank)
    values = [100.0 + 12.0 * slot + 0.25 * k for k in range(SLOT_COUNTS[slot])]
    if slot == 0:
        values += OUTLIERS
    return values


def prom_quantile(q, values):
    """PromQL's quantile(): linear interpolation between closest ranks."""
    values = sorted(values)
    rank = q * (len(values) - 1)
    lower = math.floor(rank)
    upper = min(lower + 1, len(values) - 1)
    weight = rank - lower
    return values[lower] * (1 - weight) + values[upper] * weight


def nearest_rank_quantile(q, values):
    """The exact q-quantile by nearest rank: the ceil(q N)-th smallest."""
    values = sorted(values)
    return values[max(math.ceil(q * len(values)), 1) - 1]


# The shipped recording rules over the native histograms, with the quantile
# each records. promtool 2.42 cannot feed a rule native histograms, so these
# are checked here, on the live cluster, instead of in
# deploy/prometheus/tests (test_every_recording_rule_is_unit_tested).
QUANTILE_RULES = {
    "job_stat:torchmon_stat_distribution:p50_rate5m": 0.5,
    "job_stat:torchmon_stat_distribution:p99_rate5m": 0.99,
}

# A native histogram of schema 5: bucket i holds (2^((i-1)/32), 2^(i/32)].
SCHEMA = 5
BUCKET_FACTOR = 2.0 ** (2.0 ** -SCHEMA)


def schema5_index(x):
    """The index of the schema-5 bucket holding x > 0, upper bound inclusive.
    log2 is exact at powers of two (the one bound the test data hits, 128);
    no other sample lies within 1e-3 of a bucket's width of a bound, far
    beyond log2's rounding."""
    return math.ceil(math.log2(x) * 2 ** SCHEMA)


def schema5_bucket(x):
    """(lower, upper) of the schema-5 bucket holding x > 0."""
    index = schema5_index(x)
    return 2.0 ** ((index - 1) / 2 ** SCHEMA), 2.0 ** (index / 2 ** SCHEMA)


def free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Feeders:
    """One process per fake rank."""

    def __init__(self, daemons, tmpdir, release_file):
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
                        str(FEED_SECONDS), "--eval-step-times",
                        ",".join(repr(v) for v in eval_step_times(node, local_rank)),
                        "--release-file", release_file]
                if (node, local_rank) == CAPPED:
                    args.append("--capped")
                if (node, local_rank) == NAN_EVAL_LOSS:
                    args.append("--nan-eval-loss")
                log = open(os.path.join(tmpdir, f"feed-{node}-{local_rank}.log"), "w+")
                self.procs.append((subprocess.Popen(args, env=env, stdout=log, stderr=log), log))

    def failed(self):
        """What each feeder that exited with an error (they only exit early
        on one) printed, with its exit status and arguments; empty if none."""
        reports = []
        for proc, log in self.procs:
            if proc.poll() in (None, 0):
                continue
            log.seek(0)
            reports.append(f"feeder exited with {proc.returncode}: {proc.args}\n"
                           f"{log.read()[-2000:]}")
        return "\n".join(reports)

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


def shipped_config(tmpdir, targets):
    """A copy of deploy/prometheus with a targets file of `targets` (rewrite
    it to change them: Prometheus watches it): nothing else changed."""
    config_dir = os.path.join(tmpdir, "prometheus")
    shutil.copytree(DEPLOY_PROMETHEUS, config_dir)
    with open(os.path.join(config_dir, "targets", "nodes.json"), "w") as f:
        json.dump([{"targets": targets}], f)
    return os.path.join(config_dir, "prometheus.yml")


def copy_config(tmpdir, targets, interval="1s"):
    """Copies deploy/prometheus and drops a file_sd targets file into it.
    The one change to the shipped files: the scrape and evaluation
    intervals (global, the torchmond job's own and the rule groups' own),
    shortened so that a test sees data in seconds."""
    config_dir = os.path.join(tmpdir, "prometheus")
    shutil.copytree(DEPLOY_PROMETHEUS, config_dir)
    config_path = os.path.join(config_dir, "prometheus.yml")
    with open(config_path) as f:
        config = yaml.safe_load(f)
    config["global"]["scrape_interval"] = interval
    config["global"]["evaluation_interval"] = interval
    for job in config["scrape_configs"]:
        if "scrape_interval" in job:
            job["scrape_interval"] = interval
    # And the rule groups that set their own (torchmon-stragglers).
    rules_dir = os.path.join(config_dir, "rules")
    for name in os.listdir(rules_dir):
        path = os.path.join(rules_dir, name)
        with open(path) as f:
            rules = yaml.safe_load(f)
        if any("interval" in g for g in rules["groups"]):
            for group in rules["groups"]:
                if "interval" in group:
                    group["interval"] = interval
            with open(path, "w") as f:
                yaml.safe_dump(rules, f, sort_keys=False)
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


# With it, Prometheus 2.x ingests native histograms and asks for the protobuf
# format first; without it, it asks for OpenMetrics 1.0 first.
NATIVE_HISTOGRAMS = "--enable-feature=native-histograms"


class Prometheus:
    """prometheus on a free loopback port with a temporary TSDB in tmpdir."""

    def __init__(self, config_path, tmpdir, flags=(), start_timeout=30.0, binary="prometheus"):
        """`binary`: another Prometheus than the one on PATH (tests/release's
        trixie root has 2.53)."""
        self.log_path = os.path.join(tmpdir, "prometheus.log")
        self.proc = None
        # A free port can be taken between our probe and Prometheus's bind:
        # try a few.
        for _ in range(3):
            self.address = f"127.0.0.1:{free_loopback_port()}"
            self.log = open(self.log_path, "w")
            self.proc = subprocess.Popen(
                [binary, "--config.file=" + config_path,
                 "--storage.tsdb.path=" + os.path.join(tmpdir, "tsdb"),
                 "--web.listen-address=" + self.address, "--log.level=warn", *flags],
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

    def query(self, expr, at=None):
        """Instant vector result as [(labels, float value)], evaluated now or
        at the Unix time `at` (a float)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = repr(at)
        data = self.api("query", **params)
        assert data["resultType"] == "vector", (expr, data)
        return [(s["metric"], float(s["value"][1])) for s in data["result"]]

    def query_histograms(self, expr):
        """Instant vector of native histograms as [(labels, histogram)], the
        histogram as the HTTP API gives it: {"count", "sum", "buckets":
        [[boundary rule, lower, upper, count], ...]}, numbers as strings."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", (expr, data)
        assert all("histogram" in s for s in data["result"]), (expr, data)
        return [(s["metric"], s["histogram"][1]) for s in data["result"]]

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


# The node the second, OpenMetrics-negotiating Prometheus scrapes.
OPENMETRICS_NODE = 0


class Cluster:
    """NODES daemons with RANKS_PER_NODE feeders each, scraped by Prometheus
    with native histograms enabled (`prometheus`), and node OPENMETRICS_NODE
    also by one without (`openmetrics_prometheus`). That one starts first:
    its first target discovery (a few seconds) overlaps the wait for every
    rank's definitions, which the first must not start before."""

    def __init__(self, tmpdir):
        self.daemons, self.feeders = [], None
        self.prometheus, self.openmetrics_prometheus = None, None
        self.release_file = os.path.join(tmpdir, "release-eval-steps")
        try:
            for node in range(NODES):
                node_dir = os.path.join(tmpdir, f"node{node}")
                os.mkdir(node_dir)
                self.daemons.append(Daemon(node_dir))
            self.instances = [d.metrics for d in self.daemons]
            self.feeders = Feeders(self.daemons, tmpdir, self.release_file)
            om_dir = os.path.join(tmpdir, "openmetrics")
            os.mkdir(om_dir)
            self.openmetrics_prometheus = Prometheus(
                copy_config(om_dir, [self.instances[OPENMETRICS_NODE]]), om_dir)
            self._wait_for_eval_definitions()
            self.config_path = copy_config(tmpdir, self.instances)
            self.prometheus = Prometheus(self.config_path, tmpdir, flags=[NATIVE_HISTOGRAMS])
        except BaseException:
            self.stop()
            raise

    def _wait_for_eval_definitions(self, timeout=30.0):
        """Until every daemon shows each of its ranks' (empty) EVAL_STEP
        histogram: Prometheus, started after, then sees a node's histograms
        first in the same scrape (see EVAL_STEP)."""
        deadline = time.monotonic() + timeout
        line = f'torchmon_stat_distribution_count{{stat="{EVAL_STEP}",'
        while True:
            shown = [d.scrape().count(line) for d in self.daemons]
            if shown == [RANKS_PER_NODE] * NODES:
                return
            failed = self.feeders.failed()
            assert not failed, failed
            assert time.monotonic() < deadline, f"{EVAL_STEP} histograms per daemon: {shown}"
            time.sleep(0.1)

    def release_eval_steps(self):
        """Lets every feeder send its EVAL_STEP samples (they poll the file)."""
        with open(self.release_file, "w"):
            pass

    def stop(self):
        # Everything is stopped even if one step fails; the first failure wins.
        errors = []
        for step in [p.stop for p in (self.prometheus, self.openmetrics_prometheus) if p] + \
                    ([self.feeders.stop] if self.feeders else []) + \
                    [d.stop for d in self.daemons]:
            try:
                step()
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
        if errors:
            raise errors[0]

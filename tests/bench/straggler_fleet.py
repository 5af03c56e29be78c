#!/usr/bin/env python3
"""The straggler alert at fleet scale, by simulation: many daemons, each
with the ranks of a synchronous job, scraped by one real Prometheus with
the shipped configuration and rules.

    /usr/bin/python3 tests/bench/straggler_fleet.py [--daemons 64] [--ranks 8]
        [--stages 8,16,32,64] [--episodes 10] [--factor 1.3] [--json FILE]

Each "node" is a torchmond of the build tree and one process that plays
its ranks with torchmon's Python client, as TORCHMON_TORCH_METRICS=1 would
report them: every step (200 ms), each rank adds its compute time to
torch.dist.compute_s and the rest of the step to torch.dist.wait_s. The
job is synchronous: a step lasts as long as the slowest rank's compute
(plus a fixed communication time), every rank of every node computing the
same pseudo-random draws for a step (a shared seed), so that each knows
the slowest without talking to the others. A rank's compute is 100 ms x
its own offset (normal, 1 %, fixed for the run) x the step's noise
(normal, 3 %); a straggler's is that x `--factor`, from a step at a random
moment (a control file every node reads). Nothing here is real training:
the ranks' numbers are simulated, the daemons, the scrape, the rules and
the alert are not.

1. Cost: daemons are added in `--stages`; at each, after the series settle,
   Prometheus' resident memory, CPU seconds per second over 30 s, head
   series (its own /metrics) and the straggler group's evaluation time.
2. Detection, with every daemon: `--episodes` episodes as
   tests/bench/straggler_detection.py runs them (a random rank of the
   whole job, the alert must name it and its host within three windows
   plus one evaluation, 35 s), then as long without a straggler.

Prometheus: the trixie-receivers root's 2.53 if tests/release/roots.sh
has it cached (or can make it), else `prometheus` on PATH.
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("TORCHMON_BUILD_DIR", os.path.join(REPO, "build"))
sys.path.insert(0, os.path.join(REPO, "tests", "support"))
sys.path.insert(0, os.path.join(REPO, "tests", "prometheus"))
sys.path.insert(0, os.path.join(REPO, "tests", "python"))

STEP_S = 0.2
COMPUTE_S = 0.1
COMM_S = 0.02
WINDOW_S = 10.0
EVALUATION_S = 5.0
BOUND_S = 3 * WINDOW_S + EVALUATION_S
JOB = "fleet"


# --- a node: its ranks, simulated ------------------------------------------

def rank_offsets(seed, world):
    rng = random.Random(f"{seed}-offsets")
    return [1 + rng.gauss(0, 0.01) for _ in range(world)]


def step_computes(seed, step, offsets, slow):
    """Every rank's compute seconds at `step`: the same on every node."""
    rng = random.Random(f"{seed}-{step}")
    computes = [COMPUTE_S * o * (1 + rng.gauss(0, 0.03)) for o in offsets]
    if slow is not None:
        computes[slow[0]] *= slow[1]
    return computes


def read_control(path, last):
    try:
        mtime = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return last, None
    if last is not None and mtime == last[0]:
        return last, last[1]
    with open(path) as f:
        words = f.read().split()
    slow = (int(words[0]), float(words[1])) if len(words) == 2 else None
    return (mtime, slow), slow


def node_main(args):
    import datetime
    import torchmon
    M = torchmon.Aggregation
    world = args.daemons * args.ranks
    offsets = rank_offsets(args.seed, world)
    window = datetime.timedelta(seconds=WINDOW_S)
    mine = []
    for local in range(args.ranks):
        rank = args.node * args.ranks + local
        client = torchmon.Client(target=args.target, labels_from_environment=False, labels={
            "job": JOB, "host": f"node-{args.node:03d}", "rank": str(rank),
            "local_rank": str(local)})
        mine.append((rank, client,
                     torchmon.Stat("torch.dist.compute_s", [M.COUNT, M.MEAN, M.SUM], window,
                                   client=client),
                     torchmon.Stat("torch.dist.wait_s", [M.COUNT, M.MEAN, M.SUM], window,
                                   client=client)))
    control = None
    step = int((time.time() - args.t0) / STEP_S) + 1
    while time.time() < args.end:
        due = args.t0 + step * STEP_S
        pause = due - time.time()
        if pause > 0:
            time.sleep(pause)
        control, slow = read_control(args.control, control)
        computes = step_computes(args.seed, step, offsets, slow)
        lasted = max(computes) + COMM_S
        for rank, _client, compute, wait in mine:
            compute.add(computes[rank])
            wait.add(lasted - computes[rank])
        step += 1
    for _rank, client, _c, _w in mine:
        client.flush(5)


# --- the fleet ---------------------------------------------------------------

def prometheus_binary():
    try:
        root = subprocess.run([os.path.join(REPO, "tests", "release", "roots.sh"),
                               "trixie-receivers"], check=True, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, timeout=1800).stdout.strip()
        binary = os.path.join(root, "usr", "bin", "prometheus")
        if os.access(binary, os.X_OK):
            return binary
    except (subprocess.SubprocessError, OSError):
        pass
    return shutil.which("prometheus")


def process_cost(pid):
    """(resident bytes, CPU seconds) of `pid`."""
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmRSS:"))
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks


def own_metrics(address):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("prometheus_tsdb_head_series "):
            out["head_series"] = float(line.split()[-1])
        if (line.startswith("prometheus_rule_group_last_duration_seconds")
                and "torchmon-stragglers" in line):
            out["straggler_group_s"] = float(line.split()[-1])
    return out


class Fleet:
    def __init__(self, args, tmp):
        from prom_cluster import Prometheus, shipped_config
        self.args, self.tmp = args, tmp
        self.daemons, self.nodes = [], []
        self.control = os.path.join(tmp, "control")
        open(self.control, "w").close()
        self.t0 = time.time()
        config = shipped_config(tmp, [])
        self.targets = os.path.join(os.path.dirname(config), "targets", "nodes.json")
        self.prometheus = Prometheus(config, tmp, binary=args.prometheus)

    def grow(self, count):
        from torchmond import LaunchedDaemon
        end = time.time() + 24 * 3600
        while len(self.daemons) < count:
            i = len(self.daemons)
            d = LaunchedDaemon([os.path.join(BUILD, "server", "torchmond"), "--listen",
                                f"unix://{self.tmp}/d{i}.sock", "--metrics-listen",
                                "127.0.0.1:0"])
            self.daemons.append(d)
            env = dict(os.environ, PYTHONPATH=os.path.join(BUILD, "client", "python"))
            self.nodes.append(subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--node", str(i), "--target",
                 d.ready.unix_target, "--t0", repr(self.t0), "--end", repr(end),
                 "--control", self.control, "--seed", str(self.args.seed),
                 "--daemons", str(self.args.daemons), "--ranks", str(self.args.ranks)],
                env=env))
        with open(self.targets + ".tmp", "w") as f:
            json.dump([{"targets": [d.ready.metrics for d in self.daemons]}], f)
        os.replace(self.targets + ".tmp", self.targets)

    def stop(self):
        for p in self.nodes:
            p.terminate()
        for p in self.nodes:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        for d in self.daemons:
            d.stop()
        self.prometheus.stop()

    def set_slow(self, rank, factor):
        with open(self.control + ".tmp", "w") as f:
            f.write("" if rank is None else f"{rank} {factor}\n")
        os.replace(self.control + ".tmp", self.control)

    def firing(self):
        return [a["labels"] for a in self.prometheus.api("alerts")["alerts"]
                if a["labels"].get("alertname") == "TorchmonStraggler"
                and a["state"] == "firing"]

    def ranks_seen(self):
        return len(self.prometheus.query(
            f'job_rank:torchmon_dist_compute_seconds:mean{{job="{JOB}"}}'))


def wait_until(condition, timeout, interval=1.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return False


def measure_cost(fleet, seconds=30.0):
    pid = fleet.prometheus.proc.pid
    rss0, cpu0 = process_cost(pid)
    time.sleep(seconds)
    rss1, cpu1 = process_cost(pid)
    own = own_metrics(fleet.prometheus.address)
    return {"daemons": len(fleet.daemons), "ranks": len(fleet.daemons) * fleet.args.ranks,
            "rss_mib": rss1 / 2**20, "cpu_per_s": (cpu1 - cpu0) / seconds, **own}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--daemons", type=int, default=64)
    p.add_argument("--ranks", type=int, default=8, help="ranks per daemon")
    p.add_argument("--stages", default="8,16,32,64")
    p.add_argument("--episodes", type=int, default=10)
    p.add_argument("--factor", type=float, default=1.3)
    p.add_argument("--settle", type=float, default=45.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None)
    # A node process (internal).
    p.add_argument("--node", type=int, default=None)
    p.add_argument("--target")
    p.add_argument("--t0", type=float)
    p.add_argument("--end", type=float)
    p.add_argument("--control")
    args = p.parse_args()
    if args.node is not None:
        node_main(args)
        return
    args.seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    args.prometheus = prometheus_binary()
    rng = random.Random(args.seed)
    print(f"seed {args.seed}, Prometheus {args.prometheus}", flush=True)
    stages = [int(s) for s in args.stages.split(",") if int(s) <= args.daemons]
    if not stages or stages[-1] != args.daemons:
        stages.append(args.daemons)
    report = {"seed": args.seed, "daemons": args.daemons, "ranks_per_daemon": args.ranks,
              "factor": args.factor, "cost": [], "episodes": [], "healthy_alerts": []}
    with tempfile.TemporaryDirectory(prefix="torchmon-fleet.") as tmp:
        fleet = Fleet(args, tmp)
        try:
            for count in stages:
                fleet.grow(count)
                wait_until(lambda: fleet.ranks_seen() >= count * args.ranks, 120)
                time.sleep(args.settle)
                cost = measure_cost(fleet)
                report["cost"].append(cost)
                print(json.dumps(cost), flush=True)
            world = args.daemons * args.ranks
            started = time.monotonic()
            for n in range(args.episodes):
                time.sleep(rng.uniform(WINDOW_S, 2 * WINDOW_S))
                rank = rng.randrange(world)
                t_slow = time.time()
                fleet.set_slow(rank, args.factor)
                latency, named, wrong = None, None, []
                while time.time() - t_slow < 60:
                    for labels in fleet.firing():
                        if labels.get("rank") == str(rank):
                            latency = time.time() - t_slow
                            named = (labels.get("rank"), labels.get("host"))
                        elif labels not in wrong:
                            wrong.append(labels)
                    if latency is not None:
                        break
                    time.sleep(0.25)
                fleet.set_slow(None, 1)
                wait_until(lambda: not fleet.firing(), 60, 0.5)
                episode = {"episode": n, "rank": rank, "latency_s": latency,
                           "named": named, "expected": (str(rank), f"node-{rank // args.ranks:03d}"),
                           "other_alerts": wrong}
                report["episodes"].append(episode)
                print(json.dumps(episode), flush=True)
            slow_s = time.monotonic() - started
            deadline = time.monotonic() + slow_s
            while time.monotonic() < deadline:
                for labels in fleet.firing():
                    if labels not in report["healthy_alerts"]:
                        report["healthy_alerts"].append(labels)
                time.sleep(0.5)
            report["healthy_s"] = round(slow_s)
        finally:
            fleet.stop()
    latencies = [e["latency_s"] for e in report["episodes"] if e["latency_s"] is not None]
    within = [e for e in report["episodes"] if e["latency_s"] is not None
              and e["latency_s"] <= BOUND_S and tuple(e["named"]) == tuple(e["expected"])]
    report["summary"] = {
        "episodes": len(report["episodes"]), "within_bound": len(within), "bound_s": BOUND_S,
        "missed": len(report["episodes"]) - len(latencies),
        "latency_median_s": statistics.median(latencies) if latencies else None,
        "latency_max_s": max(latencies, default=None),
        "other_alerts": sum(len(e["other_alerts"]) for e in report["episodes"]),
        "healthy_alerts": len(report["healthy_alerts"])}
    if len(report["cost"]) >= 2:
        a, b = report["cost"][0], report["cost"][-1]
        series = b.get("head_series", math.nan) - a.get("head_series", math.nan)
        report["summary"]["prometheus_bytes_per_series"] = (b["rss_mib"] - a["rss_mib"]) * 2**20 / series
        report["summary"]["prometheus_cpu_per_s_per_1000_series"] = (
            (b["cpu_per_s"] - a["cpu_per_s"]) * 1000 / series)
    print(json.dumps(report["summary"], indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

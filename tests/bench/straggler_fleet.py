#!/usr/bin/env python3
"""The straggler alert at fleet scale, by simulation: many daemons, each
with the ranks of a synchronous job, scraped by one real Prometheus with
the shipped configuration and rules.

    /usr/bin/python3 tests/bench/straggler_fleet.py [--daemons 64] [--ranks 8]
        [--stages 8,16,32,64] [--episodes 20] [--factor 1.3] [--healthy-s S]
        [--json FILE]

Each "node" is a torchmond of the build tree and one `torchmon-loadgen
--sync-job` beside it (docs/loadgen.md) that plays the node's ranks of one
job as TORCHMON_TORCH_METRICS=1 reports them: every step (200 ms), each
rank's compute in torch.dist.compute_s and the rest of the step in
torch.dist.wait_s. The job is synchronous: a step lasts as long as the
slowest rank's compute plus 20 ms of communication; every process draws
the same numbers for a step, so each knows the slowest rank of the whole
job. A rank's compute is 100 ms x its own offset (normal, 1 %) x the
step's noise (normal, 3 %); a straggler's is that x `--factor` from a known
step (the control file every node re-reads each step names it). Nothing
here is real training: the ranks' numbers are drawn, the clients, daemons,
scrapes, rules and alert are real.

1. Cost: daemons are added in `--stages`; at each, after the series settle,
   Prometheus' resident memory, CPU seconds per second over 30 s, head
   series (its own /metrics) and the straggler group's evaluation time.
2. Detection, with every daemon: `--episodes` episodes as
   tests/bench/straggler_detection.py runs them (a random rank of the
   whole job slow from a known step; the alert must name it and its host
   within three windows plus one evaluation, 35 s, counted from that
   step's start), then `--healthy-s` seconds (default: as long as the
   episodes took) without a straggler, every alert counted as false.
3. The job-wide view: at each detection, `python -m torchmon.cluster ranks
   --prometheus URL --job fleet --json` (docs/cli.md) asked the same
   Prometheus; it must list the slow rank, and only it, as the straggler,
   with its host.

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
sys.path.insert(0, HERE)
from bench_children import cpu_seconds, rss_bytes  # noqa: E402
from torchmond import LaunchedDaemon, wait_for  # noqa: E402

STEP_S = 0.2
WINDOW_S = 10.0
EVALUATION_S = 5.0
BOUND_S = 3 * WINDOW_S + EVALUATION_S
JOB = "fleet"
LOADGEN = os.path.join(BUILD, "tests", "bench", "torchmon-loadgen")


def host_of(node):
    return f"node-{node:03d}"


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
        while len(self.daemons) < count:
            i = len(self.daemons)
            d = LaunchedDaemon([os.path.join(BUILD, "server", "torchmond"), "--listen",
                                f"unix://{self.tmp}/d{i}.sock", "--metrics-listen",
                                "127.0.0.1:0"])
            self.daemons.append(d)
            self.nodes.append(subprocess.Popen(
                [LOADGEN, "--target", d.ready.unix_target, "--sync-job", "--job", JOB,
                 "--host", host_of(i), "--world", str(self.args.daemons * self.args.ranks),
                 "--first-rank", str(i * self.args.ranks), "--ranks", str(self.args.ranks),
                 "--seed", str(self.args.seed), "--step", f"{round(STEP_S * 1000)}ms",
                 "--window", f"{round(WINDOW_S)}s", "--duration", "24h",
                 "--straggler-file", self.control],
                stdout=subprocess.DEVNULL))
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
        """Makes `rank` slow from a step a little ahead (every node reads the
        file at each step); returns the Unix time that step starts."""
        from_step = int(time.time() / STEP_S) + 3
        with open(self.control + ".tmp", "w") as f:
            f.write("" if rank is None else f"{rank} {factor} {from_step}\n")
        os.replace(self.control + ".tmp", self.control)
        return from_step * STEP_S

    def cluster_view(self):
        """What `python -m torchmon.cluster ranks --job fleet` says now."""
        out = subprocess.run(
            [sys.executable, "-m", "torchmon.cluster", "ranks", "--prometheus",
             f"http://{self.prometheus.address}", "--job", JOB, "--json"],
            env=dict(os.environ, PYTHONPATH=os.path.join(BUILD, "client", "python")),
            capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            return {"error": out.stderr.strip()[-500:]}
        (comparison,) = json.loads(out.stdout)["comparisons"]
        hosts = {r["rank"]: r["host"] for r in comparison["ranks"]}
        return {"ranks": len(comparison["ranks"]), "stragglers": comparison["stragglers"],
                "hosts": [hosts[r] for r in comparison["stragglers"]]}

    def firing(self):
        return [a["labels"] for a in self.prometheus.api("alerts")["alerts"]
                if a["labels"].get("alertname") == "TorchmonStraggler"
                and a["state"] == "firing"]

    def ranks_seen(self):
        return len(self.prometheus.query(
            f'job_rank:torchmon_dist_compute_seconds:mean{{job="{JOB}"}}'))


def measure_cost(fleet, seconds=30.0):
    pid = fleet.prometheus.proc.pid
    cpu0 = cpu_seconds(pid)
    time.sleep(seconds)
    rss1, cpu1 = rss_bytes(pid), cpu_seconds(pid)
    own = own_metrics(fleet.prometheus.address)
    return {"daemons": len(fleet.daemons), "ranks": len(fleet.daemons) * fleet.args.ranks,
            "rss_mib": rss1 / 2**20, "cpu_per_s": (cpu1 - cpu0) / seconds, **own}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--daemons", type=int, default=64)
    p.add_argument("--ranks", type=int, default=8, help="ranks per daemon")
    p.add_argument("--stages", default="8,16,32,64")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--factor", type=float, default=1.3)
    p.add_argument("--settle", type=float, default=45.0)
    p.add_argument("--healthy-s", type=float, default=None,
                   help="seconds without a straggler after the episodes (default: as long)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    if not os.access(LOADGEN, os.X_OK):
        sys.exit(f"no {LOADGEN}: build the tree first (cmake --build build)")
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
                wait_for(lambda: fleet.ranks_seen() >= count * args.ranks, 120, 1.0)
                time.sleep(args.settle)
                cost = measure_cost(fleet)
                report["cost"].append(cost)
                print(json.dumps(cost), flush=True)
            world = args.daemons * args.ranks
            started = time.monotonic()
            for n in range(args.episodes):
                time.sleep(rng.uniform(WINDOW_S, 2 * WINDOW_S))
                rank = rng.randrange(world)
                t_slow = fleet.set_slow(rank, args.factor)
                latency, named, wrong, view = None, None, [], None
                while time.time() - t_slow < 60:
                    for labels in fleet.firing():
                        if labels.get("rank") == str(rank):
                            latency = time.time() - t_slow
                            named = (labels.get("rank"), labels.get("host"))
                        elif labels not in wrong:
                            wrong.append(labels)
                    if latency is not None:
                        view = fleet.cluster_view()
                        break
                    time.sleep(0.25)
                fleet.set_slow(None, 1)
                wait_for(lambda: not fleet.firing(), 60, 0.5)
                episode = {"episode": n, "rank": rank, "latency_s": latency,
                           "named": named, "expected": (str(rank), host_of(rank // args.ranks)),
                           "other_alerts": wrong, "cluster_view": view}
                report["episodes"].append(episode)
                print(json.dumps(episode), flush=True)
            slow_s = time.monotonic() - started
            healthy_s = args.healthy_s if args.healthy_s is not None else slow_s
            deadline = time.monotonic() + healthy_s
            while time.monotonic() < deadline:
                for labels in fleet.firing():
                    if labels not in report["healthy_alerts"]:
                        report["healthy_alerts"].append(labels)
                time.sleep(0.5)
            report["episodes_s"] = round(slow_s)
            report["healthy_s"] = round(healthy_s)
        finally:
            fleet.stop()
    latencies = sorted(e["latency_s"] for e in report["episodes"] if e["latency_s"] is not None)
    within = [e for e in report["episodes"] if e["latency_s"] is not None
              and e["latency_s"] <= BOUND_S and tuple(e["named"]) == tuple(e["expected"])]
    viewed = [e for e in report["episodes"] if e["cluster_view"]
              and e["cluster_view"].get("stragglers") == [e["expected"][0]]
              and e["cluster_view"].get("hosts") == [e["expected"][1]]]
    report["summary"] = {
        "episodes": len(report["episodes"]), "within_bound": len(within), "bound_s": BOUND_S,
        "missed": len(report["episodes"]) - len(latencies),
        "latency_median_s": statistics.median(latencies) if latencies else None,
        "latency_p90_s": latencies[int(0.9 * (len(latencies) - 1))] if latencies else None,
        "latency_max_s": max(latencies, default=None),
        "other_alerts": sum(len(e["other_alerts"]) for e in report["episodes"]),
        "cluster_view_named_it_alone": len(viewed),
        "healthy_s": report.get("healthy_s"),
        "healthy_alerts": len(report["healthy_alerts"])}
    if len(report["cost"]) >= 2:
        # Least squares over the stages: resident bytes and CPU per head series.
        xs = [c.get("head_series", math.nan) for c in report["cost"]]
        for key, name, scale in (("rss_mib", "prometheus_bytes_per_series", 2**20),
                                 ("cpu_per_s", "prometheus_cpu_s_per_s_per_1000_series", 1000),
                                 ("straggler_group_s", "straggler_group_s_per_1000_series", 1000)):
            ys = [c.get(key, math.nan) for c in report["cost"]]
            mx, my = statistics.fmean(xs), statistics.fmean(ys)
            slope = (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
                     / sum((x - mx) ** 2 for x in xs))
            report["summary"][name] = slope * scale
    print(json.dumps(report["summary"], indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

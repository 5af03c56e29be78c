#!/usr/bin/env python3
"""How often, and how fast, the shipped TorchmonStraggler alert names the
slow rank of a real synchronous training job, and how often it fires on a
job without one:

    TORCHMON_RELEASE_DIR=OUT /usr/bin/python3 tests/bench/straggler_detection.py \\
        [--kinds ddp,fsdp] [--episodes 20] [--world 3] [--factor 2.0] [--json FILE]

For each kind of job (tests/support/straggler_job.py: DDP, FSDP), on torch
2.6 in a trixie root, with two "nodes" of daemons and a real Prometheus 2.53
evaluating the shipped rules (tests/release/straggler_harness.py):

1. one job of `--episodes` episodes: a healthy stretch of one to two
   windows, then a rank chosen at random is made `--factor` times slower in
   what it computes from a random moment (so a random step) until the alert
   names it or 60 s pass, then made healthy until the alert resolves;
2. one job as long without a slow rank, its alerts polled every 0.25 s.

Prints, per kind: episodes detected within three windows plus one rule
evaluation (35 s), misses, detection latency (median, 90th percentile,
max), alerts that named another rank, the slow rank's measured slowdown
(its compute time while slow over before), and the alerts of the healthy
job. Needs root (chroot, mount, unshare) and deploy/release/build.sh's
artefacts in TORCHMON_RELEASE_DIR. Takes about 35 minutes per kind at 20
episodes.
"""

import argparse
import json
import os
import random
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "release"))
os.environ.setdefault("TORCHMON_RELEASE_DIR", "")
if not os.environ["TORCHMON_RELEASE_DIR"]:
    sys.exit("TORCHMON_RELEASE_DIR must name the output of deploy/release/build.sh")
import straggler_harness as h  # noqa: E402


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def slow_job(cluster, kind, args, rng):
    # Long enough for every episode at its slowest; stopped when done.
    seconds = args.episodes * (2 * h.WINDOW_S + 60 + 4 * h.WINDOW_S) + 120
    job = cluster.start_job(kind, args.world, seconds, f"{kind}-episodes")
    started = time.monotonic()
    episodes, healthy_alarms = [], []
    try:
        h.wait_until(lambda: len(h.compute_means(cluster, job)) == args.world, 90,
                     "every rank's torch.dist.compute_s in Prometheus", 1.0)
        h.watch_healthy(cluster, job, 2 * h.WINDOW_S)  # the first windows settle
        for n in range(args.episodes):
            healthy_alarms += h.watch_healthy(cluster, job,
                                              rng.uniform(h.WINDOW_S, 2 * h.WINDOW_S))
            rank = rng.randrange(args.world)
            result = h.episode(cluster, job, rank, args.factor)
            result.update(episode=n, rank=rank)
            episodes.append(result)
            print(f"  {kind} episode {n}: rank {rank} latency "
                  f"{'-' if result['latency_s'] is None else round(result['latency_s'], 1)} s, "
                  f"named {result['named']}, slowdown "
                  f"{'-' if result['slowdown'] is None else round(result['slowdown'], 2)}, "
                  f"other alerts {len(result['wrong'])}", flush=True)
            if result["latency_s"] is None or result["latency_s"] > h.DETECTION_BOUND_S:
                print(f"  {kind} episode {n}: timeline {json.dumps(result['timeline'])}",
                      flush=True)
    finally:
        cluster.stop_job(job)
    return episodes, healthy_alarms, time.monotonic() - started, job.name


def healthy_job(cluster, kind, args, seconds):
    job = cluster.start_job(kind, args.world, seconds + 300, f"{kind}-healthy")
    try:
        h.wait_until(lambda: len(h.compute_means(cluster, job)) == args.world, 90,
                     "every rank's torch.dist.compute_s in Prometheus", 1.0)
        return h.watch_healthy(cluster, job, seconds)
    finally:
        cluster.stop_job(job)


def summarize(kind, job_name, episodes, gap_alarms, healthy_alarms, healthy_s, args):
    latencies = [e["latency_s"] for e in episodes if e["latency_s"] is not None]
    within = [e for e in episodes if e["latency_s"] is not None
              and e["latency_s"] <= h.DETECTION_BOUND_S
              and e["named"] == {"rank": str(e["rank"]), "host": h.node_of(e["rank"], args.world),
                                 "job": job_name}]
    slowdowns = [e["slowdown"] for e in episodes if e["slowdown"] is not None]
    return {
        "kind": kind, "world": args.world, "factor": args.factor, "episodes": len(episodes),
        "detected_within_bound": len(within), "bound_s": h.DETECTION_BOUND_S,
        "missed": len(episodes) - len(latencies),
        "latency_s": {"median": statistics.median(latencies) if latencies else None,
                      "p90": percentile(latencies, 0.9), "max": max(latencies, default=None)},
        "alerts_naming_another_rank": sum(len(e["wrong"]) for e in episodes),
        "alerts_between_episodes": len(gap_alarms),
        "slowdown": {"median": statistics.median(slowdowns) if slowdowns else None,
                     "min": min(slowdowns, default=None)},
        "healthy_job_s": round(healthy_s), "healthy_job_alerts": healthy_alarms,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="ddp,fsdp")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--factor", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--json", default=None, help="also write the summaries here")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}", flush=True)
    summaries = []
    with h.Cluster() as cluster:
        for kind in args.kinds.split(","):
            episodes, gap_alarms, slow_s, name = slow_job(cluster, kind, args, rng)
            healthy = healthy_job(cluster, kind, args, slow_s)
            summary = summarize(kind, name, episodes, gap_alarms, healthy, slow_s, args)
            summaries.append(summary)
            print(json.dumps(summary, indent=1), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"seed": seed, "summaries": summaries}, f, indent=1)


if __name__ == "__main__":
    main()

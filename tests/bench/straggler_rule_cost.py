#!/usr/bin/env python3
"""What the straggler rules cost Prometheus to evaluate, against a base
commit's, side by side: one Prometheus 2.53 scraping the fleet of
tests/bench/straggler_fleet.py (`--daemons` torchmonds, each with
`--ranks` ranks of one synchronous job played by `torchmon-loadgen
--sync-job`), evaluating the working tree's group torchmon-stragglers and
the base's, its rules and alert renamed (before_…), both every 5 s on the
same series:

    TORCHMON_BUILD_DIR=BUILD /usr/bin/python3 tests/bench/straggler_rule_cost.py \\
        [--base 6c7406d] [--daemons 64] [--ranks 8] [--seconds 150]

Prints each group's evaluation time (median, min, max over the
evaluations seen) and each rule's median, from /api/v1/rules. The same
machine runs the fleet: absolute times grow with its load, the ratio is
the figure.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import straggler_fleet as sf  # noqa: E402

GROUP = "torchmon-stragglers"


def base_group(base):
    """The base's straggler group, renamed so that it records beside ours."""
    text = subprocess.run(["git", "-C", sf.REPO, "show",
                           f"{base}:deploy/prometheus/rules/torchmon.rules.yml"],
                          capture_output=True, text=True, check=True).stdout
    [group] = [g for g in yaml.safe_load(text)["groups"] if g["name"] == GROUP]
    group["name"] = f"{GROUP}-before"
    out = yaml.safe_dump({"groups": [group]})
    out = re.sub(r"\b(job_rank|job):torchmon_", r"before_\1:torchmon_", out)
    return out.replace("alert: TorchmonStraggler", "alert: TorchmonStragglerBefore")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base", default="6c7406d")
    p.add_argument("--daemons", type=int, default=64)
    p.add_argument("--ranks", type=int, default=8)
    p.add_argument("--seconds", type=float, default=150.0)
    p.add_argument("--settle", type=float, default=60.0)
    args = p.parse_args()
    before = base_group(args.base)
    fleet_args = argparse.Namespace(daemons=args.daemons, ranks=args.ranks, seed=1,
                                    prometheus=sf.prometheus_binary())
    with tempfile.TemporaryDirectory() as tmp:
        fleet = sf.Fleet(fleet_args, tmp)
        try:
            # deploy/prometheus loads rules/*.yml: the base's group beside ours.
            rules = os.path.join(os.path.dirname(fleet.targets), "..", "rules")
            with open(os.path.join(rules, "before.rules.yml"), "w") as f:
                f.write(before)
            fleet.grow(args.daemons)
            fleet.prometheus.proc.send_signal(1)  # SIGHUP: reload the rules
            time.sleep(args.settle)
            groups, rules_s, last = {}, {}, {}
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline:
                url = f"http://{fleet.prometheus.address}/api/v1/rules"
                with urllib.request.urlopen(url, timeout=10) as r:
                    data = json.load(r)["data"]["groups"]
                for g in data:
                    if g["name"].startswith(GROUP) and g["lastEvaluation"] != last.get(g["name"]):
                        last[g["name"]] = g["lastEvaluation"]
                        groups.setdefault(g["name"], []).append(g["evaluationTime"])
                        for rule in g["rules"]:
                            rules_s.setdefault((g["name"], rule["name"]), []).append(
                                rule["evaluationTime"])
                time.sleep(1)
            compared = {name: len(fleet.prometheus.query(name)) for name in (
                "job_rank:torchmon_dist_compute_seconds:mean",
                "before_job_rank:torchmon_dist_compute_seconds:mean")}
        finally:
            fleet.stop()
    print(f"{args.daemons} daemons x {args.ranks} ranks, ranks compared now: {compared}, "
          f"load average {os.getloadavg()}")
    for name, times in sorted(groups.items()):
        print(f"{name}: {len(times)} evaluations, median {statistics.median(times):.3f} s, "
              f"min {min(times):.3f}, max {max(times):.3f}")
    for (name, rule), times in sorted(rules_s.items()):
        print(f"  {name} {rule}: median {statistics.median(times):.4f} s")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs the headline benchmarks of two builds alternately and prints ratios.

tests/bench/compare.sh builds the two trees and calls this; see its header.
Each round runs every measurement once on each build, the order of the two
builds swapped from one round to the next, so that the machine's drift and
its neighbours' noise fall on both alike. The table shows each side's
median over the rounds and new / base (below 1: the new build is faster or
cheaper). A measurement a build cannot make (a benchmark it does not have)
is shown as n/a, never guessed.

Measurements (DESIGN.md's targets in brackets):
  Stat::add          BM_StatAdd_SeparateStats, 1 thread, real time  [<= 25 ns]
  Stat::add, steady / first touch
                     BM_StatAdd_Steady / BM_StatAdd_FirstTouch: bursts of 262,144
                     adds to a warm stat / to a new client and stat per burst,
                     with the adding thread's CPU time and page faults (n/a
                     for a base without them)
  ingest             BM_IngestApply, the daemon's apply of a parsed batch, per sample
  scrape 100k        BM_HttpScrape of 100,000 series, text, no gzip  [<= 250 ms]
  20 M/s             torchmon-loadgen, 2 ranks x 50 stats at 20 M samples/s
                     (client and daemon CPU per million samples, and the
                     share of samples sent that the clients dropped, and
                     that the daemon refused as late)  [0 dropped]
  many stats         torchmon-loadgen, 4 ranks x 25,000 stats at 1 M samples/s
                     [<= 0.150 s/M each side]
  Python add         tests/bench/python_add_bench.py: torchmon's Stat.add in ns
                     and its ratio to torch.monitor's  [<= 0.5x]
  state on           the 20 M/s and many-stats runs again with --state-dir
                     (fsync every second, the default), for a build whose
                     torchmond has it; below the table, each build's daemon
                     CPU with the state on over its own with it off
                     [<= 1.10 at 20 M/s]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


class Build:
    def __init__(self, name, path):
        self.name = name
        self.path = path
        # Every Google Benchmark, or (the portable build, which builds
        # Google Benchmark for glibc 2.28 only for this) Stat::add's alone.
        candidates = [os.path.join(path, "tests", "bench", name)
                      for name in ("torchmon_benchmarks", "torchmon_client_benchmarks")]
        self.bench = next((c for c in candidates if os.path.exists(c)), candidates[0])
        self.loadgen = os.path.join(path, "tests", "bench", "torchmon-loadgen")
        self.daemon = os.path.join(path, "server", "torchmond")


def run(cmd, env=None, timeout=600):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def google_benchmark(build, pattern, repetitions, value):
    """Median over `repetitions` of the one benchmark whose name matches
    `pattern`; `value` picks the figure from its JSON entry. None if the
    build has no such benchmark."""
    if not os.path.exists(build.bench):  # a build without the Google Benchmark binary
        return None
    code, listing, _ = run([build.bench, "--benchmark_list_tests"])
    names = [n for n in listing.split() if re.fullmatch(pattern, n)] if code == 0 else []
    if len(names) != 1:
        return None
    code, out, err = run([build.bench, "--benchmark_filter=^" + re.escape(names[0]) + "$",
                          f"--benchmark_repetitions={repetitions}",
                          "--benchmark_format=json"])
    if code != 0:
        sys.stderr.write(f"{build.name}: {names[0]} failed: {err[-400:]}\n")
        return None
    runs = [b for b in json.loads(out)["benchmarks"] if b.get("run_type") == "iteration"]
    if not runs or any("error_message" in b for b in runs):
        return None
    values = [value(b) for b in runs]
    if isinstance(values[0], tuple):  # several figures of each run: the median of each
        # (None where a build's benchmark lacks that figure.)
        return tuple(statistics.median(v[i] for v in values) if values[0][i] is not None else None
                     for i in range(len(values[0])))
    return statistics.median(values)


def has_state_dir(build):
    """Whether the build's torchmond takes --state-dir."""
    code, out, _ = run([build.daemon, "--help"])
    return code == 0 and "--state-dir" in out


def loadgen(build, args, state=False):
    if state:
        with tempfile.TemporaryDirectory(prefix="torchmon-compare-state.") as tmp:
            return loadgen(build, args + ["--daemon-arg", "--state-dir=" + os.path.join(tmp, "s")])
    code, out, err = run([build.loadgen, "--spawn-daemon", build.daemon, "--json"] + args)
    if code not in (0, 1) or not out.strip():
        sys.stderr.write(f"{build.name}: torchmon-loadgen {' '.join(args)} failed: {err[-400:]}\n")
        return None
    return json.loads(out.strip().splitlines()[-1])


def python_add(build, rounds):
    env = dict(os.environ, TORCHMON_BUILD_DIR=build.path)
    code, out, err = run(["/usr/bin/python3", os.path.join(HERE, "python_add_bench.py"),
                          "--rounds", str(rounds)], env=env)
    if code != 0:
        sys.stderr.write(f"{build.name}: python_add_bench.py failed: {err[-400:]}\n")
        return None
    ours = re.search(r"^\s*torchmon\s+([0-9.]+)", out, re.M)
    ratio = re.search(r"ratio torchmon / torch\.monitor: ([0-9.]+)x", out)
    if not ours or not ratio:
        return None
    return {"ns": float(ours.group(1)), "ratio": float(ratio.group(1))}


def measure(build, quick):
    """One round of every measurement on one build: {metric: value or None}."""
    reps = 3 if quick else 9
    duration = "3s" if quick else "10s"
    m = {}
    # Nine repetitions even when quick (they take milliseconds): a run's
    # first repetition touches fresh buffer chunks and takes about twice as
    # long, so with three one more slow repetition moves the median.
    m["Stat::add, 1 thread (ns)"] = google_benchmark(
        build, r"BM_StatAdd_SeparateStats/iterations:\d+/real_time/threads:1", 9,
        lambda b: b["real_time"])
    # The same add in the steady state (warm chunks) and at first touch (a
    # new stat per burst): n/a for a base without these benchmarks.
    for label, name in (("steady", "BM_StatAdd_Steady"), ("first touch", "BM_StatAdd_FirstTouch")):
        figures = google_benchmark(
            build, name + r"/iterations:\d+/real_time", reps,
            lambda b: (1e9 / b["items_per_second"], b.get("cpu_ns_per_sample"),
                       1e6 * b["faults_per_sample"]))
        m[f"Stat::add, {label} (ns)"] = figures[0] if figures else None
        # The adding thread's own CPU time: below the real time when it
        # waited for a core (the sender, the daemon, steal), not add().
        m[f"Stat::add, {label}: thread CPU (ns)"] = figures[1] if figures else None
        m[f"Stat::add, {label}: faults per M samples"] = figures[2] if figures else None
    m["daemon ingest (ns/sample)"] = google_benchmark(
        build, r"BM_IngestApply(/min_time:[0-9.]+)?", reps,
        lambda b: 1e9 / b["items_per_second"])
    m["scrape 100k series (ms)"] = google_benchmark(
        build, r"BM_HttpScrape/(series:)?100000(/format:0/gzip:0)?/real_time",
        2 if quick else 5, lambda b: b["real_time"])
    fast_args = ["--ranks", "2", "--stats", "50", "--rate", "20000000", "--duration", duration]
    many_args = ["--ranks", "4", "--stats", "25000", "--rate", "1000000", "--duration", duration]
    fast = loadgen(build, fast_args)
    if fast is not None:
        sent = max(fast["sent"], 1)
        m["20 M/s: client CPU (s/M)"] = fast.get("client_cpu_seconds_per_million")
        m["20 M/s: daemon CPU (s/M)"] = fast.get("daemon_cpu_seconds_per_million")
        # What the clients dropped (their buffers full), and what the daemon
        # refused as late (a window closed before its samples came: a
        # stall longer than the grace period).
        m["20 M/s: dropped by clients (%)"] = 100.0 * fast["client_dropped"] / sent
        m["20 M/s: late (%)"] = 100.0 * fast["late"] / sent
    many = loadgen(build, many_args)
    if many is not None:
        m["many stats: client CPU (s/M)"] = many.get("client_cpu_seconds_per_million")
        m["many stats: daemon CPU (s/M)"] = many.get("daemon_cpu_seconds_per_million")
    state = has_state_dir(build)
    fast_state = loadgen(build, fast_args, state=True) if state else None
    m["20 M/s, state on: daemon CPU (s/M)"] = (
        fast_state.get("daemon_cpu_seconds_per_million") if fast_state else None)
    m["20 M/s, state on: dropped by clients (%)"] = (
        100.0 * fast_state["client_dropped"] / max(fast_state["sent"], 1) if fast_state else None)
    many_state = loadgen(build, many_args, state=True) if state else None
    m["many stats, state on: daemon CPU (s/M)"] = (
        many_state.get("daemon_cpu_seconds_per_million") if many_state else None)
    py = python_add(build, 11 if quick else 31)
    m["Python add (ns)"] = py["ns"] if py else None
    m["Python add / torch.monitor"] = py["ratio"] if py else None
    return m


def fmt(v):
    if v is None:
        return "n/a"
    return f"{v:.4g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", required=True, help="the base build directory")
    parser.add_argument("--new", required=True, help="the new build directory")
    parser.add_argument("--base-name", default="base")
    parser.add_argument("--new-name", default="new")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="fewer repetitions and 3 s load runs: a check that it works")
    parser.add_argument("--json", help="also write every round's figures here")
    args = parser.parse_args()

    builds = [Build(args.base_name, args.base), Build(args.new_name, args.new)]
    machine = run([os.path.join(args.new, "tests", "bench", "torchmon-machine")])[1].strip()
    print(f"machine: {machine or 'unknown'}")
    print(f"base: {args.base_name}   new: {args.new_name}   "
          f"{args.rounds} rounds, alternating{' (quick)' if args.quick else ''}")
    sys.stdout.flush()

    rounds = {b.name: [] for b in builds}
    for r in range(args.rounds):
        order = builds if r % 2 == 0 else builds[::-1]
        for b in order:
            rounds[b.name].append(measure(b, args.quick))
            print(f"  round {r + 1}: {b.name} done", file=sys.stderr)

    metrics = list(rounds[args.new_name][0].keys())
    width = max(len(k) for k in metrics) + 2
    print(f"{'':{width}}{'base':>10}{'new':>10}{'new/base':>10}   per round (base | new)")
    for k in metrics:
        per = {n: [rd.get(k) for rd in rounds[n]] for n in rounds}
        med = {n: (statistics.median(v for v in vals if v is not None)
                   if any(v is not None for v in vals) else None) for n, vals in per.items()}
        base, new = med[args.base_name], med[args.new_name]
        ratio = f"{new / base:.2f}" if base and new is not None else "n/a"
        raw = " ".join(fmt(v) for v in per[args.base_name]) + " | " + \
            " ".join(fmt(v) for v in per[args.new_name])
        print(f"{k:{width}}{fmt(base):>10}{fmt(new):>10}{ratio:>10}   {raw}")
    # The state directory's cost, each build against itself (rounds paired:
    # on and off ran back to back in each round).
    for b in builds:
        for off, on in (("20 M/s: daemon CPU (s/M)", "20 M/s, state on: daemon CPU (s/M)"),
                        ("many stats: daemon CPU (s/M)", "many stats, state on: daemon CPU (s/M)")):
            pairs = [(rd.get(off), rd.get(on)) for rd in rounds[b.name]]
            ratios = [n / f for f, n in pairs if f and n is not None]
            if ratios:
                print(f"{b.name}: {on.split(':')[0]} / off, daemon CPU: median "
                      f"{statistics.median(ratios):.2f} (rounds: "
                      f"{' '.join('%.2f' % r for r in ratios)})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine, "rounds": rounds}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

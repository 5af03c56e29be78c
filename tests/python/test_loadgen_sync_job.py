"""torchmon-loadgen --sync-job (docs/loadgen.md): the ranks of a synchronous
job played against a real daemon, as tests/bench/straggler_fleet.py plays
them beside each of many daemons. What the fleet's figures rest on: every
rank's step is equal, its split is not, a straggler is the one the daemon's
comparison names, and every sample is accounted for."""

import os
import subprocess

import pytest

from torchmon_testing import BUILD_DIR

LOADGEN = os.path.join(BUILD_DIR, "tests", "bench", "torchmon-loadgen")

pytestmark = pytest.mark.skipif(not os.access(LOADGEN, os.X_OK),
                                reason="torchmon-loadgen is built with the tests' benchmarks")


def loadgen(*args, timeout=60):
    return subprocess.run([LOADGEN, *args], capture_output=True, text=True, timeout=timeout)


def sync_job(daemon, *args):
    return loadgen("--target", daemon.target, "--sync-job", "--step", "50ms", "--compute", "20ms",
                   "--comm", "5ms", "--window", "1s", "--duration", "3s", *args)


def compute_and_wait(daemon):
    """Per rank: seconds computed, seconds waited and steps over the windows
    closed for both stats (the last one may close between the two reads)."""
    closed = {stat: {(w["labels"]["rank"], w["start_ms"]): w["aggregates"]
                     for w in daemon.windows(stat)}
              for stat in ("torch.dist.compute_s", "torch.dist.wait_s")}
    out = {}
    for key in closed["torch.dist.compute_s"].keys() & closed["torch.dist.wait_s"].keys():
        compute, wait = closed["torch.dist.compute_s"][key], closed["torch.dist.wait_s"][key]
        sums = out.setdefault(key[0], {"compute": 0.0, "wait": 0.0, "steps": 0})
        sums["compute"] += compute["sum"]
        sums["wait"] += wait["sum"]
        sums["steps"] += compute["count"]
    return out


def test_a_straggler_of_a_synchronous_job_is_the_rank_the_daemon_names(daemon):
    # Ranks 4 to 7 of an 8-rank job on this "node"; rank 6 twice as slow
    # from the 10th step.
    run = sync_job(daemon, "--job", "sync", "--host", "node-001", "--world", "8",
                   "--first-rank", "4", "--ranks", "4", "--seed", "7", "--straggler", "6:2@10")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "EXACT: 8/8 series" in run.stdout, run.stdout
    assert "ranks 4 to 7 of 8" in run.stdout and "rank 6 x2 from step 10" in run.stdout
    series = daemon.series("torch.dist.compute_s")
    assert sorted(s["labels"]["rank"] for s in series) == ["4", "5", "6", "7"], series
    assert {(s["labels"]["job"], s["labels"]["host"]) for s in series} == {("sync", "node-001")}
    assert sorted(s["labels"]["local_rank"] for s in series) == ["0", "1", "2", "3"], series
    # Synchronous: every rank's step (compute + wait) is the same, each step
    # as long as the slowest rank's compute plus the communication.
    # 3 s of 50 ms steps, each rank recording every one.
    played = {s["labels"]["rank"]: s["counters"]["accepted"] for s in series}
    assert len(set(played.values())) == 1 and 55 <= played["4"] <= 61, played
    split = compute_and_wait(daemon)  # the closed windows
    totals = [s["compute"] + s["wait"] for s in split.values()]
    assert max(totals) - min(totals) < 1e-6, split
    # The split is not: the straggler computed the most and waited the least.
    assert max(split, key=lambda r: split[r]["compute"]) == "6", split
    assert min(split, key=lambda r: split[r]["wait"]) == "6", split
    # The daemon's comparison of a window where rank 6 was slow throughout.
    (comparison,) = daemon.ctl("ranks")["comparisons"]
    assert comparison["stat"] == "torch.dist.compute_s"
    assert comparison["stragglers"] == ["6"], comparison
    slow = next(r for r in comparison["ranks"] if r["rank"] == "6")
    assert 1.8 < slow["ratio"] < 2.2 and slow["labels"]["host"] == "node-001", comparison


def test_every_process_of_a_job_knows_its_slowest_rank(daemon):
    # Two processes, ranks 0-1 and 2-3 of one job, played against one daemon
    # at once, rank 3 1.5 times as slow and no noise: the first process
    # makes its steps as long as rank 3's compute, which only the draws it
    # shares with the second tell it, plus the communication.
    common = ("--job", "two", "--world", "4", "--ranks", "2", "--seed", "11", "--noise", "0",
              "--rank-spread", "0", "--straggler", "3:1.5")
    runs = [subprocess.Popen([LOADGEN, "--target", daemon.target, "--sync-job", "--step", "50ms",
                              "--compute", "20ms", "--comm", "5ms", "--window", "1s",
                              "--duration", "3s", "--first-rank", first, *common],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for first in ("0", "2")]
    for run in runs:
        stdout, stderr = run.communicate(timeout=60)
        assert run.returncode == 0, stdout + stderr
    split = compute_and_wait(daemon)
    assert sorted(split) == ["0", "1", "2", "3"], split
    for rank, s in split.items():
        assert s["steps"] > 0, split
        compute = 0.030 if rank == "3" else 0.020
        assert abs(s["compute"] / s["steps"] - compute) < 1e-9, (rank, split)
        assert abs((s["compute"] + s["wait"]) / s["steps"] - 0.035) < 1e-9, (rank, split)


def test_a_straggler_file_is_read_each_step_and_a_bad_one_is_said_and_ignored(daemon, tmp_path):
    control = tmp_path / "control"
    control.write_text("1 lots\n")
    run = sync_job(daemon, "--world", "2", "--ranks", "2", "--straggler-file", str(control))
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{control}: straggler \"1 lots\" is not \"RANK FACTOR [STEP]\"; no straggler" \
        in run.stderr, run.stderr
    assert run.stderr.count("no straggler") == 1, run.stderr  # said once per change
    split = compute_and_wait(daemon)
    assert abs(split["0"]["compute"] / split["1"]["compute"] - 1) < 0.1, split


@pytest.mark.parametrize("args, message", [
    (("--sync-job", "--rate", "5"), "--rate cannot be used with --sync-job"),
    (("--sync-job", "--processes", "--stats", "3"),
     "--processes, --stats cannot be used with --sync-job"),
    (("--seed", "3"), "--seed needs --sync-job"),
    (("--sync-job", "--world", "4", "--ranks", "2", "--first-rank", "3"),
     "ranks 3 to 4 are not all within --world 4"),
    (("--sync-job", "--world", "4", "--straggler", "4:2"),
     "--straggler: straggler rank 4 is not a rank of the job: 0 to 3"),
    (("--sync-job", "--straggler", "0:0"), "straggler factor 0 is outside (0, 100]"),
    (("--sync-job", "--straggler", "zero"), "is not RANK:FACTOR or RANK:FACTOR@STEPS"),
    (("--sync-job", "--noise", "2"), "--noise \"2\" is not a relative spread in [0, 1]"),
])
def test_sync_job_flags_are_checked(args, message):
    run = loadgen("--target", "unix:///nonexistent.sock", *args)
    assert run.returncode == 2, run.stdout + run.stderr
    assert message in run.stderr, run.stderr

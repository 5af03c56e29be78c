"""torchmon.elastic: TorchElastic's metrics from workers of a real process
group, launched by torchrun (Debian's torch), reach the daemon with each
worker's rank."""

import os
import subprocess
import sys
import textwrap

WORKER = textwrap.dedent("""
    import os
    import torch.distributed as dist
    from torch.distributed.elastic import metrics
    import torchmon
    import torchmon.elastic

    torchmon.elastic.configure()
    dist.init_process_group("gloo")
    rank = dist.get_rank()

    @metrics.prof
    def work():
        return 1

    @metrics.prof(group="loader")
    def broken():
        raise RuntimeError("no batch")

    work()
    work()
    try:
        broken()
    except RuntimeError:
        pass
    metrics.put_metric("tokens", 100 * (rank + 1), "train")
    dist.barrier()
    assert torchmon.flush(10)
    assert torchmon.default_client().errors() == [], torchmon.default_client().errors()
    dist.destroy_process_group()
""")


def run_torchrun(script, env, tmp_path):
    """torchrun --standalone with two workers of `script`; its completed
    process. torch 1.13's agent chooses the workers' MASTER_PORT free and
    closes it, and rank 0 binds it later: a port another test's daemon took
    meanwhile fails the job at its rendezvous ("Address already in use", in
    CI's Release suite), before any worker put a metric. Then the job starts
    again, three times at most."""
    for attempt in range(3):
        out = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
             "--max_restarts=0",
             # Debian's torch 1.13 on Python 3.11 cannot parse "0", the default
             # of these (iterating its IntFlag Std skips NONE, so from_str
             # returns None), nor 3; 1 and 2 it can: workers' stdout to a log
             # file, their stderr (tracebacks) also to ours.
             "--redirects=1", "--tee=2", f"--log_dir={tmp_path / f'logs{attempt}'}", str(script)],
            env=env, capture_output=True, text=True, timeout=120)
        if out.returncode == 0 or "(errno: 98 - Address already in use)" not in out.stderr:
            return out
    return out


def test_put_metric_and_prof_of_every_worker_reach_the_daemon(daemon, python_env, tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    env = dict(python_env)
    env.pop("TORCHMON_LABELS", None)
    out = run_torchrun(script, env, tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr

    tokens = daemon.series("train.tokens")
    assert sorted((s["labels"]["rank"], s["counters"]["accepted"]) for s in tokens) == [
        ("0", 1), ("1", 1)]
    # @prof: the function's name under the group, per worker.
    success = daemon.series("torchelastic.*work.success")
    assert sorted(s["labels"]["rank"] for s in success) == ["0", "1"]
    assert all(s["counters"]["accepted"] == 2 for s in success)
    durations = daemon.series("torchelastic.*work.duration.ms")
    assert all(s["counters"]["accepted"] == 2 for s in durations) and len(durations) == 2
    failures = daemon.series("loader.*broken.failure")
    assert sorted(s["labels"]["rank"] for s in failures) == ["0", "1"]
    assert daemon.series("loader.*broken.success") == []
    # The values: each worker's tokens, summed in its window.
    windows = daemon.wait_windows("train.tokens", 2, timeout=30)
    assert sorted(w["aggregates"]["sum"] for w in windows) == [100, 200]

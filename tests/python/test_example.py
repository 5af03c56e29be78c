"""The example training script runs and its stats and events reach the daemon."""

import os
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "client", "python", "examples",
                       "train.py")


def test_example_training_script_reports_every_stat(daemon, python_env):
    steps = 20
    out = subprocess.run([sys.executable, EXAMPLE, "--epochs", "2", "--steps-per-epoch",
                          str(steps), "--batch-size", "32", "--device", "cpu"],
                         env=python_env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "epoch 1: loss" in out.stdout
    for stat in ("train.loss", "train.step_time_ms", "train.grad_norm", "train.lr",
                 "train.samples_per_second"):
        (series,) = daemon.series(stat)
        assert series["counters"]["accepted"] == 2 * steps, stat
        assert series["labels"]["job"] == "pytest"
    epochs = daemon.ctl("events", "epoch_end")["events"]
    assert [e["data"]["epoch"] for e in epochs] == [0, 1]
    assert all(e["data"]["device"] == "cpu" for e in epochs)

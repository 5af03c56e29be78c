#!/usr/bin/env python3
"""Device check (not run by CI; tests/gpu/cuda_loop_check.sh runs it):
PyTorch's own metrics on a GPU host (docs/torch-metrics.md), the CUDA part
that a machine without a GPU cannot show.

With the metrics enabled (TORCHMON_TORCH_METRICS=1 through the wheel's .pth,
or enable_metrics() here when the wheel was installed where `site` does not
look), an MLP trains 50 steps on CUDA; then one allocation far beyond the
device's memory fails. The daemon must hold, labelled device="0":
torch.cuda.memory.allocated_bytes, reserved_bytes and peak_allocated_bytes
(sampled every second once the job initialized CUDA), one
torch.cuda.out_of_memory_bytes sample of the size asked for and one
torch.cuda.out_of_memory event; 49 step intervals; and the wait-counter keys
this torch's CUDA build counts, listed in the summary.

    python tests/gpu/torch_metrics_cuda.py --ctl TORCHMONCTL --target unix:///…/d.sock \\
        [--summary OUT.json]
"""

import argparse
import json
import os
import subprocess
import sys
import time


def ctl(args, *command):
    out = subprocess.run([args.ctl, "--target", args.target, "--json", *command],
                         capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout)


def series(args, stat):
    return ctl(args, "series", "--stat", stat)["series"]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ctl", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("--summary")
    args = p.parse_args()
    os.environ["TORCHMON_TARGET"] = args.target

    import torchmon
    import torchmon.torch
    status = torchmon.torch.enable_metrics()  # a no-op where the .pth did it
    import torch
    print("torch", torch.__version__, "status", status, flush=True)
    problems = []
    if status.get("cuda") != "on":
        problems.append(f"CUDA metrics are not on: {status}")

    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 10)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.randn(512, 1024, device="cuda")
    for _ in range(50):
        optimizer.zero_grad()
        model(data).square().mean().backward()
        optimizer.step()
    torch.cuda.synchronize()

    asked = 1 << 50  # a PiB: no GPU has it
    oom_error = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    try:
        torch.empty(asked, dtype=torch.uint8, device="cuda")
        problems.append("a PiB allocation succeeded")
    except oom_error:
        pass

    # The sampler looks every second: wait for its samples, bounded.
    deadline = time.monotonic() + 15
    memory = []
    while time.monotonic() < deadline:
        torchmon.flush(5)
        memory = series(args, "torch.cuda.memory.*")
        if len(memory) == 3:
            break
        time.sleep(0.2)
    if not torchmon.flush(10):
        problems.append("flush did not complete")
    memory = {s["stat"]: s for s in series(args, "torch.cuda.memory.*")}
    for stat in ("torch.cuda.memory.allocated_bytes", "torch.cuda.memory.reserved_bytes",
                 "torch.cuda.memory.peak_allocated_bytes"):
        s = memory.get(stat)
        if s is None or s["labels"].get("device") != "0" or s["counters"]["accepted"] < 1:
            problems.append(f"{stat}: {s}")
    oom = series(args, "torch.cuda.out_of_memory_bytes")
    if len(oom) != 1 or oom[0]["counters"]["accepted"] != 1:
        problems.append(f"torch.cuda.out_of_memory_bytes: {oom}")
    events = ctl(args, "events", "torch.cuda.out_of_memory")["events"]
    if len(events) != 1 or events[0]["data"].get("requested_bytes") != asked:
        problems.append(f"torch.cuda.out_of_memory events: {events}")
    steps = series(args, "torch.optim.step_interval_s")
    if len(steps) != 1 or steps[0]["counters"]["accepted"] != 49:
        problems.append(f"torch.optim.step_interval_s: {steps}")
    keys = sorted({s["stat"].rsplit(".", 1)[0] for s in series(args, "pytorch.*")})

    summary = {"torch": torch.__version__, "status": status, "wait_counter_keys": keys,
               "memory": {k: v["counters"]["accepted"] for k, v in memory.items()},
               "out_of_memory": len(events), "problems": problems}
    print(json.dumps(summary, indent=1))
    if args.summary:
        with open(args.summary, "w") as f:
            json.dump(summary, f, indent=1)
    print("torch metrics check:", "FAILED" if problems else "passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

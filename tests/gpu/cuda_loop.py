"""Device check (not run by CI): torchmon's wheel beside a real CUDA training loop.

Run by tests/gpu/cuda_loop_check.sh on a GPU host against the portable
tarball's torchmond. It trains a small MLP on CUDA, adds three stats per
step, and checks that the daemon's windows hold exactly what was added. It
also measures what the adds cost: step time with and without them, in
alternating blocks of the same run, and add() alone in a tight loop.
"""
import argparse
import datetime
import json
import math
import statistics
import subprocess
import sys
import time

import torch
import torchmon

A = torchmon.Aggregation
SECOND = datetime.timedelta(seconds=1)


def ctl(args, *argv):
    run = subprocess.run([args.ctl, "--target", args.target, "--json", *argv],
                         capture_output=True, text=True, timeout=30)
    if run.returncode != 0:
        raise SystemExit(f"torchmonctl {' '.join(argv)}: {run.returncode}: {run.stderr}")
    return json.loads(run.stdout)


def windows(args, stat):
    return ctl(args, "windows", stat)["windows"]


def settled(args, stat, accepted, timeout=15.0):
    """The stat's closed windows, once they hold `accepted` samples."""
    deadline = time.monotonic() + timeout
    while True:
        ws = windows(args, stat)
        got = sum(w["accepted"] for w in ws)
        if got >= accepted or time.monotonic() > deadline:
            return ws
        time.sleep(0.2)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctl", required=True)
    ap.add_argument("--target", required=True)
    ap.add_argument("--blocks", type=int, default=20, help="blocks of steps, half instrumented")
    ap.add_argument("--block-steps", type=int, default=100)
    ap.add_argument("--tight-adds", type=int, default=1_000_000)
    ap.add_argument("--summary", required=True)
    ap.add_argument("--width", type=int, default=4096, help="hidden layers' width")
    ap.add_argument("--device", default="cuda", help="cpu: a dry run of the check itself")
    args = ap.parse_args()

    assert args.device == "cpu" or torch.cuda.is_available(), "no CUDA device"
    dev = torch.device(args.device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(1024, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
        torch.nn.Linear(args.width, 10)).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device=dev)
    y = torch.randint(0, 10, (512,), device=dev)

    client = torchmon.Client(target=args.target, labels={"check": "cuda_loop"})
    loss_stat = torchmon.Stat("gpu.loss", (A.MEAN, A.COUNT, A.SUM, A.MAX, A.MIN), SECOND,
                              client=client)
    step_stat = torchmon.Stat("gpu.step_index", (A.COUNT, A.SUM), SECOND, client=client)
    time_stat = torchmon.Stat("gpu.step_time_seconds", (A.MEAN, A.COUNT, A.MAX), SECOND,
                              client=client, histogram=True)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # synchronizes: the step's time is the GPU's

    for _ in range(50):
        step()

    losses, indices, step_times = [], [], []
    plain_steps, instrumented_steps, add_ns = [], [], []
    index = 0
    for block in range(args.blocks):
        instrumented = block % 2 == 1
        for _ in range(args.block_steps):
            t0 = time.perf_counter()
            loss = step()
            dt = time.perf_counter() - t0
            if instrumented:
                a0 = time.perf_counter_ns()
                loss_stat.add(loss)
                step_stat.add(index)
                time_stat.add(dt)
                add_ns.append((time.perf_counter_ns() - a0) / 3)
                losses.append(loss)
                indices.append(index)
                step_times.append(dt)
                instrumented_steps.append(time.perf_counter() - t0)
            else:
                plain_steps.append(time.perf_counter() - t0)
            index += 1

    tight = torchmon.Stat("gpu.tight", (A.SUM, A.COUNT), SECOND, client=client)
    t0 = time.perf_counter_ns()
    for _ in range(args.tight_adds):
        tight.add(1.0)
    tight_ns = (time.perf_counter_ns() - t0) / args.tight_adds

    assert client.flush(30), "flush timed out"
    n = len(indices)
    result = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else "none",
        "torchmon": torchmon.__version__,
        "instrumented_steps": n,
        "step_ms_median_plain": statistics.median(plain_steps) * 1e3,
        "step_ms_median_instrumented": statistics.median(instrumented_steps) * 1e3,
        "add_ns_median_in_loop": statistics.median(add_ns),
        "add_ns_p99_in_loop": sorted(add_ns)[int(0.99 * len(add_ns))],
        "add_ns_tight_loop": tight_ns,
        "client_stats": client.stats(),
        "client_errors": client.errors(),
    }
    result["step_time_ratio"] = (result["step_ms_median_instrumented"]
                                 / result["step_ms_median_plain"])

    failures = []

    def check(what, ok):
        (result.setdefault("checks", {}))[what] = bool(ok)
        if not ok:
            failures.append(what)

    ws = settled(args, "gpu.step_index", n)
    check("step_index count exact", sum(w["aggregates"]["count"] for w in ws) == n)
    check("step_index sum exact", sum(w["aggregates"]["sum"] for w in ws) == sum(indices))
    check("step_index accepted exact", sum(w["accepted"] for w in ws) == n)

    ws = settled(args, "gpu.loss", n)
    check("loss count exact", sum(w["aggregates"]["count"] for w in ws) == n)
    check("loss max exact", max(w["aggregates"]["max"] for w in ws) == max(losses))
    check("loss min exact", min(w["aggregates"]["min"] for w in ws) == min(losses))
    total = sum(w["aggregates"]["sum"] for w in ws)
    check("loss sum", math.isclose(total, math.fsum(losses), rel_tol=1e-12))
    for w in ws:
        a = w["aggregates"]
        check(f"loss mean = sum/count in window {w['start_ms']}",
              math.isclose(a["mean"], a["sum"] / a["count"], rel_tol=1e-15))

    ws = settled(args, "gpu.step_time_seconds", n)
    check("step_time count exact", sum(w["aggregates"]["count"] for w in ws) == n)
    check("step_time max exact", max(w["aggregates"]["max"] for w in ws) == max(step_times))

    ws = settled(args, "gpu.tight", args.tight_adds)
    check("tight count exact", sum(w["aggregates"]["count"] for w in ws) == args.tight_adds)
    check("tight sum exact", sum(w["aggregates"]["sum"] for w in ws) == args.tight_adds)

    series = ctl(args, "series", "--stat", "gpu.*")["series"]
    for s in series:
        c = s["counters"]
        check(f"{s['stat']}: nothing late, skewed or dropped",
              c["late"] == 0 and c["skewed"] == 0 and c["client_dropped"] == 0)
    check("client reported no errors", client.errors() == [])
    result["series"] = [{"stat": s["stat"], "counters": s["counters"]} for s in series]
    result["failures"] = failures

    with open(args.summary, "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    client.close(10)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

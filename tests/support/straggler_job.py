#!/usr/bin/env python3
"""A synchronous data-parallel training job on gloo, one process per rank,
whose ranks can be made slow while it runs: the job of the straggler tests
(tests/python/test_stragglers.py) and of tests/bench/straggler_detection.py.

    python straggler_job.py --kind ddp|fsdp|plain --world 3 --seconds 60 \\
        --control FILE [--init tcp://127.0.0.1:PORT]

Spawns `--world` ranks (RANK, WORLD_SIZE and LOCAL_RANK in each one's
environment, as torchrun sets them) that train a small MLP for `--seconds`:
- ddp: DistributedDataParallel;
- fsdp: FullyShardedDataParallel (FSDP1: torch 2.6's fully_shard cannot
  run on CPU, docs/torch-metrics.md);
- plain: gradients averaged by the job itself with dist.all_reduce.
Nothing in the job knows torchmon: it is measured by the
TORCHMON_TORCH_METRICS switch in its environment, if set.

A rank is slow while the control file names it: every step, it reads the
file's modification time (a stat(2), microseconds) and, when that changed,
the file ("RANK FACTOR", empty for none, or "stop" to end the job at the
next check, before --seconds). A slow rank does extra matrix
products after its backward, sized at start to take FACTOR - 1 times its
own compute (forward and backward). Each rank prints one JSON line per
change it applied: {"rank", "step", "slow", "time"}.
"""

import argparse
import json
import os
import sys
import time


def parse_args(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=("ddp", "fsdp", "plain"), required=True)
    parser.add_argument("--world", type=int, default=3)
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--init", default=None, help="init_method (default: a free port)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--batch", type=int, default=64)
    return parser.parse_args(argv)


def read_control(path, last):
    """(mtime, (rank, factor) or None) if the file changed since `last`."""
    try:
        mtime = os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return last, None, False
    if mtime == last:
        return last, None, False
    with open(path) as f:
        words = f.read().split()
    if words == ["stop"]:
        return mtime, "stop", True
    slow = (int(words[0]), float(words[1])) if len(words) == 2 else None
    return mtime, slow, True


def rank_main(rank, args):
    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=args.init, rank=rank, world_size=args.world)
    torch.manual_seed(rank)
    width = args.width
    model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                          nn.Linear(width, width))
    if args.kind == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    elif args.kind == "fsdp":
        from torch.distributed.fsdp import FullyShardedDataParallel
        model = FullyShardedDataParallel(model, device_id=torch.device("cpu"))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(args.batch, width)
    spare = torch.randn(width, width)

    def compute():
        loss = model(x).square().mean()
        loss.backward()

    def average_gradients():
        if args.kind == "plain":
            for p in model.parameters():
                dist.all_reduce(p.grad)
                p.grad /= args.world

    # The time of this rank's own compute, alone: what a slow rank adds to.
    for _ in range(3):
        compute()
        optimizer.zero_grad()
    started = time.perf_counter()
    for _ in range(5):
        compute()
        optimizer.zero_grad()
    own = (time.perf_counter() - started) / 5
    started = time.perf_counter()
    for _ in range(20):
        torch.mm(x, spare)
    product = (time.perf_counter() - started) / 20

    dist.barrier()
    end = time.monotonic() + args.seconds
    extra, mtime, step, stop = 0, None, 0, False
    while True:
        step += 1
        mtime, slow, changed = read_control(args.control, mtime)
        if slow == "stop":
            stop, slow = True, None
        if changed:
            extra = round((slow[1] - 1) * own / product) if slow and slow[0] == rank else 0
            print(json.dumps({"rank": rank, "step": step, "slow": extra > 0,
                              "time": time.time()}), flush=True)
        compute()
        for _ in range(extra):
            torch.mm(x, spare)
        average_gradients()
        optimizer.step()
        optimizer.zero_grad()
        # Every rank stops at the same step: rank 0's clock decides.
        done = torch.tensor([1.0 if stop or time.monotonic() >= end else 0.0])
        if step % 16 == 0:
            dist.broadcast(done, 0)
            if done.item():
                break
    dist.destroy_process_group()
    try:
        import torchmon, torchmon.torch
        if "torchmon._torch_metrics" in sys.modules:
            torchmon.flush(10)
            print(json.dumps({"rank": rank, "steps": step,
                              "metrics": torchmon.torch.metrics_status()}), flush=True)
    except ImportError:
        pass


def main():
    args = parse_args()
    if args.init is None:
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.init = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    if "RANK" in os.environ:
        rank_main(int(os.environ["RANK"]), args)
        return
    import subprocess
    children = []
    for rank in range(args.world):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.world),
                   USE_LIBUV="0")
        children.append(subprocess.Popen([sys.executable, os.path.abspath(__file__),
                                          *sys.argv[1:], "--init", args.init], env=env))
    codes = [c.wait() for c in children]
    sys.exit(max(codes, key=abs))


if __name__ == "__main__":
    main()

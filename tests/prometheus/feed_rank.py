"""One fake training rank: sends constant, exactly representable values so
every number Prometheus computes from them is known in advance.

    feed_rank.py TARGET HOST RANK LOCAL_RANK STEP_TIME_MS LOSS SECONDS
                 --eval-step-times V,V,... --release-file PATH
                 [--capped] [--nan-eval-loss]

Also defines eval.step_time_ms (with quantiles, hence a native histogram) at
start, and sends the given values to it once, as soon as PATH exists.

Also sends, as constants, the series torchmon.torch.enable_metrics() makes of
PyTorch's own metrics (client/python/torchmon/_torch_metrics.py: same names,
aggregations and labels, in this file's 1 s windows), so that the dashboard's
"PyTorch's own metrics" panels have data; PyTorch itself is tested in
tests/python. Without their native histograms, which no panel reads: the
quantile rules' test expects those of the stats above only.

Runs for SECONDS at most (then flushes and exits), so a test that dies
leaves nothing behind for long."""

import argparse
import datetime
import os
import sys
import time

import torchmon

WINDOW = datetime.timedelta(seconds=1)
PERIOD_S = 0.05


def torch_metrics(client):
    """(Stat, value) of the series enable_metrics() reports (out-of-memory ones
    aside), values exact in binary."""
    M = torchmon.Aggregation

    def stat(name, aggregations, value, labels=None):
        return (torchmon.Stat(name, aggregations, WINDOW, labels=labels, client=client), value)

    ddp = [M.VALUE, M.MEAN, M.MAX]
    wait_counter = "pytorch.wait_counter.TCPStore__get"
    cuda = {"device": "0"}
    return [
        stat("torch.ddp.forward_compute_s", ddp, 0.25),
        stat("torch.ddp.backward_compute_s", ddp, 0.5),
        stat("torch.ddp.backward_comm_s", ddp, 0.125),
        stat("torch.ddp.backward_overlap_s", ddp, 0.0625),
        # The straggler split, alike on every rank: no straggler.
        stat("torch.dist.compute_s", [M.COUNT, M.MEAN, M.SUM], 0.09375),
        stat("torch.dist.wait_s", [M.COUNT, M.MEAN, M.SUM], 0.03125),
        stat("torch.optim.step_interval_s", [M.COUNT, M.MEAN, M.MAX], 0.125,
             {"optimizer": "SGD"}),
        stat("torch.compile.time_s", [M.COUNT, M.SUM, M.MAX], 1.5),
        stat("torch.compile.graph_breaks", [M.SUM], 1.0),
        stat("torch.compile.failures", [M.SUM], 0.0),
        stat("torch.compile.guards", [M.MEAN, M.MAX], 12.0),
        stat(wait_counter + ".wait_s", [M.COUNT, M.SUM, M.MAX], 0.0078125),
        stat(wait_counter + ".active", [M.VALUE, M.MAX], 1.0),
        stat("torch.cuda.memory.allocated_bytes", [M.VALUE, M.MAX], 2.0 ** 30, cuda),
        stat("torch.cuda.memory.reserved_bytes", [M.VALUE, M.MAX], 2.0 ** 31, cuda),
        stat("torch.cuda.memory.peak_allocated_bytes", [M.VALUE, M.MAX], 2.0 ** 30, cuda),
    ]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("host")
    p.add_argument("rank")
    p.add_argument("local_rank")
    p.add_argument("step_time_ms", type=float)
    p.add_argument("loss", type=float)
    p.add_argument("seconds", type=float)
    p.add_argument("--eval-step-times", required=True,
                   type=lambda text: [float(v) for v in text.split(",")],
                   help="the samples of eval.step_time_ms, sent once PATH exists")
    p.add_argument("--release-file", required=True, metavar="PATH")
    p.add_argument("--capped", action="store_true",
                   help="also send data.capped with max_samples=1 (drops counted as capped) "
                        "and an epoch_end event")
    p.add_argument("--nan-eval-loss", action="store_true", help="also send eval.loss = NaN")
    args = p.parse_args()

    client = torchmon.Client(
        target=args.target, labels_from_environment=False,
        labels={"job": "promtest", "host": args.host, "rank": args.rank,
                "local_rank": args.local_rank})
    M = torchmon.Aggregation
    stats = [
        # p50 and p99 give it a native histogram (the dashboard's job-wide
        # quantile panel reads it).
        (torchmon.Stat("train.step_time_ms", [M.MEAN, M.MAX, M.MIN, "p50", "p99"], WINDOW,
                       client=client),
         args.step_time_ms),
        (torchmon.Stat("train.loss", [M.MEAN, M.VALUE], WINDOW, client=client), args.loss),
    ]
    stats += torch_metrics(client)
    if args.capped:
        stats.append((torchmon.Stat("data.capped", [M.MEAN], WINDOW, 1, client=client), 1.0))
    if args.nan_eval_loss:
        stats.append((torchmon.Stat("eval.loss", [M.MEAN, M.MAX], WINDOW, client=client),
                      float("nan")))

    # Defined now, so its empty histogram is scraped before any sample.
    eval_step = torchmon.Stat("eval.step_time_ms", [M.MEAN, "p50", "p99"], WINDOW,
                              client=client)
    eval_sent = False

    if args.capped:
        client.log_event(torchmon.Event("epoch_end", datetime.datetime.now(),
                                        {"epoch": 3, "loss": 0.5, "ok": True, "device": "cpu"}))

    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        for stat, value in stats:
            stat.add(value)
        if not eval_sent and os.path.exists(args.release_file):
            for value in args.eval_step_times:
                eval_step.add(value)
            eval_sent = True
            if not client.flush(5):  # the tests would wait for them in vain
                sys.exit("eval.step_time_ms samples not delivered within 5 s")
        time.sleep(PERIOD_S)
    client.flush(5)


if __name__ == "__main__":
    main()

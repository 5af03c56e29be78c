"""One fake training rank: sends constant, exactly representable values so
every number Prometheus computes from them is known in advance.

    feed_rank.py TARGET HOST RANK LOCAL_RANK STEP_TIME_MS LOSS SECONDS [--capped] [--nan-eval-loss]

Runs for SECONDS at most (then flushes and exits), so a test that dies
leaves nothing behind for long."""

import argparse
import datetime
import time

import torchmon

WINDOW = datetime.timedelta(seconds=1)
PERIOD_S = 0.05


def main():
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("host")
    p.add_argument("rank")
    p.add_argument("local_rank")
    p.add_argument("step_time_ms", type=float)
    p.add_argument("loss", type=float)
    p.add_argument("seconds", type=float)
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
        (torchmon.Stat("train.step_time_ms", [M.MEAN, M.MAX, M.MIN], WINDOW, client=client),
         args.step_time_ms),
        (torchmon.Stat("train.loss", [M.MEAN, M.VALUE], WINDOW, client=client), args.loss),
    ]
    if args.capped:
        stats.append((torchmon.Stat("data.capped", [M.MEAN], WINDOW, 1, client=client), 1.0))
    if args.nan_eval_loss:
        stats.append((torchmon.Stat("eval.loss", [M.MEAN, M.MAX], WINDOW, client=client),
                      float("nan")))

    if args.capped:
        client.log_event(torchmon.Event("epoch_end", datetime.datetime.now(),
                                        {"epoch": 3, "loss": 0.5, "ok": True, "device": "cpu"}))

    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        for stat, value in stats:
            stat.add(value)
        time.sleep(PERIOD_S)
    client.flush(5)


if __name__ == "__main__":
    main()

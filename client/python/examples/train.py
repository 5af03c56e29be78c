#!/usr/bin/env python3
"""A small PyTorch training loop instrumented with torchmon.

Trains an MLP on synthetic regression data (nothing is downloaded) and
records, through torchmon, what one watches on a real job: loss, step time,
gradient norm, learning rate and throughput, plus an `epoch_end` event.
Runs on CUDA when available, else on CPU.

    TORCHMON_TARGET=unix:///run/torchmon/torchmond.sock python3 train.py --epochs 3

With torchrun, each rank's stats carry its `rank`/`local_rank` labels.
"""

import argparse
import datetime
import time

import torch
from torch import nn

import torchmon as monitor


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--window-ms", type=int, default=1000, help="torchmon window size")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = torch.device(args.device)
    features, hidden = 64, 256
    true_weights = torch.randn(features, 1, device=device)
    model = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden),
                          nn.ReLU(), nn.Linear(hidden, 1)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.epochs * args.steps_per_epoch)
    loss_fn = nn.MSELoss()

    window = datetime.timedelta(milliseconds=args.window_ms)
    M = monitor.Aggregation
    loss_stat = monitor.Stat("train.loss", [M.MEAN, M.MIN, M.MAX, M.VALUE], window)
    step_time = monitor.Stat("train.step_time_ms", [M.MEAN, M.MAX, M.COUNT], window)
    grad_norm = monitor.Stat("train.grad_norm", [M.MEAN, M.MAX], window)
    lr_stat = monitor.Stat("train.lr", [M.VALUE], window)
    throughput = monitor.Stat("train.samples_per_second", [M.MEAN], window)

    for epoch in range(args.epochs):
        epoch_loss = 0.0
        for _ in range(args.steps_per_epoch):
            start = time.perf_counter()
            x = torch.randn(args.batch_size, features, device=device)
            y = x @ true_weights + 0.1 * torch.randn(args.batch_size, 1, device=device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm=10.0)
            optimizer.step()
            scheduler.step()
            loss_value = loss.item()  # synchronises with the device, so the timing is real
            elapsed = time.perf_counter() - start

            loss_stat.add(loss_value)
            step_time.add(elapsed * 1000.0)
            grad_norm.add(float(norm))
            lr_stat.add(scheduler.get_last_lr()[0])
            throughput.add(args.batch_size / elapsed)
            epoch_loss += loss_value

        mean_loss = epoch_loss / args.steps_per_epoch
        monitor.log_event(monitor.Event("epoch_end", datetime.datetime.now(),
                                        {"epoch": epoch, "loss": mean_loss,
                                         "device": device.type}))
        print(f"epoch {epoch}: loss {mean_loss:.4f} on {device}")

    if not monitor.flush(10):
        print("torchmon: could not deliver every sample to the daemon in time")


if __name__ == "__main__":
    main()

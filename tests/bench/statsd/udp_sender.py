#!/usr/bin/env python3
"""Paced StatsD timer sender for tests/bench/statsd_compare.sh.

Sends exactly round(rate * duration) timer samples ("name:value|ms" lines)
to a StatsD over UDP, the way StatsD clients batch them: many lines per
datagram, up to --payload bytes. One forked process per rank; rank r owns
the stats "torchmon.r<r>.s<j>" (j < --stats), the same series layout as
torchmon-loadgen (one series per rank and stat). Lines go round-robin over
the rank's stats.

Every line has the same length, so a datagram holds a fixed number of lines
and the last one is cut to hit the sample count exactly. Datagrams are
prebuilt (a cycle of distinct values) so that the sender costs as little CPU
as possible; pacing is against an absolute schedule (sample i of a rank is
due at start + i / rank_rate), so a late sender catches up instead of
drifting.

Prints one JSON object: sent (lines handed to the kernel), send_errors
(lines whose sendto failed: they count as lost), produce_seconds (start to
the last datagram of the slowest rank) and achieved_rate.
"""

import argparse
import json
import os
import socket
import sys
import time

CYCLE_PACKETS = 64


def build_packets(rank, stats, payload):
    # Fixed-width fields: "torchmon.r0001.s0007:123.456|ms".
    def line(i):
        value = (i * 7919) % 1000000 / 1000.0
        return b"torchmon.r%04d.s%04d:%07.3f|ms" % (rank, i % stats, value)

    width = len(line(0)) + 1  # with its "\n"
    per_packet = max(1, payload // width)
    packets = []
    i = 0
    for _ in range(CYCLE_PACKETS):
        lines = [line(i + k) for k in range(per_packet)]
        i += per_packet
        packets.append(b"\n".join(lines) + b"\n")
    return packets, per_packet, width


def run_rank(args, rank, count, start_at):
    packets, per_packet, width = build_packets(rank, args.stats, args.payload)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.connect((args.host, args.port))
    rank_rate = count / args.duration if count else 1.0
    sent = 0
    errors = 0
    k = 0
    now = time.monotonic()
    if start_at > now:
        time.sleep(start_at - now)
    mono = time.monotonic
    send = sock.send
    while sent < count:
        due = start_at + sent / rank_rate
        now = mono()
        if now < due:
            # Sleep only when well ahead; short sleeps overshoot.
            if due - now > 0.0003:
                time.sleep(due - now)
            continue
        n = count - sent
        if n >= per_packet:
            n = per_packet
            data = packets[k % CYCLE_PACKETS]
        else:
            data = packets[k % CYCLE_PACKETS][: n * width]
        try:
            send(data)
        except OSError:
            errors += n
        sent += n
        k += 1
    return {"sent": sent - errors, "send_errors": errors,
            "produce_seconds": mono() - start_at, "lines_per_packet": per_packet}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--ranks", type=int, default=1)
    p.add_argument("--stats", type=int, default=10, help="stats per rank")
    p.add_argument("--rate", type=float, required=True, help="samples/s over all ranks")
    p.add_argument("--duration", type=float, required=True, help="seconds")
    p.add_argument("--payload", type=int, default=1400, help="max datagram payload bytes")
    args = p.parse_args()

    total = int(round(args.rate * args.duration))
    counts = [total // args.ranks + (1 if r < total % args.ranks else 0)
              for r in range(args.ranks)]
    start_at = time.monotonic() + 0.2
    children = []
    for r in range(args.ranks):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            try:
                result = run_rank(args, r, counts[r], start_at)
                os.write(wfd, json.dumps(result).encode())
            finally:
                os._exit(0)
        os.close(wfd)
        children.append((pid, rfd))
    results = []
    for pid, rfd in children:
        chunks = []
        while True:
            b = os.read(rfd, 65536)
            if not b:
                break
            chunks.append(b)
        os.close(rfd)
        os.waitpid(pid, 0)
        if not chunks:
            print(json.dumps({"error": "rank %d produced no result" % pid}))
            return 1
        results.append(json.loads(b"".join(chunks)))
    sent = sum(r["sent"] for r in results)
    errors = sum(r["send_errors"] for r in results)
    seconds = max(r["produce_seconds"] for r in results)
    print(json.dumps({
        "offered": total, "sent": sent, "send_errors": errors,
        "produce_seconds": round(seconds, 4),
        "achieved_rate": round((sent + errors) / seconds, 1) if seconds > 0 else 0.0,
        "lines_per_packet": results[0]["lines_per_packet"],
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())

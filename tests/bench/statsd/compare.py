#!/usr/bin/env python3
"""Side-by-side zero-loss search: torchmond (via torchmon-loadgen) vs Etsy StatsD.

Driven by tests/bench/statsd_compare.sh, which installs StatsD and passes
--statsd-dir. For each system the offered rate climbs a common ladder
(base * 2^k samples/s, every step --duration long, a fresh daemon per step)
until a step loses samples; --bisect geometric halvings of the last
(good, bad) interval follow. The highest zero-loss rate is the highest
offered rate whose step lost nothing. --repeats whole searches run
alternately (StatsD, then torchmond) and the medians are compared.

Zero loss:
  StatsD    every line sent was counted: the sum over all flushes (including
            the final one on SIGTERM, sent after the socket's receive queue
            drained) of statsd.metrics_received and of the timers' counts
            equals the lines sent; no bad lines, no send errors.
  torchmond loadgen exits 0 (accounting exact), accepted == sent, and
            client_dropped == capped == late == skewed == 0.
  both      the producer kept the pace: achieved rate >= 95% of offered.
"""

import argparse
import json
import math
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PACE_FRACTION = 0.95


class Deadline(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port(kind):
    s = socket.socket(socket.AF_INET, kind)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def udp_socket_state(port):
    """(rx_queue_bytes, drops) of the UDP socket bound to 127.0.0.1:port, or None."""
    want = "0100007F:%04X" % port
    try:
        with open("/proc/net/udp") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[1] == want:
                    rx = int(fields[4].split(":")[1], 16)
                    return rx, int(fields[-1])
    except OSError:
        pass
    return None


def terminate(proc, grace=10.0):
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


LIVE = []  # processes to end if we are interrupted


def on_signal(signum, _frame):
    for p in LIVE:
        if p.poll() is None:
            p.kill()
    sys.exit(128 + signum)


def check_budget(args, deadline):
    # A step normally takes duration + ~1 s; the hard per-step timeouts are
    # larger, so the whole run can overrun --budget only if a step hangs.
    if time.monotonic() + args.duration * 1.5 + 5 > deadline:
        raise Deadline()


# ---------------------------------------------------------------- StatsD ---

FLUSH_HEADER = "Flushing stats at"
RE_METRICS = re.compile(r"'statsd\.metrics_received': (\d+)")
RE_BAD = re.compile(r"'statsd\.bad_lines_seen': (\d+)")
RE_TIMER_COUNT = re.compile(r"^\s+count: (\d+),?$", re.M)


def parse_statsd_log(text):
    """Sums over flushes: metrics_received, bad_lines_seen, timers' counts."""
    received = bad = timer_count = flushes = 0
    for block in text.split(FLUSH_HEADER)[1:]:
        flushes += 1
        # counters: {...} comes before counter_rates: take the first match.
        m = RE_METRICS.search(block)
        if m:
            received += int(m.group(1))
        m = RE_BAD.search(block)
        if m:
            bad += int(m.group(1))
        td = block.find("timer_data:")
        if td >= 0:
            end = block.find("counter_rates:", td)
            timer_count += sum(int(c) for c in RE_TIMER_COUNT.findall(block[td:end]))
    return received, bad, timer_count, flushes


def statsd_step(args, rate, workdir, deadline):
    udp = free_port(socket.SOCK_DGRAM)
    mgmt = free_port(socket.SOCK_STREAM)
    env = dict(os.environ, STATSD_BENCH_UDP_PORT=str(udp), STATSD_BENCH_MGMT_PORT=str(mgmt),
               STATSD_BENCH_FLUSH_MS=str(args.flush_ms))
    logpath = os.path.join(workdir, "statsd-%d.log" % udp)
    pkg = os.path.join(args.statsd_dir, "node_modules", "statsd")
    result = {"system": "statsd", "rate": rate}
    with open(logpath, "w") as out:
        proc = subprocess.Popen(["node", os.path.join(pkg, "stats.js"),
                                 os.path.join(HERE, "config.js")],
                                cwd=pkg, env=env, stdout=out, stderr=subprocess.STDOUT)
    LIVE.append(proc)
    try:
        t = time.monotonic()
        while udp_socket_state(udp) is None:
            if proc.poll() is not None or time.monotonic() - t > 15:
                raise RuntimeError("StatsD did not bind UDP 127.0.0.1:%d (see %s)" % (udp, logpath))
            time.sleep(0.05)
        time.sleep(0.2)
        timeout = args.duration * 3 + 30
        check_budget(args, deadline)
        sender = subprocess.run(
            [sys.executable, os.path.join(HERE, "udp_sender.py"), "--port", str(udp),
             "--ranks", str(args.ranks), "--stats", str(args.stats), "--rate", repr(rate),
             "--duration", repr(args.duration)],
            capture_output=True, text=True, timeout=timeout)
        if sender.returncode != 0:
            raise RuntimeError("udp_sender failed: " + sender.stderr + sender.stdout)
        s = json.loads(sender.stdout)
        # Let StatsD read everything already queued on its socket, then stop it:
        # its SIGTERM handler flushes what it holds (the console backend prints
        # synchronously), so every line it read is in the log.
        t = time.monotonic()
        quiet = 0
        drops = None
        while time.monotonic() - t < 30 and quiet < 4:
            st = udp_socket_state(udp)
            if st is None:
                break
            drops = st[1]
            quiet = quiet + 1 if st[0] == 0 else 0
            time.sleep(0.05)
        terminate(proc)
    finally:
        terminate(proc)
        LIVE.remove(proc)
    with open(logpath) as f:
        received, bad, timer_count, flushes = parse_statsd_log(f.read())
    if not args.keep_logs:
        os.unlink(logpath)
    sent = s["sent"] + s["send_errors"]
    result.update({
        "sent": sent, "received": received, "timer_count": timer_count, "bad_lines": bad,
        "send_errors": s["send_errors"], "kernel_drops": drops, "flushes": flushes,
        "achieved_rate": s["achieved_rate"], "lost": sent - received,
    })
    result["ok"] = (received == sent and timer_count == sent and bad == 0
                    and s["send_errors"] == 0 and s["achieved_rate"] >= PACE_FRACTION * rate)
    return result


# ------------------------------------------------------------- torchmond ---

def torchmon_step(args, rate, workdir, deadline):
    duration_ms = int(round(args.duration * 1000))
    cmd = [args.loadgen, "--spawn-daemon", args.torchmond, "--ranks", str(args.ranks),
           "--stats", str(args.stats), "--rate", repr(rate), "--duration", "%dms" % duration_ms,
           "--aggs", args.aggs, "--json"]
    if args.processes:
        cmd.append("--processes")
    timeout = args.duration * 3 + 60
    check_budget(args, deadline)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=workdir)
    LIVE.append(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    finally:
        LIVE.remove(proc)
    result = {"system": "torchmond", "rate": rate, "exit": proc.returncode}
    try:
        j = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        result.update({"ok": False, "error": "no JSON from loadgen (exit %s): %s"
                       % (proc.returncode, (err or out)[-500:])})
        return result
    sent = j["sent"]
    dropped = j["client_dropped"] + j["capped"] + j["late"] + j["skewed"]
    achieved = j["sent_per_second"] or 0.0
    result.update({
        "sent": sent, "received": j["accepted"], "client_dropped": j["client_dropped"],
        "client_dropped_by_clients": j["client_dropped_by_clients"], "capped": j["capped"],
        "late": j["late"], "skewed": j["skewed"], "exact": j["exact"],
        "achieved_rate": achieved, "lost": sent - j["accepted"],
        "daemon_cpu_seconds": j.get("daemon_cpu_seconds"),
        "client_cpu_seconds": j.get("client_cpu_seconds"),
    })
    # Samples offered but never produced (a producer that fell behind) are a
    # failure to sustain the rate, so judge against the offered count too.
    expected = rate * args.duration
    result["ok"] = (proc.returncode == 0 and j["exact"] and dropped == 0
                    and j["client_dropped_by_clients"] == 0 and j["accepted"] == sent
                    and sent >= PACE_FRACTION * expected
                    and achieved >= PACE_FRACTION * rate)
    return result


# ---------------------------------------------------------------- search ---

def fmt_rate(r):
    if r >= 1e6:
        return "%.2fM" % (r / 1e6)
    if r >= 1e3:
        return "%.1fk" % (r / 1e3)
    return "%.0f" % r


def describe(res):
    base = "%-9s %9s/s offered: " % (res["system"], fmt_rate(res["rate"]))
    if "error" in res:
        return base + "ERROR " + res["error"]
    s = "sent %d, counted %d, lost %d, achieved %s/s" % (
        res["sent"], res["received"], res["lost"], fmt_rate(res["achieved_rate"]))
    if res["system"] == "statsd":
        s += ", timers %d, bad %d, kernel drops %s" % (
            res["timer_count"], res["bad_lines"], res["kernel_drops"])
    else:
        s += ", client_dropped %d, capped %d, late %d, skewed %d, exit %s" % (
            res["client_dropped"], res["capped"], res["late"], res["skewed"], res["exit"])
    return base + s + ("  -> zero loss" if res["ok"] else "  -> LOSS")


def search(step, args, start_rate, workdir, deadline, steps_log):
    """Highest zero-loss offered rate, or 0 when even the lowest step loses."""
    def run(rate):
        res = step(args, rate, workdir, deadline)
        steps_log.append(res)
        log("  " + describe(res))
        return res["ok"]

    good, bad = None, None
    rate = start_rate
    if run(rate):
        good = rate
        while len(steps_log) < 10000:
            rate *= 2
            if rate > args.max_rate:
                log("  reached --max-rate without loss")
                return good
            if run(rate):
                good = rate
            else:
                bad = rate
                break
    else:
        bad = rate
        while rate / 2 >= args.min_rate:
            rate /= 2
            if run(rate):
                good = rate
                break
            bad = rate
        if good is None:
            return 0.0
    for _ in range(args.bisect):
        mid = math.sqrt(good * bad)
        if run(mid):
            good = mid
        else:
            bad = mid
    return good


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--statsd-dir", required=True, help="folder with node_modules/statsd")
    p.add_argument("--loadgen", required=True)
    p.add_argument("--torchmond", required=True)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--stats", type=int, default=10, help="stats per rank")
    p.add_argument("--duration", type=float, default=3.0, help="seconds per step")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--bisect", type=int, default=2)
    p.add_argument("--statsd-start", type=float, default=25000)
    p.add_argument("--torchmon-start", type=float, default=800000)
    p.add_argument("--min-rate", type=float, default=1000)
    p.add_argument("--max-rate", type=float, default=2e8)
    p.add_argument("--flush-ms", type=int, default=1000)
    p.add_argument("--aggs", default="mean,count,sum,min,max")
    p.add_argument("--processes", action="store_true", help="loadgen ranks as processes")
    p.add_argument("--budget", type=float, default=540, help="seconds for the whole run")
    p.add_argument("--keep-logs", action="store_true")
    p.add_argument("--json-out", help="write every step and the summary here")
    args = p.parse_args()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    deadline = time.monotonic() + args.budget
    workdir = tempfile.mkdtemp(prefix="statsd-compare-")
    steps = []
    best = {"statsd": [], "torchmond": []}
    log("workload: %d ranks x %d stats = %d series, %.1f s per step, timers/aggs %s"
        % (args.ranks, args.stats, args.ranks * args.stats, args.duration, args.aggs))
    try:
        for rep in range(args.repeats):
            for name, step, start in (("statsd", statsd_step, args.statsd_start),
                                      ("torchmond", torchmon_step, args.torchmon_start)):
                log("repeat %d/%d, %s:" % (rep + 1, args.repeats, name))
                # Start each later search one ladder step below the last result.
                if best[name] and best[name][-1] > 0:
                    k = math.floor(math.log2(best[name][-1] / start))
                    start = start * 2 ** max(k - 1, 0)
                best[name].append(search(step, args, start, workdir, deadline, steps))
                log("  => %s highest zero-loss rate: %s samples/s"
                    % (name, fmt_rate(best[name][-1])))
    except Deadline:
        log("time budget (--budget %.0f s) reached: stopping early" % args.budget)
        n = min(len(best["statsd"]), len(best["torchmond"]))
        best = {k: v[:n] for k, v in best.items()}
    finally:
        for f in os.listdir(workdir):
            if args.keep_logs:
                continue
            os.unlink(os.path.join(workdir, f))
        if not args.keep_logs:
            os.rmdir(workdir)
        else:
            log("StatsD logs kept in " + workdir)

    if not best["statsd"]:
        print("no complete repeat within the time budget")
        return 1
    med = {k: statistics.median(v) for k, v in best.items()}
    ratio = med["torchmond"] / med["statsd"] if med["statsd"] > 0 else float("inf")
    per_rep = ["%.1f" % (t / s) if s > 0 else "inf"
               for s, t in zip(best["statsd"], best["torchmond"])]
    print()
    print("Highest zero-loss rate, %d ranks x %d stats, %.1f s steps, %d repeat(s), median:"
          % (args.ranks, args.stats, args.duration, len(best["statsd"])))
    print("  %-30s %14s   %s" % ("system", "samples/s", "per repeat"))
    print("  %-30s %14.0f   %s" % ("Etsy StatsD 0.9.0 (UDP, console)", med["statsd"],
                                   ", ".join(fmt_rate(x) for x in best["statsd"])))
    print("  %-30s %14.0f   %s" % ("torchmond (torchmon-loadgen)", med["torchmond"],
                                   ", ".join(fmt_rate(x) for x in best["torchmond"])))
    print("  %-30s %13.1fx   %s" % ("ratio torchmond / StatsD", ratio, ", ".join(per_rep)))
    print("  target (DESIGN.md): >= 30x -> %s" % ("met" if ratio >= 30 else "NOT met"))
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"steps": steps, "best": best, "median": med, "ratio": ratio,
                       "args": vars(args)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

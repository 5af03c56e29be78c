"""The job-wide view of `torchmonctl ranks`, from Prometheus: which rank of a
job spread over many nodes is slow, and on which host.

    python -m torchmon.cluster ranks [STAT] --prometheus URL [--job J]
        [--agg AGG] [--json]

Each node's torchmond compares the ranks it serves (`torchmonctl ranks`);
Prometheus, scraping every node, holds every rank's newest window. This asks
its HTTP API (`/api/v1/query`) for each rank's value of STAT (default
torch.dist.compute_s, the straggler split of docs/torch-metrics.md) and
aggregation AGG (default mean), groups them by job and the labels the ranks
share, and prints the table `torchmonctl ranks` prints: every rank, largest
first, with its host, node (instance), ratio to the median and straggler
score; the stragglers (score >= 3 and ratio >= 1.2, the thresholds of
rank_comparison.h and the shipped TorchmonStraggler alert); and the ranks
whose newest window trails the job's newest (behind, stalled). Where some
ranks' node is not yet scraped since the newest window closed, every rank
is compared in the window before, which all have.

Standard library only: it runs wherever the wheel is installed. The URL may
be http or https, with a path prefix; HTTP(S)_PROXY and NO_PROXY apply as
urllib applies them. Exit status: 0 with an answer (an empty one says
so), 1 if Prometheus cannot be asked, 2 for a usage error.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

DEFAULT_STAT = "torch.dist.compute_s"
# rank_comparison.h: kMadToSigma, kSpreadFloorOfMedian, kStragglerScore,
# kStragglerRatio; deploy/prometheus/rules/torchmon.rules.yml uses the same.
MAD_TO_SIGMA = 1.4826
SPREAD_FLOOR_OF_MEDIAN = 0.05
STRAGGLER_SCORE = 3.0
STRAGGLER_RATIO = 1.2
# Labels that tell ranks of one group apart, as the daemon's CompareRanks
# leaves out rank, local_rank and host; Prometheus adds instance (the node)
# and the series' own name, stat and aggregation labels.
_NOT_SHARED = {"__name__", "stat", "agg", "rank", "local_rank", "host", "instance"}


class PrometheusError(Exception):
    pass


def _ask(url: str, expr: str, result_type: str, timeout: float) -> List[Dict[str, Any]]:
    endpoint = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(endpoint, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as e:
        detail = e.read().decode(errors="replace")[:500]
        raise PrometheusError(f"{endpoint}: HTTP {e.code}: {detail}") from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise PrometheusError(f"{endpoint}: {e}") from None
    if body.get("status") != "success":
        raise PrometheusError(f"{endpoint}: {body.get('errorType')}: {body.get('error')}")
    data = body["data"]
    if data.get("resultType") != result_type:
        raise PrometheusError(f"{endpoint}: expected a {result_type}, got {data.get('resultType')}")
    return data["result"]


def query(url: str, expr: str, timeout: float = 30.0) -> List[Tuple[Dict[str, str], float]]:
    """The instant vector `expr` as [(labels, value)]."""
    return [(s["metric"], float(s["value"][1])) for s in _ask(url, expr, "vector", timeout)]


def query_range_vector(url: str, expr: str, timeout: float = 30.0
                       ) -> List[Tuple[Dict[str, str], List[Tuple[float, float]]]]:
    """`expr`, a range vector selector, as [(labels, [(time, value)])]: the
    samples Prometheus stored, with their scrape times."""
    return [(s["metric"], [(float(t), float(v)) for t, v in s["values"]])
            for s in _ask(url, expr, "matrix", timeout)]


def _quote(value: str) -> str:
    return json.dumps(value)  # a PromQL string literal is a JSON one for these


def _median(sorted_values: Sequence[float]) -> float:
    n = len(sorted_values)
    return sorted_values[n // 2] if n % 2 else (sorted_values[n // 2 - 1] + sorted_values[n // 2]) / 2


Key = Tuple[Optional[str], Optional[str], Optional[str]]  # (instance, rank, stat)


def _key(labels: Dict[str, str], rank_label: str) -> Key:
    """What names one rank's series of one stat across the queries."""
    return labels.get("instance"), labels.get(rank_label), labels.get("stat")


def compare(values: List[Tuple[Dict[str, str], float]], window_ends: Dict[Key, float],
            rank_label: str = "rank", window_sizes: Optional[Dict[Key, float]] = None,
            earlier: Optional[Callable[[Key, float], Optional[float]]] = None
            ) -> List[Dict[str, Any]]:
    """Groups (labels, value) by stat and shared labels and compares the
    ranks of each group as rank_comparison.cc does, in one window.

    Windows end at the same moments on every node, but Prometheus scrapes
    each node at its own offset: for up to a scrape interval after a window
    closes, some ranks show it and the others the window before. Where a
    group is so split (ranks one window behind its newest, by
    `window_sizes`), each rank's value is its value in the older window,
    `earlier(key, window end)`, where that is known; the group's "split"
    says which ranks the others wait for. Ranks further behind stopped
    reporting: they keep their value and are listed as "behind"."""
    groups: Dict[Tuple, List[Tuple[Dict[str, str], float]]] = {}
    for labels, value in values:
        if rank_label not in labels:
            continue
        shared = tuple(sorted((k, v) for k, v in labels.items()
                              if k not in _NOT_SHARED and k != rank_label))
        groups.setdefault((labels.get("stat", ""), shared), []).append((labels, value))
    sizes = window_sizes or {}
    out = []
    for (stat, shared), members in sorted(groups.items()):
        ends = {_key(labels, rank_label): window_ends.get(_key(labels, rank_label))
                for labels, _ in members}
        known = [e for e in ends.values() if e is not None]
        newest = max(known) if known else None
        # Ranks one window behind the newest: their node's scrape is to come.
        split = sorted({k for k, e in ends.items() if e is not None and e < newest
                        and sizes.get(k) and newest - e < 1.5 * sizes[k]},
                       key=lambda k: _rank_order(k[1]))
        window_end = newest
        if split:
            window_end = min(ends[k] for k in split)
            older = {k: earlier(k, window_end) if earlier else None
                     for k, e in ends.items() if e == newest}
            if all(v is not None for v in older.values()):
                members = [(labels, older.get(_key(labels, rank_label), value))
                           for labels, value in members]
            else:  # not known: compared as scraped, the split ranks listed behind
                split, window_end = [], newest
        numbers = sorted(v for _, v in members if not math.isnan(v))
        c: Dict[str, Any] = {"stat": stat, "labels": dict(shared), "ranks": [], "stragglers": [],
                             "behind": [], "window_end": window_end,
                             "split": [k[1] for k in split]}
        nan = float("nan")
        if numbers:
            c["min"], c["max"], c["median"] = numbers[0], numbers[-1], _median(numbers)
            c["mad"] = _median(sorted(abs(v - c["median"]) for v in numbers))
            spread = max(MAD_TO_SIGMA * c["mad"], SPREAD_FLOOR_OF_MEDIAN * abs(c["median"]))
        else:
            c["min"] = c["max"] = c["median"] = c["mad"] = nan
            spread = 0.0
        for labels, value in members:
            ratio = value / c["median"] if c["median"] else nan
            score = (value - c["median"]) / spread if spread > 0 else nan
            c["ranks"].append({
                "rank": labels[rank_label], "host": labels.get("host", ""),
                "instance": labels.get("instance", ""), "value": value, "ratio": ratio,
                "score": score,
                "straggler": score >= STRAGGLER_SCORE and ratio >= STRAGGLER_RATIO})
        c["ranks"].sort(key=lambda r: (math.isnan(r["value"]), -r["value"]
                                       if not math.isnan(r["value"]) else 0, r["rank"]))
        c["stragglers"] = [r["rank"] for r in c["ranks"] if r["straggler"]]
        c["slowest_rank"] = c["ranks"][0]["rank"] if numbers else ""
        c["max_over_median"] = c["max"] / c["median"] if numbers and c["median"] else nan
        # Ranks whose newest window ended before the window compared (or
        # before the newest, where the group is not split): stopped, or
        # their value is an older window's.
        c["behind"] = sorted((k[1] for k, e in ends.items()
                              if e is not None and e < window_end and k not in split),
                             key=_rank_order)
        out.append(c)
    return out


def earlier_values(url: str, selector: str, ends_selector: str, window_s: float,
                   rank_label: str = "rank") -> Callable[[Key, float], Optional[float]]:
    """earlier((instance, rank, stat), window end): that rank's value of
    `torchmon_stat{selector}` in the window ending then, from the last
    scrape of its node that had it, or None. Asks Prometheus once, on the
    first call, for the samples of the last window and a half (`window_s`,
    the longest window; at least 15 s): a node's scrape of the window before
    its newest is a scrape interval back, at most half a window as shipped."""
    history: Dict[str, Dict[Key, Dict[float, float]]] = {}  # part -> key -> {time: value}

    def earlier(key: Key, window_end: float) -> Optional[float]:
        if not history:
            span = f"[{max(15, math.ceil(1.5 * window_s))}s]"
            for part, name, sel in (("values", "torchmon_stat", selector),
                                    ("ends", "torchmon_window_end_timestamp_seconds",
                                     ends_selector)):
                history[part] = {
                    _key(labels, rank_label): dict(samples)
                    for labels, samples in query_range_vector(url, f"{name}{{{sel}}}{span}")}
        # A scrape's samples share its time: the value scraped with that end.
        at = [t for t, end in history["ends"].get(key, {}).items() if end == window_end]
        return history["values"].get(key, {}).get(max(at)) if at else None
    return earlier


def _rank_order(rank: Optional[str]) -> Tuple[int, str]:
    return (int(rank), "") if rank and rank.isdigit() else (1 << 62, rank or "")


def _number(x: float) -> str:
    if isinstance(x, float) and (math.isnan(x) or math.isinf(x)):
        return str(x).lower()
    return f"{x:.6g}"


def render_table(comparisons: List[Dict[str, Any]], aggregation: str, url: str) -> str:
    if not comparisons:
        return ("no ranks to compare: Prometheus has no matching series with a rank label "
                f"({url})\n")
    parts = []
    for c in comparisons:
        labels = ",".join(f"{k}={v}" for k, v in sorted(c["labels"].items()))
        which = "the window before the newest" if c["split"] else "each rank's newest window"
        lines = [f"{c['stat']} {labels}  {aggregation} of {which}, from {url}"]
        if c["slowest_rank"]:
            lines.append(f"slowest rank {c['slowest_rank']}: {_number(c['max'])}  median "
                         f"{_number(c['median'])}  max/median {_number(c['max_over_median'])}  "
                         f"min {_number(c['min'])}")
        if c["stragglers"]:
            lines.append(f"stragglers: rank{'s' if len(c['stragglers']) > 1 else ''} "
                         + ", ".join(c["stragglers"]))
        if c["split"]:
            lines.append("not yet scraped since the newest window closed: ranks "
                         + ", ".join(c["split"]))
        if c["behind"]:
            lines.append("behind the newest window: ranks " + ", ".join(c["behind"]))
        header = ["RANK", "HOST", aggregation.upper(), "/MEDIAN", "SCORE", "INSTANCE", ""]
        rows = [[r["rank"], r["host"] or "-", _number(r["value"]), _number(r["ratio"]),
                 _number(r["score"]), r["instance"] or "-", "straggler" if r["straggler"] else ""]
                for r in c["ranks"]]
        widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
        right = {2, 3, 4}
        for row in [header] + rows:
            cells = [cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                     for i, cell in enumerate(row)]
            lines.append("  ".join(cells).rstrip())
        parts.append("\n".join(lines) + "\n")
    return "\n".join(parts)


def _json_number(x: float) -> Any:
    return str(x).lower() if math.isnan(x) or math.isinf(x) else x


def render_json(comparisons: List[Dict[str, Any]], aggregation: str) -> str:
    def clean(value: Any) -> Any:
        if isinstance(value, float):
            return _json_number(value)
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        if isinstance(value, list):
            return [clean(v) for v in value]
        return value
    return json.dumps({"comparisons": [dict(clean(c), aggregation=aggregation)
                                       for c in comparisons]}) + "\n"


def ranks(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m torchmon.cluster ranks",
        description="Compare the ranks of a job across every node, from Prometheus.")
    parser.add_argument("stat", nargs="?", default=DEFAULT_STAT,
                        help=f"the stat, exact (default {DEFAULT_STAT})")
    parser.add_argument("--prometheus", required=True, metavar="URL",
                        help="Prometheus' base URL, e.g. http://prometheus:9090")
    parser.add_argument("--job", help="only this training job (the job label)")
    parser.add_argument("--agg", default="mean", help="the aggregation compared (default mean)")
    parser.add_argument("--rank-label", default="rank")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    matchers = [f"stat={_quote(args.stat)}", f"agg={_quote(args.agg)}"]
    if args.job:
        matchers.append(f"job={_quote(args.job)}")
    selector = ", ".join(matchers)
    try:
        values = query(args.prometheus, f"torchmon_stat{{{selector}}}")
        ends_selector = ", ".join(m for m in matchers if not m.startswith("agg="))
        ends, sizes = ({_key(labels, args.rank_label): value
                        for labels, value in query(args.prometheus, f"{name}{{{ends_selector}}}")}
                       for name in ("torchmon_window_end_timestamp_seconds",
                                    "torchmon_window_size_seconds"))
        earlier = earlier_values(args.prometheus, selector, ends_selector,
                                 max(sizes.values(), default=0.0), args.rank_label)
        comparisons = compare(values, ends, args.rank_label, sizes, earlier)
    except PrometheusError as e:
        print(f"torchmon.cluster: cannot ask Prometheus: {e}", file=sys.stderr)
        return 1
    sys.stdout.write(render_json(comparisons, args.agg) if args.json
                     else render_table(comparisons, args.agg, args.prometheus))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1])
        return 0 if argv else 2
    if argv[0] != "ranks":
        print(f"torchmon.cluster: unknown command {argv[0]!r} (the one command: ranks)",
              file=sys.stderr)
        return 2
    return ranks(argv[1:])


if __name__ == "__main__":
    sys.exit(main())

"""A real Prometheus scraping three torchmond nodes fed by four ranks each,
with the scrape config, recording rules and alerts shipped in
deploy/prometheus; promtool on those files and on a live scrape.

Every rank sends constant values chosen to be exact in binary (rank r on
node n: step time 100 + 10 n + r ms, loss 2 - r_global / 8), so every
number Prometheus computes from them is known exactly. Every rank also sends
a known set of eval step times once (prom_cluster.eval_step_times), whose
quantiles, job-wide, per node and per rank, Prometheus computes from the
daemons' native histograms; a second Prometheus without native histograms
scrapes one node through OpenMetrics."""

import collections
import json
import math
import os
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml

import prom_cluster as pc
from torchmon import cluster as tcluster
from prom_cluster import CAPPED, EVAL_STEP, NAN_EVAL_LOSS, NODES, RANKS_PER_NODE
from torchmon_testing import OWN_USER, PYTHON_DIR, wait_for

STEP = 'stat="train.step_time_ms"'
EVAL = f'job="promtest",stat="{EVAL_STEP}"'
# The range of the rate() the quantiles are taken over, as in the rules:
# longer than the whole session (CTest stops it after 180 s), so it reaches
# back to the scrape of the empty histograms and covers every eval sample.
RANGE = "5m"
# histogram_quantile's answer lies in the bucket of the exact quantile, and a
# schema-5 bucket spans a factor 2^(1/32): 2.19 %.
QUANTILE_BOUND = pc.BUCKET_FACTOR - 1
RULES_FILE = os.path.join(pc.DEPLOY_PROMETHEUS, "rules", "torchmon.rules.yml")
ALERTS_FILE = os.path.join(pc.DEPLOY_PROMETHEUS, "rules", "torchmon.alerts.yml")


def recorded_rule_names():
    with open(RULES_FILE) as f:
        rules = yaml.safe_load(f)
    return [r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r]


def by(result, *labels):
    """{(label values...): value}, asserting no two series collide."""
    out = {}
    for metric, value in result:
        key = tuple(metric.get(label) for label in labels)
        assert key not in out, (key, result)
        out[key] = value
    return out


# ---- the shipped files, checked by promtool -------------------------------

def run_promtool(*args, stdin=None):
    return subprocess.run(["promtool", *args], input=stdin, capture_output=True, text=True,
                          timeout=60)


def test_promtool_check_config_on_shipped_config():
    out = run_promtool("check", "config", os.path.join(pc.DEPLOY_PROMETHEUS, "prometheus.yml"))
    assert out.returncode == 0, out.stdout + out.stderr
    # Nothing but the absence of target files (none are shipped) may be warned about.
    warnings = [l for l in (out.stdout + out.stderr).splitlines() if "WARNING" in l]
    assert all("for file_sd in scrape job" in w for w in warnings), warnings
    assert "2 rule files found" in out.stdout, out.stdout


def test_promtool_check_config_is_clean_once_targets_exist(tmp_path):
    config = pc.copy_config(str(tmp_path), ["127.0.0.1:9464"])
    out = run_promtool("check", "config", config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stdout + out.stderr, out.stdout + out.stderr


def test_promtool_check_rules_on_shipped_rules():
    out = run_promtool("check", "rules", RULES_FILE, ALERTS_FILE)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "WARNING" not in out.stdout + out.stderr, out.stdout + out.stderr


def test_promtool_unit_tests_of_rules_and_alerts_pass():
    tests_dir = os.path.join(pc.DEPLOY_PROMETHEUS, "tests")
    files = sorted(os.path.join(tests_dir, f) for f in os.listdir(tests_dir)
                   if f.endswith(".yml"))
    assert files
    out = run_promtool("test", "rules", *files)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_recording_rule_is_unit_tested():
    tests_dir = os.path.join(pc.DEPLOY_PROMETHEUS, "tests")
    text = "".join(open(os.path.join(tests_dir, f)).read() for f in os.listdir(tests_dir))
    # The exceptions: the rules over native histograms, which promtool 2.42
    # cannot feed (deploy/prometheus/tests/torchmon_test.yml says why);
    # test_quantile_recording_rules checks each of them on the live cluster.
    live_only = set(pc.QUANTILE_RULES)
    assert live_only <= set(recorded_rule_names()), live_only - set(recorded_rule_names())
    untested = [n for n in recorded_rule_names()
                if f"expr: {n}\n" not in text and n not in live_only]
    assert not untested, untested


# ---- a live scrape ---------------------------------------------------------

def fetch_metrics(daemon, accept):
    """(Content-Type, body) of the daemon's /metrics asked for with `accept`."""
    request = urllib.request.Request(f"http://{daemon.metrics}/metrics",
                                     headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=5) as r:
        return r.headers["Content-Type"], r.read().decode()


def test_promtool_check_metrics_on_a_live_scrape_is_clean(cluster):
    content_type, scrape = fetch_metrics(cluster.daemons[CAPPED[0]], "text/plain;version=0.0.4")
    assert content_type.startswith("text/plain; version=0.0.4"), content_type
    assert 'torchmon_stat{stat="data.capped"' in scrape  # a daemon holding series
    # The native histograms, as the text format carries them.
    assert "# TYPE torchmon_stat_distribution histogram" in scrape
    assert f'torchmon_stat_distribution_count{{stat="{EVAL_STEP}"' in scrape
    assert 'reason="capped"' in scrape
    assert 'torchmon_events_total{event="epoch_end"' in scrape
    assert 'torchmon_event_value{event="epoch_end",field="epoch"' in scrape
    out = run_promtool("check", "metrics", stdin=scrape)
    # promtool exits non-zero on errors and prints lint problems (e.g.
    # counter naming) even when it exits 0: there must be none.
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "" and out.stderr.strip() == "", out.stdout + out.stderr


def test_a_live_openmetrics_scrape_passes_a_strict_openmetrics_parser(cluster):
    # promtool 2.42 reads text 0.0.4 only; prometheus_client's OpenMetrics
    # parser (Debian's python3-prometheus-client) enforces the 1.0 rules:
    # counter naming, _created, histogram groups, no NaN or negative _sum,
    # "# EOF" last.
    from prometheus_client.openmetrics.parser import text_string_to_metric_families
    content_type, scrape = fetch_metrics(cluster.daemons[NAN_EVAL_LOSS[0]],
                                         "application/openmetrics-text;version=1.0.0")
    assert content_type == "application/openmetrics-text; version=1.0.0; charset=utf-8"
    families = {f.name: f for f in text_string_to_metric_families(scrape)}
    assert families["torchmon_samples_accepted"].type == "counter"
    assert families["torchmon_stat_distribution"].type == "histogram"
    assert families["torchmon_daemon_scrapes"].type == "counter"
    names = {s.name for s in families["torchmon_samples_accepted"].samples}
    assert names == {"torchmon_samples_accepted_total", "torchmon_samples_accepted_created"}
    # The NaN eval loss is a gauge's NaN, which OpenMetrics allows.
    nan = [s for s in families["torchmon_stat"].samples
           if s.labels["stat"] == "eval.loss" and s.labels["agg"] == "mean" and s.value != s.value]
    assert nan, "the NaN eval.loss window is not in the scrape"


# ---- Prometheus's view -----------------------------------------------------

def test_every_node_is_up_and_is_the_instance_label(cluster):
    up = by(cluster.prometheus.query('up{job="torchmond"}'), "instance")
    assert up == {(i,): 1.0 for i in cluster.instances}
    # The daemons' own metrics carry the scrape job's name.
    series = by(cluster.prometheus.query("torchmon_daemon_series"), "job", "instance")
    assert set(series) == {("torchmond", i) for i in cluster.instances}


def test_per_rank_values_carry_their_rank_host_and_node(cluster):
    q = cluster.prometheus.query
    for agg in ("mean", "max", "min"):
        got = by(q(f'torchmon_stat{{job="promtest",{STEP},agg="{agg}"}}'),
                 "instance", "host", "rank", "local_rank")
        assert got == {
            (cluster.instances[n], pc.host(n), str(pc.global_rank(n, r)), str(r)):
                pc.step_time_ms(n, r)
            for n in range(NODES) for r in range(RANKS_PER_NODE)}, agg
    for agg in ("mean", "value"):
        got = by(q(f'torchmon_stat{{job="promtest",stat="train.loss",agg="{agg}"}}'),
                 "host", "rank")
        assert got == {(pc.host(n), str(pc.global_rank(n, r))): pc.loss(n, r)
                       for n in range(NODES) for r in range(RANKS_PER_NODE)}, agg
    nan = q('torchmon_stat{stat="eval.loss"}')
    assert {(m["host"], m["rank"], m["agg"]) for m, _ in nan} == {
        (pc.host(NAN_EVAL_LOSS[0]), str(pc.global_rank(*NAN_EVAL_LOSS)), a)
        for a in ("mean", "max")}
    assert all(math.isnan(v) for _, v in nan), nan


def test_ad_hoc_cross_rank_queries(cluster):
    q = cluster.prometheus.query
    mean = f'torchmon_stat{{job="promtest",{STEP},agg="mean"}}'
    assert by(q(f"max by (host) ({mean})"), "host") == {
        (pc.host(n),): pc.step_time_ms(n, RANKS_PER_NODE - 1) for n in range(NODES)}
    assert by(q(f"max({mean})"), ) == {(): pc.step_time_ms(NODES - 1, RANKS_PER_NODE - 1)}
    slowest = q(f"topk(1, {mean})")
    assert [(m["host"], m["rank"]) for m, _ in slowest] == [
        (pc.host(NODES - 1), str(pc.global_rank(NODES - 1, RANKS_PER_NODE - 1)))]


def expected_cross_rank(stat_value):
    """Expected values of the cross-rank rules for a stat whose rank (n, r)
    sends stat_value(n, r): {rule: {label tuple: value}}."""
    nodes = {n: [stat_value(n, r) for r in range(RANKS_PER_NODE)] for n in range(NODES)}
    every = [v for vs in nodes.values() for v in vs]
    return {
        "job_instance_stat:torchmon_stat_mean:max": {n: max(v) for n, v in nodes.items()},
        "job_instance_stat:torchmon_stat_mean:min": {n: min(v) for n, v in nodes.items()},
        "job_instance_stat:torchmon_stat_mean:max_over_min":
            {n: max(v) / min(v) for n, v in nodes.items()},
        "job_stat:torchmon_stat_mean:max": max(every),
        "job_stat:torchmon_stat_mean:min": min(every),
        "job_stat:torchmon_stat_mean:median": pc.prom_quantile(0.5, every),
        "job_stat:torchmon_stat_mean:max_over_median":
            max(every) / pc.prom_quantile(0.5, every),
        "job_stat:torchmon_stat_mean:max_over_min": max(every) / min(every),
    }


@pytest.mark.parametrize("stat,value", [("train.step_time_ms", pc.step_time_ms),
                                        ("train.loss", pc.loss)])
def test_cross_rank_recording_rules(cluster, stat, value):
    for rule, want in expected_cross_rank(value).items():
        result = cluster.prometheus.query(f'{rule}{{job="promtest",stat="{stat}"}}')
        if isinstance(want, dict):
            got = by(result, "instance")
            assert got == {(cluster.instances[n],): v for n, v in want.items()}, rule
        else:
            assert by(result) == {(): want}, rule


def test_straggler_rules_on_ranks_alike(cluster):
    """Every rank's straggler split is 0.09375 s (feed_rank.py): the median is
    that, no deviation, every ratio 1 and every score 0, and no alert."""
    ranks = {(pc.host(n), str(pc.global_rank(n, r)))
             for n in range(pc.NODES) for r in range(pc.RANKS_PER_NODE)}
    means = cluster.prometheus.query('job_rank:torchmon_dist_compute_seconds:mean{job="promtest"}')
    assert {(l["host"], l["rank"]): v for l, v in means} == {k: 0.09375 for k in ranks}
    assert by(cluster.prometheus.query(
        'job:torchmon_dist_compute_seconds:median{job="promtest"}')) == {(): 0.09375}
    assert by(cluster.prometheus.query(
        'job:torchmon_dist_compute_seconds:mad{job="promtest"}')) == {(): 0.0}
    for rule, want in (("job_rank:torchmon_straggler:ratio", 1.0),
                       ("job_rank:torchmon_straggler:score", 0.0)):
        got = cluster.prometheus.query(f'{rule}{{job="promtest"}}')
        assert {(l["host"], l["rank"]): v for l, v in got} == {k: want for k in ranks}, rule


def cluster_ranks(cluster, *args):
    """python -m torchmon.cluster ranks ... against the live Prometheus."""
    env = dict(os.environ, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, "-m", "torchmon.cluster", "ranks", *args],
                          capture_output=True, text=True, timeout=60, env=env)


def test_the_job_wide_ranks_table_from_prometheus(cluster):
    """torchmon.cluster compares every rank of the job across the three
    nodes as `torchmonctl ranks` compares one node's: step time 100 + 10n +
    r ms for rank r of node n (feed_rank.py)."""
    address = f"http://{cluster.prometheus.address}"
    out = cluster_ranks(cluster, "train.step_time_ms", "--prometheus", address, "--job",
                        "promtest", "--json")
    assert out.returncode == 0, out.stderr
    [c] = json.loads(out.stdout)["comparisons"]
    values = sorted(pc.step_time_ms(n, r) for n in range(NODES) for r in range(RANKS_PER_NODE))
    median = (values[5] + values[6]) / 2
    mad_values = sorted(abs(v - median) for v in values)
    mad = (mad_values[5] + mad_values[6]) / 2
    assert c["stat"] == "train.step_time_ms" and c["labels"]["job"] == "promtest", c
    assert c["median"] == median and c["mad"] == mad, c
    top = c["ranks"][0]
    slowest = pc.global_rank(NODES - 1, RANKS_PER_NODE - 1)
    assert (top["rank"], top["host"], top["instance"]) == (
        str(slowest), pc.host(NODES - 1), cluster.instances[NODES - 1]), top
    spread = max(1.4826 * mad, 0.05 * median)
    assert abs(top["score"] - (values[-1] - median) / spread) < 1e-9, (top, spread)
    assert [r["value"] for r in c["ranks"]] == values[::-1]
    # Ranks alike to 20 %: no straggler; the table says the same.
    assert c["stragglers"] == [] and not any(r["straggler"] for r in c["ranks"]), c
    table = cluster_ranks(cluster, "train.step_time_ms", "--prometheus", address + "/")
    assert table.returncode == 0, table.stderr
    first = table.stdout.splitlines()[0]
    assert first.startswith("train.step_time_ms job=promtest"), table.stdout
    # The three nodes' scrapes fall at their own moments of the feeds' 1 s
    # windows: between them the job is split, and compared in the window
    # before, which the table says with the ranks not yet scraped.
    split = "\nnot yet scraped since the newest window closed: ranks " in table.stdout
    which = "the window before the newest" if split else "each rank's newest window"
    assert first.endswith(f"  mean of {which}, from {address}/"), table.stdout
    assert f"slowest rank {slowest}: {values[-1]:g}  median {median:g}" in table.stdout, table.stdout
    row = next(line.split() for line in table.stdout.splitlines()
               if line.startswith(f"{slowest} "))
    assert row[1] == pc.host(NODES - 1) and row[-1] == cluster.instances[NODES - 1], row
    # A rank's value in an earlier window, as the view asks Prometheus for
    # it when a scrape splits the job: in its newest, its value now (the
    # feeds are constant); a window it never had, None.
    selector = 'stat="train.step_time_ms", agg="mean", job="promtest"'
    ends = {(m["instance"], m["rank"], m["stat"]): v for m, v in cluster.prometheus.query(
        f'torchmon_window_end_timestamp_seconds{{{STEP},job="promtest"}}')}
    earlier = tcluster.earlier_values(address, selector,
                                      'stat="train.step_time_ms", job="promtest"',
                                      1.0)  # feed_rank.py's windows
    for n in range(NODES):
        for r in range(RANKS_PER_NODE):
            key = (cluster.instances[n], str(pc.global_rank(n, r)), "train.step_time_ms")
            assert earlier(key, ends[key]) == pc.step_time_ms(n, r), key
            assert earlier(key, ends[key] - 3600) is None, key
    # A stat nobody sends: an empty answer that says so; Prometheus away: 1.
    none = cluster_ranks(cluster, "no.such_stat", "--prometheus", address)
    assert none.returncode == 0 and none.stdout.startswith("no ranks to compare"), none
    away = cluster_ranks(cluster, "--prometheus", f"http://127.0.0.1:{pc.free_loopback_port()}")
    assert away.returncode == 1 and "cannot ask Prometheus: http://127.0.0.1:" in away.stderr, away


def _split_job(node_a_before):
    """The straggler split of a job as Prometheus has it just after the
    window ending at 30 s closed: node a (ranks 0 and 1) is scraped since,
    node b (rank 2) not yet; node c's rank 3 stopped after the window
    ending at 10 s. `node_a_before`: node a's means in the window ending at
    20 s, or None where Prometheus no longer has them."""
    def labels(node, rank):
        return {"stat": "torch.dist.compute_s", "agg": "mean", "job": "j", "instance": node,
                "host": node, "rank": str(rank)}
    values = [(labels("a", 0), 0.055), (labels("a", 1), 0.060), (labels("b", 2), 0.064),
              (labels("c", 3), 0.050)]
    ends = {("a", "0", "torch.dist.compute_s"): 30.0, ("a", "1", "torch.dist.compute_s"): 30.0,
            ("b", "2", "torch.dist.compute_s"): 20.0, ("c", "3", "torch.dist.compute_s"): 10.0}
    sizes = {key: 10.0 for key in ends}

    def earlier(key, window_end):
        assert window_end == 20.0, (key, window_end)
        return None if node_a_before is None else node_a_before[key[1]]
    [c] = tcluster.compare(values, ends, "rank", sizes, earlier)
    return c


def test_the_job_wide_view_compares_ranks_in_one_window_across_a_scrape():
    """A straggler (rank 2, 0.064 against 0.046 and 0.044) named in the
    window every rank has, though its node's scrape of the next is to come
    and node a's next window (0.055, 0.060) would hide it; a rank two
    windows behind is not waited for."""
    c = _split_job({"0": 0.046, "1": 0.044})
    assert c["window_end"] == 20.0 and c["split"] == ["2"] and c["behind"] == ["3"], c
    assert {r["rank"]: r["value"] for r in c["ranks"]} == {"0": 0.046, "1": 0.044, "2": 0.064,
                                                          "3": 0.050}
    assert c["stragglers"] == ["2"], c
    table = tcluster.render_table([c], "mean", "http://p")
    assert table.startswith("torch.dist.compute_s job=j  mean of the window before the newest, "
                            "from http://p\n"), table
    assert "not yet scraped since the newest window closed: ranks 2\n" in table, table
    # Node a's earlier window no longer in Prometheus: compared as scraped,
    # rank 2 behind, and no straggler (1.07x the median).
    c = _split_job(None)
    assert c["window_end"] == 30.0 and c["split"] == [] and c["behind"] == ["2", "3"], c
    assert c["stragglers"] == [], c


def test_drop_and_rate_recording_rules(cluster):
    # The per-node and per-job rules are compared at one evaluation of their
    # group, T: two queries "now" can fall either side of the next one. The
    # job rule comes second in the group, so once its sample at T is there,
    # the per-node rule's at T is too. Even at one T they need not be equal
    # here: Prometheus evaluates a group's rules one after the other, not on
    # one snapshot, and a scrape stamped before T can be written between
    # the two (under load: 1.4075 against 1.4012, 1 run in about 50). So
    # the live data checks the labels, the zeros and agreement within 5 %;
    # that the job rule is exactly the sum of its nodes' is promtool's
    # unit test on fixed data (deploy/prometheus/tests/torchmon_test.yml).
    [(_, evaluated_at)] = cluster.prometheus.query(
        'timestamp(job_reason:torchmon_samples_dropped:rate1m{job="promtest",reason="capped"})')

    def at_t(expr):
        return cluster.prometheus.query(expr, at=evaluated_at)

    q = cluster.prometheus.query
    capped_node = cluster.instances[CAPPED[0]]
    dropped = by(at_t('job_instance_reason:torchmon_samples_dropped:rate1m{job="promtest"}'),
                 "instance", "reason")
    reasons = ("capped", "late", "skewed", "client")
    assert set(dropped) == {(i, r) for i in cluster.instances for r in reasons}
    for (instance, reason), rate in dropped.items():
        if (instance, reason) == (capped_node, "capped"):
            assert rate > 0
        else:
            assert rate == 0, (instance, reason)
    job_dropped = by(at_t('job_reason:torchmon_samples_dropped:rate1m{job="promtest"}'), "reason")
    assert set(job_dropped) == {(r,) for r in reasons}
    assert math.isclose(job_dropped[("capped",)], dropped[(capped_node, "capped")], rel_tol=0.05)
    assert all(job_dropped[(r,)] == 0 for r in reasons if r != "capped")

    accepted = by(q('job_instance:torchmon_samples_accepted:rate1m{job="promtest"}'),
                  "instance")
    assert set(accepted) == {(i,) for i in cluster.instances}
    assert all(v > 0 for v in accepted.values()), accepted
    assert [v for _, v in q('job:torchmon_samples_accepted:rate1m{job="promtest"}')][0] > 0
    refused = by(q("instance:torchmon_daemon_samples_refused:rate1m"), "instance")
    assert refused == {(i,): 0.0 for i in cluster.instances}


def test_staleness_recording_rules(cluster):
    q = cluster.prometheus.query
    stats = {"train.step_time_ms", "train.loss"}
    age = by(q('job_instance_stat:torchmon_window_age_seconds:max{job="promtest"}'),
             "instance", "stat")
    assert {k for k in age if k[1] in stats} == {(i, s) for i in cluster.instances
                                                 for s in stats}
    assert all(v >= 0 and math.isfinite(v) for v in age.values()), age
    # Window ends are multiples of the 1 s window, so the newest end and the
    # lag behind it are whole seconds.
    newest = by(q('job_stat:torchmon_window_end_timestamp_seconds:max{job="promtest"}'), "stat")
    lag = by(q('job_stat:torchmon_window_lag_seconds:max{job="promtest"}'), "stat")
    assert stats <= {k[0] for k in newest} and stats <= {k[0] for k in lag}
    assert all(v == int(v) and 0 < v <= time.time() for v in newest.values()), newest
    assert all(v == int(v) and v >= 0 for v in lag.values()), lag


def test_every_recording_rule_is_evaluated_without_error(cluster):
    groups = cluster.prometheus.api("rules")["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    for name in recorded_rule_names():
        assert name in rules, name
    bad = {n: r.get("lastError") for n, r in rules.items() if r["health"] != "ok"}
    assert not bad, bad
    # And every one produced series from the live data, but one: the
    # straggler split's aligned means need a window at least a scrape plus
    # an evaluation long, so that some evaluation finds every node scraped
    # past the same window close. Here the window, the scrape and the
    # evaluation are all 1 s: the nodes' scrapes can leave one node a
    # window ahead at every evaluation (as seen here), and the comparison
    # falls back to the newest windows as scraped (test_straggler_rules_on_ranks_alike;
    # deploy/prometheus/tests covers the rule).
    never_here = {"job_rank:torchmon_dist_compute_seconds:mean_aligned"}
    for name in recorded_rule_names():
        if name not in never_here:
            assert cluster.prometheus.query(name), name


def test_only_the_nan_loss_alert_fires(cluster):
    alerts = cluster.prometheus.query("ALERTS")
    assert [(m["alertname"], m["alertstate"], m["stat"], m["host"], m["rank"], m["instance"])
            for m, _ in alerts] == [
        ("TorchmonLossNotFinite", "firing", "eval.loss", pc.host(NAN_EVAL_LOSS[0]),
         str(pc.global_rank(*NAN_EVAL_LOSS)), cluster.instances[NAN_EVAL_LOSS[0]])], alerts


# ---- quantiles from the native histograms ----------------------------------

def eval_samples(nodes=range(NODES), local_ranks=range(RANKS_PER_NODE)):
    return [v for n in nodes for r in local_ranks for v in pc.eval_step_times(n, r)]


def check_quantile(got, q, samples, what):
    """`got` is histogram_quantile(q, ...) of a native histogram holding
    exactly `samples`. q N is not a whole number (eval_step_times is chosen
    so), so the bucket where the cumulative count first reaches q N is the
    one holding the ceil(q N)-th smallest sample, the exact quantile, however
    Prometheus walks the buckets (2.42 from below; later versions from above
    for q >= 0.5, which for a whole q N would pick the next sample's
    bucket). Interpolated within that bucket, the answer lies between its
    bounds, so within one bucket's width of the exact quantile."""
    n = len(samples)
    assert q * n != math.floor(q * n), (what, q, n)
    exact = pc.nearest_rank_quantile(q, samples)
    lower, upper = pc.schema5_bucket(exact)
    error = abs(got - exact) / exact
    print(f"{what}: p{q * 100:g} exact {exact} PromQL {got} relative error {error:.3%}")
    # Prometheus computes the bounds its own way: allow them 1e-12.
    assert lower * (1 - 1e-12) <= got <= upper * (1 + 1e-12), (what, q, got, exact, lower, upper)
    assert error <= QUANTILE_BOUND, (what, q, got, exact, error)


def test_eval_step_times_tell_a_job_quantile_from_per_rank_ones():
    """The test data: neither the max nor the mean of the ranks' p99s is the
    job's p99, by far more than the quantiles' bound."""
    job_p99 = pc.nearest_rank_quantile(0.99, eval_samples())
    rank_p99 = [pc.nearest_rank_quantile(0.99, pc.eval_step_times(n, r))
                for n in range(NODES) for r in range(RANKS_PER_NODE)]
    for combined in (max(rank_p99), sum(rank_p99) / len(rank_p99)):
        assert abs(combined / job_p99 - 1) > 2 * QUANTILE_BOUND, (combined, job_p99)
    assert max(rank_p99) in pc.OUTLIERS
    # Every node the same samples (see prom_cluster.EVAL_STEP), ranks not.
    nodes = [sorted(eval_samples(nodes=[n])) for n in range(NODES)]
    assert all(node == nodes[0] for node in nodes)
    assert len({tuple(pc.eval_step_times(n, 0)) for n in range(NODES)}) == NODES


def test_eval_step_times_arrive_as_native_histograms_of_schema_5(cluster):
    q = cluster.prometheus.query
    histograms = {m["rank"]: (m, h) for m, h in
                  cluster.prometheus.query_histograms(f"torchmon_stat_distribution{{{EVAL}}}")}
    assert set(histograms) == {str(pc.global_rank(n, r))
                               for n in range(NODES) for r in range(RANKS_PER_NODE)}
    counts = by(q(f"histogram_count(torchmon_stat_distribution{{{EVAL}}})"), "rank")
    for n in range(NODES):
        for r in range(RANKS_PER_NODE):
            rank = str(pc.global_rank(n, r))
            values = pc.eval_step_times(n, r)
            labels, h = histograms[rank]
            # The series' labels, as torchmon_stat's without agg, and the
            # user the daemon vouches for (--peer-labels, on by default).
            assert labels == {"__name__": "torchmon_stat_distribution", "stat": EVAL_STEP,
                              "job": "promtest", "host": pc.host(n), "rank": rank,
                              "local_rank": str(r), "instance": cluster.instances[n],
                              "user": OWN_USER}, labels
            assert counts[(rank,)] == len(values)
            assert float(h["count"]) == len(values)
            assert float(h["sum"]) == sum(values)  # multiples of 1/4: exact
            # Every sample in its schema-5 bucket, (lower, upper] (boundary
            # rule 0), the exact power of two 128 in the bucket it closes.
            got = {}
            for rule, lower, upper, count in h["buckets"]:
                # Bound 2^(index/32), as Prometheus computes it.
                index = round(math.log2(float(upper)) * 2 ** pc.SCHEMA)
                assert rule == 0, h
                assert (float(lower), float(upper)) == pytest.approx(
                    (2 ** ((index - 1) / 2 ** pc.SCHEMA), 2 ** (index / 2 ** pc.SCHEMA)),
                    rel=1e-12), h
                if float(count):
                    got[index] = float(count)
            assert got == collections.Counter(pc.schema5_index(v) for v in values), (n, r)
    # Only the native histogram was ingested: no classic series beside it.
    assert q('{__name__=~"torchmon_stat_distribution_.+"}') == []


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_job_wide_quantile_from_native_histograms(cluster, q):
    result = by(cluster.prometheus.query(
        f"histogram_quantile({q}, sum by (job) "
        f"(rate(torchmon_stat_distribution{{{EVAL}}}[{RANGE}])))"), "job")
    assert set(result) == {("promtest",)}
    check_quantile(result[("promtest",)], q, eval_samples(), "job")


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_job_wide_quantile_since_the_series_began(cluster, q):
    # The histograms are cumulative: their instant sum holds every sample,
    # with no rate() and so no extrapolation.
    result = by(cluster.prometheus.query(
        f"histogram_quantile({q}, sum by (job) (torchmon_stat_distribution{{{EVAL}}}))"), "job")
    assert set(result) == {("promtest",)}
    check_quantile(result[("promtest",)], q, eval_samples(), "job, instant sum")


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_per_node_quantiles_from_native_histograms(cluster, q):
    result = by(cluster.prometheus.query(
        f"histogram_quantile({q}, sum by (instance) "
        f"(rate(torchmon_stat_distribution{{{EVAL}}}[{RANGE}])))"), "instance")
    assert set(result) == {(i,) for i in cluster.instances}
    for n in range(NODES):
        check_quantile(result[(cluster.instances[n],)], q, eval_samples(nodes=[n]), f"node {n}")


@pytest.mark.parametrize("q", [0.5, 0.99])
def test_per_rank_quantiles_from_native_histograms(cluster, q):
    # Local rank 0 of each node: three different slots, each with an odd
    # number of samples, node 0's the one whose p99 is one of its slow steps.
    assert [pc.eval_slot(n, 0) for n in range(NODES)] == [0, 1, 2]
    result = by(cluster.prometheus.query(
        f'histogram_quantile({q}, rate(torchmon_stat_distribution{{{EVAL},local_rank="0"}}'
        f"[{RANGE}]))"), "rank")
    assert set(result) == {(str(pc.global_rank(n, 0)),) for n in range(NODES)}
    for n in range(NODES):
        check_quantile(result[(str(pc.global_rank(n, 0)),)], q, pc.eval_step_times(n, 0),
                       f"rank {pc.global_rank(n, 0)}")


@pytest.mark.parametrize("rule,q", sorted(pc.QUANTILE_RULES.items()))
def test_quantile_recording_rules(cluster, rule, q):
    result = by(cluster.prometheus.query(f'{rule}{{job="promtest"}}'), "stat")
    # Every stat with quantiles, and only those.
    assert set(result) == {(EVAL_STEP,), ("train.step_time_ms",)}, result
    check_quantile(result[(EVAL_STEP,)], q, eval_samples(), f"{rule}")
    if q == 0.99:
        # train.step_time_ms: each rank sends its constant value at the same
        # pace, so the slowest rank holds 1/12 > 1 % of the samples of any
        # range and the job's p99 is in the bucket of its value.
        lower, upper = pc.schema5_bucket(pc.step_time_ms(NODES - 1, RANKS_PER_NODE - 1))
        assert lower * (1 - 1e-12) <= result[("train.step_time_ms",)] <= upper * (1 + 1e-12), \
            result


# ---- a Prometheus without native histograms: OpenMetrics ---------------------

def test_prometheus_without_native_histograms_gets_openmetrics(cluster):
    om = cluster.openmetrics_prometheus
    node = pc.OPENMETRICS_NODE
    instance = cluster.instances[node]
    ranks = {str(pc.global_rank(node, r)): r for r in range(RANKS_PER_NODE)}
    values = {rank: pc.eval_step_times(node, r) for rank, r in ranks.items()}
    # It started before the cluster's Prometheus; wait (bounded) until it
    # has scraped every eval sample too.
    count = f"sum(torchmon_stat_distribution_count{{{EVAL}}})"

    def scraped_all():
        total = om.query(count)
        return total and total[0][1] == sum(map(len, values.values()))

    assert wait_for(scraped_all, 30, 0.25), (om.query(count), om.read_log())

    assert by(om.query("up"), "job", "instance") == {("torchmond", instance): 1.0}
    # The same torchmon_stat values as the native-histogram Prometheus sees,
    # and the ones sent.
    constant = 'job="promtest",stat=~"train.step_time_ms|train.loss"'
    got = by(om.query(f"torchmon_stat{{{constant}}}"), "stat", "agg", "rank", "host", "instance")
    assert got == by(cluster.prometheus.query(f'torchmon_stat{{{constant},instance="{instance}"}}'),
                     "stat", "agg", "rank", "host", "instance")
    assert {k[2]: v for k, v in got.items() if k[:2] == ("train.step_time_ms", "mean")} == {
        rank: pc.step_time_ms(node, r) for rank, r in ranks.items()}
    # Counters, and the histogram as the text formats carry it: count, sum
    # and the +Inf bucket only.
    for metric, want in (("torchmon_samples_accepted_total", len),
                         ("torchmon_stat_distribution_count", len),
                         ("torchmon_stat_distribution_sum", sum)):
        assert by(om.query(f"{metric}{{{EVAL}}}"), "rank") == {
            (rank,): want(v) for rank, v in values.items()}, metric
    assert by(om.query(f"torchmon_stat_distribution_bucket{{{EVAL}}}"), "rank", "le") == {
        (rank, "+Inf"): len(v) for rank, v in values.items()}
    assert om.api("query", query=f"torchmon_stat_distribution{{{EVAL}}}")["result"] == []
    # It negotiated OpenMetrics: only that format has the counters' _created
    # samples (Prometheus 2.42 stores them as series of their own), and the
    # native-histogram Prometheus, which negotiated protobuf, has none.
    created = by(om.query(f"torchmon_samples_accepted_created{{{EVAL}}}"), "rank")
    assert set(created) == {(rank,) for rank in ranks}
    assert all(0 < time.time() - v < 600 for v in created.values()), created
    assert cluster.prometheus.query('{__name__=~"torchmon_.+_created"}') == []

"""A real Prometheus scraping three torchmond nodes fed by four ranks each,
with the scrape config, recording rules and alerts shipped in
deploy/prometheus; promtool on those files and on a live scrape.

Every rank sends constant values chosen to be exact in binary (rank r on
node n: step time 100 + 10 n + r ms, loss 2 - r_global / 8), so every
number Prometheus computes from them is known exactly."""

import math
import os
import subprocess
import time

import pytest
import yaml

import prom_cluster as pc
from prom_cluster import CAPPED, NAN_EVAL_LOSS, NODES, RANKS_PER_NODE

STEP = 'stat="train.step_time_ms"'
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
    untested = [n for n in recorded_rule_names() if f"expr: {n}\n" not in text]
    assert not untested, untested


# ---- a live scrape ---------------------------------------------------------

def test_promtool_check_metrics_on_a_live_scrape_is_clean(cluster):
    scrape = cluster.daemons[CAPPED[0]].scrape()
    assert 'torchmon_stat{stat="data.capped"' in scrape  # a daemon holding series
    assert 'reason="capped"' in scrape
    assert 'torchmon_events_total{event="epoch_end"' in scrape
    assert 'torchmon_event_value{event="epoch_end",field="epoch"' in scrape
    out = run_promtool("check", "metrics", stdin=scrape)
    # promtool exits non-zero on errors and prints lint problems (e.g.
    # counter naming) even when it exits 0: there must be none.
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip() == "" and out.stderr.strip() == "", out.stdout + out.stderr


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


def test_drop_and_rate_recording_rules(cluster):
    q = cluster.prometheus.query
    capped_node = cluster.instances[CAPPED[0]]
    dropped = by(q('job_instance_reason:torchmon_samples_dropped:rate1m{job="promtest"}'),
                 "instance", "reason")
    reasons = ("capped", "late", "skewed", "client")
    assert set(dropped) == {(i, r) for i in cluster.instances for r in reasons}
    for (instance, reason), rate in dropped.items():
        if (instance, reason) == (capped_node, "capped"):
            assert rate > 0
        else:
            assert rate == 0, (instance, reason)
    job_dropped = by(q('job_reason:torchmon_samples_dropped:rate1m{job="promtest"}'), "reason")
    assert set(job_dropped) == {(r,) for r in reasons}
    assert job_dropped[("capped",)] == dropped[(capped_node, "capped")]
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
    # And every one produced series from the live data.
    for name in recorded_rule_names():
        assert cluster.prometheus.query(name), name


def test_only_the_nan_loss_alert_fires(cluster):
    alerts = cluster.prometheus.query("ALERTS")
    assert [(m["alertname"], m["alertstate"], m["stat"], m["host"], m["rank"], m["instance"])
            for m, _ in alerts] == [
        ("TorchmonLossNotFinite", "firing", "eval.loss", pc.host(NAN_EVAL_LOSS[0]),
         str(pc.global_rank(*NAN_EVAL_LOSS)), cluster.instances[NAN_EVAL_LOSS[0]])], alerts

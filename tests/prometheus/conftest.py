"""Puts tests/python (torchmon_testing: the real-daemon helper) on sys.path,
and provides `cluster`: three torchmond nodes, four fake ranks each, and a
real Prometheus scraping them with a copy of deploy/prometheus (plus one
without native histograms scraping one node). One cluster serves the whole
session (it takes a few seconds to fill); it is stopped, Prometheus first,
however the tests end."""

import os
import sys
import tempfile
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))

import prom_cluster as pc  # noqa: E402  (needs the path above)

STEP = 'stat="train.step_time_ms"'
EVAL = f'job="promtest",stat="{pc.EVAL_STEP}"'
RANKS = pc.NODES * pc.RANKS_PER_NODE

# Before the eval step times are sent: every rank's empty histogram of them
# is in Prometheus, so that rate() over a range reaching back before the
# release sees every sample.
EMPTY_HISTOGRAMS_QUERIES = {
    f'count(histogram_count(torchmon_stat_distribution{{{EVAL}}}) == 0)': RANKS,
}

# What "the data is there" means: every rank's series scraped, the rules
# evaluated over at least two scrapes (rates), the NaN alert raised, every
# eval step time in Prometheus.
READY_QUERIES = {
    f'count(torchmon_stat{{job="promtest",{STEP},agg="mean"}})': RANKS,
    'count(up{job="torchmond"} == 1)': pc.NODES,
    f'count(job_instance_stat:torchmon_stat_mean:max{{{STEP}}})': pc.NODES,
    f'count(job_stat:torchmon_stat_mean:max_over_median{{{STEP}}})': 1,
    'count(job_instance_reason:torchmon_samples_dropped:rate1m{reason="capped"} > 0)': 1,
    # Every node's every reason, not only the one that drops: rules of other
    # groups can be evaluated over two scrapes of a node before this one is.
    'count(job_instance_reason:torchmon_samples_dropped:rate1m{job="promtest"})':
        pc.NODES * 4,
    'count(job_instance:torchmon_samples_accepted:rate1m > 0)': pc.NODES,
    'count(instance:torchmon_daemon_samples_refused:rate1m)': pc.NODES,
    f'count(job_instance_stat:torchmon_window_age_seconds:max{{{STEP}}})': pc.NODES,
    'count(job_stat:torchmon_window_lag_seconds:max{stat="train.loss"})': 1,
    'count(ALERTS{alertname="TorchmonLossNotFinite",alertstate="firing"})': 1,
    **{f'count({rule}{{{STEP}}} > 0)': 1 for rule in pc.QUANTILE_RULES},
    f'count(histogram_count(torchmon_stat_distribution{{{EVAL}}}))': RANKS,
    # Counts only grow: the sum is reached once every rank's last sample is.
    f'sum(histogram_count(torchmon_stat_distribution{{{EVAL}}}))': sum(
        len(pc.eval_step_times(n, r)) for n in range(pc.NODES) for r in range(pc.RANKS_PER_NODE)),
}


@pytest.fixture(scope="session")
def cluster():
    with tempfile.TemporaryDirectory(prefix="torchmon-prom.") as tmpdir:
        c = pc.Cluster(tmpdir)
        try:
            wait_until_ready(c)
            yield c
        finally:
            c.stop()  # Prometheus, the feeders and the daemons, even on failure


def wait_until_ready(c, timeout=45.0):
    deadline = time.monotonic() + timeout
    wait_for(c, EMPTY_HISTOGRAMS_QUERIES, deadline)
    c.release_eval_steps()
    wait_for(c, READY_QUERIES, deadline)
    # Every eval step time is in Prometheus now: wait for an evaluation of
    # the quantile rules after this moment, which sees all of them.
    complete = time.time()
    wait_for(c, {f'count(timestamp({rule}{{{EVAL}}}) > {complete})': 1
                 for rule in pc.QUANTILE_RULES}, deadline)


def wait_for(c, queries, deadline):
    """Polls until every query's single value is the one wanted."""
    while True:
        got = {}
        for expr in queries:
            result = c.prometheus.query(expr)
            got[expr] = result[0][1] if result else None
        if all(got[e] == want for e, want in queries.items()):
            return
        failed = c.feeders.failed()
        assert not failed, failed
        if time.monotonic() > deadline:
            pytest.fail(f"Prometheus did not get the expected data in time: {got}\n"
                        f"prometheus log:\n{c.prometheus.read_log()}")
        time.sleep(0.25)

"""deploy/grafana/torchmon-dashboard.json: valid JSON in Grafana's dashboard
schema, every panel's PromQL parses and returns data on the live cluster
(Prometheus answers a parse error with HTTP 400), every recording rule it
uses is shipped in deploy/prometheus/rules."""

import json
import os
import re

import pytest

import prom_cluster as pc

DASHBOARD = os.path.join(pc.REPO, "deploy", "grafana", "torchmon-dashboard.json")
RULES_DIR = os.path.join(pc.DEPLOY_PROMETHEUS, "rules")

# Grafana's built-in interval variables, as Grafana would expand them.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
# Values for the dashboard's query variables on the test cluster; a
# multi-value "All" expands to the variable's allValue.
SELECTED = {"job": "promtest", "stat": "train.step_time_ms"}


def load():
    with open(DASHBOARD) as f:
        return json.load(f)


def all_panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def variables(dashboard):
    values = dict(BUILTINS)
    for var in dashboard["templating"]["list"]:
        name = var["name"]
        if var["type"] == "textbox":
            values[name] = var["query"]  # the default users start with
        elif var.get("includeAll"):
            values[name] = var["allValue"]
        elif var["type"] == "query":
            values[name] = SELECTED[name]
    return values


def expand(expr, values):
    def one(m):
        name = m.group(1) or m.group(2)
        assert name in values, f"undefined variable ${name} in {expr}"
        return values[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def exprs(dashboard):
    out = []
    for panel in all_panels(dashboard):
        for target in panel.get("targets", []):
            out.append((panel["title"], target["expr"]))
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append(("variable " + var["name"], var["query"]["query"]))
    return out


def test_dashboard_is_a_grafana_dashboard_with_a_datasource_variable():
    d = load()
    assert d["schemaVersion"] >= 36 and d["title"] and d["uid"]
    names = [v["name"] for v in d["templating"]["list"]]
    assert len(names) == len(set(names)), names
    assert {"datasource", "job", "host", "stat"} <= set(names)
    ds = next(v for v in d["templating"]["list"] if v["name"] == "datasource")
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    ids = [p["id"] for p in all_panels(d)]
    assert len(ids) == len(set(ids)), ids
    for panel in all_panels(d):
        if panel["type"] == "row":
            continue
        assert panel["targets"], panel["title"]
        # Every query goes to the chosen Prometheus, none to a hard-coded one.
        for obj in [panel] + panel["targets"]:
            assert obj["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, \
                panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24 and grid["h"] > 0, panel["title"]


def test_dashboard_has_the_common_views():
    exprs_text = "\n".join(e for _, e in exprs(load()))
    for needle in ('stat="$loss_stat"', 'stat="$step_stat"',
                   "torchmon_stat_mean:max_over_median", "torchmon_samples_dropped",
                   'job_stat:torchmon_stat_distribution:p50_rate5m{job="$job", stat="$step_stat"}',
                   'job_stat:torchmon_stat_distribution:p99_rate5m{job="$job", stat="$step_stat"}',
                   "torchmon_window_age_seconds", 'up{job=~"(.*/)?torchmond"}'):
        assert needle in exprs_text, needle


def test_every_recording_rule_the_dashboard_uses_is_shipped():
    recorded = set()
    for name in os.listdir(RULES_DIR):
        with open(os.path.join(RULES_DIR, name)) as f:
            recorded |= set(re.findall(r"^\s*- record:\s*(\S+)", f.read(), re.M))
    used = {m for _, e in exprs(load())
            for m in re.findall(r"[a-zA-Z_][a-zA-Z0-9_]*:[a-zA-Z0-9_:]+", e)}
    assert used, "the dashboard uses no recording rule"
    assert used <= recorded, used - recorded


@pytest.mark.parametrize("where,expr", exprs(load()))
def test_every_dashboard_query_parses_and_has_data_on_the_live_cluster(cluster, where, expr):
    query = expand(expr, variables(load()))
    if query.startswith("label_values("):
        # A Grafana function, not PromQL: check its series selector instead.
        query = re.match(r"label_values\((.*),\s*\w+\)$", query).group(1)
    try:
        result = cluster.prometheus.api("query", query=query)["result"]
    except pc.PrometheusError as e:
        pytest.fail(f"{where}: {query!r} refused by Prometheus: {e}")
    assert result, f"{where}: {query!r} returned nothing on the test cluster"


def doc_queries():
    """The PromQL examples of docs/prometheus.md: ```promql blocks, one query
    per run of lines after a # comment."""
    with open(os.path.join(pc.REPO, "docs", "prometheus.md")) as f:
        blocks = re.findall(r"```promql\n(.*?)```", f.read(), re.S)
    queries = []
    for block in blocks:
        current = []
        for line in block.splitlines() + ["#"]:
            if line.startswith("#") or not line.strip():
                if current:
                    queries.append("\n".join(current))
                current = []
            else:
                current.append(line)
    return queries


def test_docs_have_promql_examples():
    assert len(doc_queries()) >= 5


@pytest.mark.parametrize("query", doc_queries())
def test_every_promql_example_in_the_docs_parses(cluster, query):
    try:
        cluster.prometheus.api("query", query=query)
    except pc.PrometheusError as e:
        pytest.fail(f"{query!r} refused by Prometheus: {e}")

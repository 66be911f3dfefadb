"""The admin guide's metrics table and the Grafana dashboard against what the daemon
exports: a real render of its registry after rounds on the simulator, not a list."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from metrics_render import exported, series_names

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "admin-guide.md"
DASHBOARD = ROOT / "conf" / "grafana" / "slurm-gavel.json"

# PromQL words that are not metric names: functions (always followed by "("),
# aggregation operators, grouping and set keywords.
KEYWORDS = {
    # aggregation operators
    "sum", "avg", "min", "max", "count", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "group",
    # grouping, matching and set keywords
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "and", "or", "unless",
}  # fmt: skip


@pytest.fixture(scope="module")
def families(tmp_path_factory) -> dict[str, tuple[str, frozenset[str]]]:
    return exported(tmp_path_factory.mktemp("state"))


def guide_table() -> dict[str, tuple[str, frozenset[str]]]:
    """The rows of the "#### Metrics" table: name -> (type, labels)."""
    text = GUIDE.read_text()
    start = text.index("#### Metrics\n")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] in ("metric", "---"):
            continue
        labels = frozenset(re.findall(r"`([a-z_]+)`", cells[2]))
        rows[cells[0].strip("`")] = (cells[1], labels)
    return rows


def test_the_admin_guide_table_lists_exactly_the_exported_metrics(families):
    table = guide_table()
    assert len(table) > 20  # the parser found the table
    assert sorted(set(families) - set(table)) == [], "exported but not in the guide's table"
    assert sorted(set(table) - set(families)) == [], "in the guide's table but not exported"
    wrong = {n: (table[n], families[n]) for n in table if table[n] != families[n]}
    assert not wrong, f"type or labels differ (guide, exported): {wrong}"


def test_every_metric_is_named_slurm_gavel(families):
    assert [n for n in families if not n.startswith("slurm_gavel_")] == []


def promql_metrics(expr: str) -> set[str]:
    """The metric names a PromQL expression reads."""
    bare = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # strings (label values)
    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", bare)  # matchers, ranges
    bare = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", bare)  # label lists
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", bare):
        word, after = m.group(), bare[m.end() :].lstrip()
        if word not in KEYWORDS and not after.startswith("("):
            names.add(word)
    return names


def test_promql_parser_finds_the_metrics():
    expr = (
        'sum by (account) (rate(a_total{account=~"$x",b="c{d}"}[5m])) / on (x) '
        "histogram_quantile(0.9, sum by (le) (b_bucket)) and time() - c"
    )
    assert promql_metrics(expr) == {"a_total", "b_bucket", "c"}


def dashboard_panels() -> list[dict]:
    doc = json.loads(DASHBOARD.read_text())
    return [p for p in doc["panels"] if p["type"] != "row"]


def test_the_dashboard_reads_only_exported_metrics(families):
    names = series_names(families)
    used: set[str] = set()
    for panel in dashboard_panels():
        for target in panel["targets"]:
            found = promql_metrics(target["expr"])
            assert found, f"panel {panel['title']!r}: no metric in {target['expr']!r}"
            unknown = found - names
            assert not unknown, f"panel {panel['title']!r} reads {unknown}, not exported"
            used |= found
    # What the dashboard is for: fairness per account, the GPU-type mix, jobs,
    # restarts, rounds and errors.
    for needed in (
        "slurm_gavel_account_gpus_share",
        "slurm_gavel_account_gpus_alloc",
        "slurm_gavel_account_jobs",
        "slurm_gavel_account_restarts_total",
        "slurm_gavel_round_duration_seconds_bucket",
        "slurm_gavel_round_errors_total",
    ):
        assert needed in used, f"the dashboard does not plot {needed}"


def test_the_dashboard_is_grafana_shaped():
    doc = json.loads(DASHBOARD.read_text())
    assert doc["title"] and doc["uid"] and isinstance(doc["schemaVersion"], int)
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    ds = variables["datasource"]
    assert ds["type"] == "datasource" and ds["query"] == "prometheus"
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for p in doc["panels"]:
        pos = p["gridPos"]
        assert all(isinstance(pos[k], int) for k in "hwxy") and pos["x"] + pos["w"] <= 24
    for p in dashboard_panels():
        assert p["type"] in ("timeseries", "stat") and p["title"], p
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)) and all(t["expr"] for t in p["targets"])
    # Every $variable a query uses is defined (Grafana's own $__ ones aside).
    for p in dashboard_panels():
        for t in p["targets"]:
            for var in re.findall(r"\$(\w+)", t["expr"]):
                assert var.startswith("__") or var in variables, (p["title"], var)

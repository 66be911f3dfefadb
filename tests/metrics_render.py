"""The daemon's metrics as a scrape returns them after real rounds on the simulator.

Shared by the tests that hold documentation and the Grafana dashboard to what the
daemon actually exports (test_metrics_docs.py), so neither trusts a hard-coded list.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.daemon.config import parse_config
from slurm_gavel.daemon.daemon import Daemon
from slurm_gavel.daemon.metrics import DaemonMetrics
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable, load_table

# Suffixes a family of each type adds to its name in the samples it exposes.
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
}


def daemon_after_rounds(
    state_dir: Path, jobs: list[Job], table: ThroughputTable | None = None, rounds: int = 3
) -> Daemon:
    """A daemon that ran `rounds` 60-s rounds of `jobs` on 2 V100 + 2 K80 nodes."""
    table = table or load_table()
    sim = SimulatedCluster(parse_cluster_spec("v100:1x2,k80:1x2"), jobs, table)
    cfg = parse_config({"partitions": ["gpu"], "state_dir": str(state_dir)})
    d = Daemon(cfg, sim, table=table, metrics=DaemonMetrics())
    d.store.acquire()
    try:
        for _ in range(rounds):
            d.round()
            sim.advance(sim.clock + 60)
    finally:
        d.store.release()
    return d


def exported(state_dir: Path) -> dict[str, tuple[str, frozenset[str]]]:
    """Metric name as queried (counters with `_total`) -> (type, label names), from
    the exposition after three rounds of six jobs of two accounts on four GPUs (so
    preemptions too). A labelled family nothing has counted yet shows only its TYPE
    line: its label names come from the metric object."""
    kinds = ("ResNet-50 (batch size 64)", "A3C", "Transformer (batch size 64)")
    jobs = [Job(str(i), kinds[i % 3], 1, total_steps=1e7, account="ab"[i % 2]) for i in range(6)]
    m = daemon_after_rounds(state_dir, jobs).metrics
    declared = {
        w._name: set(w._labelnames)  # prometheus-client's own record of the labels
        for w in vars(m).values()
        if isinstance(w, MetricWrapperBase)
    }
    out = {}
    for f in text_string_to_metric_families(m.exposition()):
        labels = set(declared.get(f.name, ())) | {k for s in f.samples for k in s.labels}
        name = f.name + "_total" if f.type == "counter" else f.name
        out[name] = (f.type, frozenset(labels - {"le"}))  # le: a histogram's buckets
    return out


def series_names(families: dict[str, tuple[str, frozenset[str]]]) -> set[str]:
    """Every sample name the families expose (histograms' _bucket, _count, _sum)."""
    out = set()
    for name, (kind, _) in families.items():
        base = name.removesuffix("_total") if kind == "counter" else name
        out |= {base + s for s in SAMPLE_SUFFIXES[kind]}
    return out

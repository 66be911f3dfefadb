import socket
import urllib.request
from dataclasses import replace

import pytest

from slurm_gavel.daemon.metrics import DaemonMetrics


def sample(m: DaemonMetrics, line_start: str) -> float:
    for line in m.exposition().splitlines():
        if line.startswith(line_start + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{line_start} not exposed")


def test_gauges_drop_to_zero_instead_of_keeping_stale_values():
    m = DaemonMetrics()
    m.set_jobs({"running": 3, "pending": 2})
    m.set_jobs({"pending": 1})
    assert sample(m, 'slurm_gavel_jobs{state="running"}') == 0
    assert sample(m, 'slurm_gavel_jobs{state="pending"}') == 1
    m.set_gpus({"v100": 4}, {"v100": 8, "k80": 2})
    m.set_gpus({}, {"v100": 4})
    assert sample(m, 'slurm_gavel_gpus_in_use{gpu_type="v100"}') == 0
    assert sample(m, 'slurm_gavel_gpus_usable{gpu_type="k80"}') == 0


def test_counters_and_histograms():
    m = DaemonMetrics()
    m.preemptions.inc(2)
    m.count_command_failures({"scontrol": 2, "squeue": 0})
    m.round_duration.observe(0.3)
    m.slurm_commands_per_round.observe(4)
    assert sample(m, "slurm_gavel_preemptions_total") == 2
    assert sample(m, 'slurm_gavel_slurm_command_failures_total{command="scontrol"}') == 2
    assert 'command="squeue"' not in m.exposition()
    assert sample(m, "slurm_gavel_round_duration_seconds_count") == 1
    assert sample(m, 'slurm_gavel_slurm_commands_per_round_bucket{le="4.0"}') == 1


def test_two_instances_do_not_share_a_registry():
    a, b = DaemonMetrics(), DaemonMetrics()  # the global registry would raise here
    a.rounds.inc()
    assert sample(b, "slurm_gavel_rounds_total") == 0


def test_http_endpoint_serves_the_registry():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    m = DaemonMetrics()
    m.rounds.inc(5)
    m.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert "slurm_gavel_rounds_total 5.0" in body
    assert "python_gc" not in body  # only our registry, not the process collectors


def test_build_info_and_no_created_series():
    from prometheus_client.parser import text_string_to_metric_families

    from slurm_gavel import __version__

    m = DaemonMetrics()
    m.rounds.inc()
    m.round_errors.labels(cause="solver").inc()
    m.round_duration.observe(0.3)
    text = m.exposition()
    families = {f.name: f for f in text_string_to_metric_families(text)}  # strict parse
    (info,) = families["slurm_gavel_build_info"].samples
    assert info.name == "slurm_gavel_build_info"
    assert info.labels == {"version": __version__} and info.value == 1
    assert not [ln for ln in text.splitlines() if "_created" in ln]


def _snapshot(account_a: str):
    from slurm_gavel.domain.cluster_model import (
        ClusterSnapshot,
        JobState,
        Node,
        NodeSlice,
        NodeState,
        ObservedJob,
    )
    from slurm_gavel.domain.model import Job

    nodes = (
        Node("n1", "v100", 4, "gpu", gpus_held_unmanaged=1),
        Node("n2", "v100", 4, "gpu"),
        Node("n3", "k80", 8, "old", state=NodeState.DOWN),
    )
    run = JobState.RUNNING
    jobs = (
        # A space-shared pair on n1's GPUs 2: counted once.
        ObservedJob(Job("1", "t", 2, account=account_a), run, "v100", (NodeSlice("n1", 2),), "2"),
        ObservedJob(Job("2", "t", 2, account=account_a), run, "v100", (NodeSlice("n1", 2),), "1"),
        ObservedJob(Job("3", "t", 1, account="b"), run, "v100", (NodeSlice("n2", 1),)),
        ObservedJob(Job("4", "t", 1, account=account_a), JobState.PENDING),
        ObservedJob(Job("5", "t", 1), JobState.PENDING),
    )
    return ClusterSnapshot(time=0.0, nodes=nodes, jobs=jobs)


def test_gpu_and_account_gauges_on_a_known_snapshot_with_a_hostile_account():
    from prometheus_client.parser import text_string_to_metric_families

    hostile = 'a"b\nc\\'
    m = DaemonMetrics()
    m.set_cluster(_snapshot(hostile))
    text = m.exposition()
    assert 'account="a\\"b\\nc\\\\"' in text  # escaped per the exposition format
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)  # strict parse: raises on bad lines
        for s in f.samples
    }

    def gpus(name: str, t: str, p: str) -> float:
        return got[(name, (("gpu_type", t), ("partition", p)))]

    assert gpus("slurm_gavel_gpus_total", "v100", "gpu") == 8
    assert gpus("slurm_gavel_gpus_alloc", "v100", "gpu") == 4  # 1 unmanaged + 2 shared + 1
    assert gpus("slurm_gavel_gpus_idle", "v100", "gpu") == 4
    assert gpus("slurm_gavel_gpus_total", "k80", "old") == 8
    assert gpus("slurm_gavel_gpus_idle", "k80", "old") == 0  # the node is down

    def jobs(acct: str, state: str) -> float:
        return got[("slurm_gavel_account_jobs", (("account", acct), ("state", state)))]

    assert jobs(hostile, "running") == 2 and jobs(hostile, "pending") == 1
    assert jobs("b", "running") == 1 and jobs("", "pending") == 1
    # Label sets that go away drop to 0 instead of keeping stale values.
    m.set_cluster(_snapshot("z"))
    assert sample(m, 'slurm_gavel_account_jobs{account="a\\"b\\nc\\\\",state="running"}') == 0
    assert sample(m, 'slurm_gavel_account_jobs{account="z",state="running"}') == 2


def _round(snap, placed, result, allocation):
    from slurm_gavel.core.round_report import RoundReport
    from slurm_gavel.domain.cluster_model import RoundPlacement

    placement = RoundPlacement(1, 0.0, {p.job_id: p for p in placed})
    return RoundReport(1, 0.0, True, 0.01, placement, result, len(snap.jobs))


def test_account_shares_received_restarts_and_checkpoint_waits_by_hand():
    from slurm_gavel.domain.cluster_model import ActResult, JobPlacement, NodeSlice
    from slurm_gavel.domain.model import Allocation, PairShare

    snap = _snapshot("a")  # 1, 2 (a, 2 GPUs each), 3 (b), 4 (a), 5 (no account): 1 GPU
    alloc = Allocation(
        "max_min_fairness",
        # job 3 half on v100, job 4 all on k80, job 5 all on v100; job 9 left the cluster
        {"3": {"v100": 0.5}, "4": {"k80": 1.0}, "5": {"v100": 1.0}, "9": {"v100": 1.0}},
        pairs=[PairShare(("1", "2"), {"v100": 0.5})],  # on 2 GPUs half the time
    )
    placed = [
        JobPlacement("1", "v100", (NodeSlice("n1", 2),), partner="2"),
        JobPlacement("2", "v100", (NodeSlice("n1", 2),), partner="1"),
        JobPlacement("5", "v100", (NodeSlice("n2", 1),)),
        JobPlacement("4", "v100", (NodeSlice("n2", 1),)),  # its move failed: holds nothing
    ]
    result = ActResult(
        started=("5",), kept=("1", "2"), preempted=("3",), moved=("4",), failed=(("4", "x"),)
    )
    m = DaemonMetrics()
    report = _round(snap, placed, result, alloc)
    m.record_round(report, snap, 0.5, 3, alloc, {"3": 7.5, "4": 2.0})
    text = m.exposition()

    def v(name: str, labels: str) -> float:
        return sample(m, f"{name}{{{labels}}}")

    share = "slurm_gavel_account_gpus_share"
    assert v(share, 'account="a",gpu_type="v100"') == 1.0  # the pair: 0.5 x 2 GPUs
    assert v(share, 'account="a",gpu_type="k80"') == 1.0
    assert v(share, 'account="b",gpu_type="v100"') == 0.5
    assert v(share, 'account="",gpu_type="v100"') == 1.0
    got = "slurm_gavel_account_gpus_alloc"
    assert v(got, 'account="a",gpu_type="v100",partition="gpu"') == 2.0  # the pair's 2 GPUs
    assert v(got, 'account="",gpu_type="v100",partition="gpu"') == 1.0
    assert 'account="b",gpu_type="v100",partition' not in text  # preempted: held nothing
    restarts = "slurm_gavel_account_restarts_total"
    assert v(restarts, 'account="a"') == 1 and v(restarts, 'account="b"') == 1  # moved, preempted
    assert f'{restarts}{{account=""}}' not in text
    assert v("slurm_gavel_account_checkpoint_waits_total", 'account="b"') == 1
    assert v("slurm_gavel_account_checkpoint_wait_seconds_total", 'account="b"') == 7.5
    assert v("slurm_gavel_account_checkpoint_wait_seconds_total", 'account="a"') == 2.0

    # The next round: job 3 alone, no allocation (a baseline): the rest drops to 0.
    alone = [JobPlacement("3", "v100", (NodeSlice("n2", 1),))]
    m.record_round(_round(snap, alone, ActResult(kept=("3",)), None), snap, 0.5, 3, None, {})
    assert v(share, 'account="b",gpu_type="v100"') == 0
    assert v(got, 'account="a",gpu_type="v100",partition="gpu"') == 0
    assert v(got, 'account="b",gpu_type="v100",partition="gpu"') == 1.0
    assert v(restarts, 'account="a"') == 1  # counters keep counting


@pytest.mark.hostile
def test_hostile_account_and_job_type_keep_the_exposition_valid(tmp_path):
    """A daemon round on the simulator with an account and a job type no exposition
    line may carry raw: the text still parses strictly, the account comes out
    escaped, and the job type (user-written where the table is permissive) is never
    a label value."""
    from metrics_render import daemon_after_rounds
    from prometheus_client.parser import text_string_to_metric_families

    from slurm_gavel.domain.model import Job
    from slurm_gavel.domain.throughputs import load_table

    real = "ResNet-50 (batch size 64)"
    hostile_type = 'A3C"} 1\n# TYPE x counter\nx{a="'
    table = load_table()  # an admin's table may name anything:
    table = replace(table, alone={**table.alone, (hostile_type, 1): table.alone[("A3C", 1)]})
    account = 'evil"} 9\n\\x{y="\u202e'
    jobs = [
        Job("1", hostile_type, 1, total_steps=1e7, account=account),
        Job("2", real, 1, total_steps=1e7, account=account),
        Job("3", real, 1, total_steps=1e7, account="ok"),
        Job("4", hostile_type, 1, total_steps=1e7, account="ok"),
        Job("5", real, 1, total_steps=1e7, account="ok"),
        Job("6", hostile_type, 1, total_steps=1e7, account=account),
    ]
    d = daemon_after_rounds(tmp_path, jobs, table)
    text = d.metrics.exposition()
    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert {s.labels.get("account") for s in samples if "account" in s.labels} == {account, "ok"}
    assert hostile_type not in text and "A3C" not in text
    assert 'evil\\"} 9\\n\\\\x' in text  # quote, newline and backslash escaped
    # Every sample line is one well-formed line: no label value broke out of its quotes.
    lines = [ln for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert len(lines) == len(samples)
    shares = [s.value for s in samples if s.name == "slurm_gavel_account_gpus_share"]
    assert 0 < sum(shares) <= 4 + 1e-9  # the allocation fills at most the 4 GPUs


def _solver_samples(m: DaemonMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(m.exposition())
        for s in f.samples
        if s.name == name
    }


def _daemon_on_forced_decomposition(tmp_path, monkeypatch, wrong_bound: bool):  # type: ignore[no-untyped-def]
    """Three simulator rounds of the daemon (max_min_fairness) with every max-min LP sent
    to the decomposition; with `wrong_bound`, every Lagrangian bound 1e-6 past the
    primal value, so that each certificate fails and the plain LP runs."""
    from metrics_render import daemon_after_rounds

    from slurm_gavel.domain.model import Job
    from slurm_gavel.policies.solvers import dw, mm_lp

    monkeypatch.setattr(mm_lp, "DW_MIN_COLUMNS", 1)
    if wrong_bound:
        real = dw._bound
        monkeypatch.setattr(dw, "_bound", lambda *args: real(*args) * (1 + 1e-6))
    kinds = ("ResNet-50 (batch size 64)", "A3C", "Transformer (batch size 64)")
    jobs = [Job(str(i), kinds[i % 3], 1, total_steps=1e7) for i in range(6)]
    return daemon_after_rounds(tmp_path, jobs).metrics


def test_a_forced_fallback_is_counted_with_its_reason(tmp_path, monkeypatch, caplog):
    import logging

    with caplog.at_level(logging.WARNING):
        m = _daemon_on_forced_decomposition(tmp_path, monkeypatch, wrong_bound=True)
    solves = sample(m, "slurm_gavel_solver_seconds_count")
    assert solves >= 1
    # one fallback per reallocation, by LP and reason; no decomposition counted
    assert _solver_samples(m, "slurm_gavel_solver_fallbacks_total") == {
        (("lp", "max_min"), ("reason", "bound_crosses_primal")): solves
    }
    assert _solver_samples(m, "slurm_gavel_solver_decompositions_total") == {}
    logged = [r for r in caplog.records if "bound_crosses_primal" in r.getMessage()]
    assert len(logged) == solves and all(r.levelno == logging.WARNING for r in logged)


def test_a_certified_decomposition_is_counted_and_no_fallback(tmp_path, monkeypatch):
    m = _daemon_on_forced_decomposition(tmp_path, monkeypatch, wrong_bound=False)
    solves = sample(m, "slurm_gavel_solver_seconds_count")
    assert solves >= 1
    assert _solver_samples(m, "slurm_gavel_solver_decompositions_total") == {
        (("lp", "max_min"),): solves
    }
    assert _solver_samples(m, "slurm_gavel_solver_fallbacks_total") == {}


def test_solver_paths_counted_from_the_allocation():
    from slurm_gavel.domain.model import Allocation, SolverFallback

    m = DaemonMetrics()
    alloc = Allocation("max_min_fairness", {}, decomposed=["max_sum"])
    alloc.fallbacks = [
        SolverFallback("max_min", "gap_open", "x"),
        SolverFallback("max_min", "gap_open", "y"),
    ]
    m.count_solver_paths(alloc)
    m.count_solver_paths(Allocation("fifo", {}))  # plain LPs only: nothing counted
    assert sample(m, 'slurm_gavel_solver_fallbacks_total{lp="max_min",reason="gap_open"}') == 2
    assert sample(m, 'slurm_gavel_solver_decompositions_total{lp="max_sum"}') == 1

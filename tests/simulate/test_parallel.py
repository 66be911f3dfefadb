"""simulate/parallel.py: runs in worker processes give exactly the runs one after the other."""

from __future__ import annotations

import dataclasses
import json

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.cli import main
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError
from slurm_gavel.simulate import parallel
from slurm_gavel.simulate.engine import SimulationOptions
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.parallel import Run, resolve_workers, run_all
from slurm_gavel.simulate.true_rows import draw_true_rows

TABLE = load_table()
NODES = parse_cluster_spec("v100:1x4,p100:1x4,k80:1x4", TABLE)
QUIET = SimulationOptions(record_wall_time=False, progress=False)


def _runs(policies: list[str], knowledge: list[Knowledge] | None = None) -> list[Run]:
    jobs = generate_trace(30, 900, TABLE, seed=3)
    rows = draw_true_rows(jobs, TABLE, ["v100", "p100", "k80"], 0.3, 3)
    return [
        Run(jobs, NODES, TABLE, p, dataclasses.replace(QUIET, knowledge=k), rows)
        for p in policies
        for k in knowledge or [Knowledge.LEARNED]
    ]


# Slow (full tier only: tools/test --help): simulations run twice, 13 s.
@pytest.mark.slow
def test_parallel_runs_give_the_sequential_results_in_order():
    runs = _runs(
        ["max_min_fairness", "finish_time_fairness", "slurm_fifo"],
        [Knowledge.LEARNED, Knowledge.ORACLE],
    )
    one_by_one = run_all(runs)
    done: list[int] = []
    pooled = run_all(runs, workers=3, on_done=done.append)
    assert [r.summary for r in pooled] == [r.summary for r in one_by_one]
    assert [r.summary["policy"] for r in pooled] == [r.policy for r in runs]
    assert done == list(range(len(runs)))  # taken in the order asked
    # the runs really differ, so an order mix-up could not pass unseen
    assert len({json.dumps(r.summary, sort_keys=True) for r in pooled}) == len(runs)


def test_a_failed_run_raises_the_error_the_runs_one_by_one_raise():
    # Runs 1 and 2 both fail (unknown policies); one after the other, run 1's error
    # is the one seen, and so it must be in parallel, where run 2 may fail first.
    runs = _runs(["slurm_fifo", "no_such_policy_a", "no_such_policy_b"])
    with pytest.raises(InputError) as alone:
        run_all(runs)
    with pytest.raises(InputError) as pooled:
        run_all(runs, workers=3)
    assert "no_such_policy_a" in str(alone.value)
    assert str(pooled.value) == str(alone.value)
    assert type(pooled.value) is type(alone.value)


def test_one_run_or_one_worker_stays_in_this_process(monkeypatch):
    def no_pool(*_a, **_k):
        raise AssertionError("a pool was started")

    monkeypatch.setattr(parallel, "ProcessPoolExecutor", no_pool)
    runs = _runs(["slurm_fifo", "fifo"])
    assert len(run_all(runs, workers=1)) == 2
    assert len(run_all(runs[:1], workers=4)) == 1


@pytest.mark.parametrize("bad", [-1, -100])
def test_negative_workers_are_refused_with_the_fix(bad):
    with pytest.raises(InputError, match=r"--workers .*>= 1, or 0 for one per CPU"):
        resolve_workers(bad)


def test_zero_workers_means_one_per_available_cpu(monkeypatch):
    monkeypatch.setattr(parallel.os, "sched_getaffinity", lambda _pid: {0, 3, 5})
    assert resolve_workers(0) == 3
    assert resolve_workers(2) == 2


SMALL = ["--generate", "25", "--interarrival", "600", "--no-progress", "--no-wall-time"]


def _one_and_two_workers(argv: list[str], tmp_path, capsys) -> tuple[bytes, str]:
    """The command's JSON and table with --workers 1 and 2, checked equal; returns one."""
    outs = []
    for workers in ("1", "2"):
        path = tmp_path / f"{workers}.json"
        assert main([*argv, "--workers", workers, "--json", str(path)]) == 0
        outs.append((path.read_bytes(), capsys.readouterr().out))
    assert outs[0] == outs[1]
    return outs[0]


def test_cli_workers_give_byte_identical_output(tmp_path, capsys):
    argv = [
        "simulate",
        *SMALL,
        "--row-spread",
        "0.3",
        "--policy",
        "max_min_fairness",
        "--policy",
        "slurm_fifo",
        "--knowledge",
        "learned",
        "--knowledge",
        "type-blind",
    ]
    outs = _one_and_two_workers(argv, tmp_path, capsys)
    assert len(json.loads(outs[0])) == 4


def test_cli_sweep_with_workers_gives_the_same_points(tmp_path, capsys):
    argv = ["simulate", "--generate", "15", "--sweep-rates", "2,6", "--no-wall-time"]
    argv += ["--policy", "isolated", "--policy", "fifo", "--no-progress"]
    outs = _one_and_two_workers(argv, tmp_path, capsys)
    points = json.loads(outs[0])
    assert [(p["rate_jobs_per_hour"], p["policy"]) for p in points] == [
        (2, "isolated"),
        (2, "fifo"),
        (6, "isolated"),
        (6, "fifo"),
    ]


def test_cli_refuses_negative_workers_before_running(capsys):
    assert main(["simulate", *SMALL, "--workers", "-2"]) == 2
    err = capsys.readouterr().err
    assert "--workers -2" in err and "0 for one per CPU" in err

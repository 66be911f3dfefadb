"""Gavel's measurement window: stop once the window's jobs have all completed,
and report JCT metrics over those jobs only."""

from __future__ import annotations

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace

TABLE = load_table()
NODES = parse_cluster_spec("v100:1x4,p100:1x4,k80:1x4", TABLE)
JOBS = generate_trace(60, 900.0, TABLE, seed=3)


@pytest.mark.parametrize("policy", ["max_min_fairness", "slurm_fifo"])
def test_the_run_stops_once_the_named_jobs_have_completed(policy):
    full = simulate(JOBS, NODES, TABLE, policy, SimulationOptions(progress=False)).summary
    finish = {j: JOBS[int(j)].arrival_time + v for j, v in full["jct_s"].items()}
    ids = frozenset(sorted(finish, key=finish.__getitem__)[10:20])  # finish mid-run
    opts = SimulationOptions(progress=False, stop_when_completed=ids)
    early = simulate(JOBS, NODES, TABLE, policy, opts).summary
    assert ids <= early["jct_s"].keys()
    assert early["jobs"] < full["jobs"]
    # the jobs before the stop ran exactly as in the full run: stopping changes nothing
    for j in ids:
        assert early["jct_s"][j] == pytest.approx(full["jct_s"][j], rel=1e-9)
    last_finish = max(JOBS[int(j)].arrival_time + early["jct_s"][j] for j in ids)
    assert all(
        JOBS[int(j)].arrival_time + v <= last_finish + 1e-6 for j, v in early["jct_s"].items()
    )


def test_parse_window_takes_first_colon_end_as_a_range():
    from slurm_gavel.errors import InputError
    from slurm_gavel.simulate.window import Window, parse_window

    assert parse_window("4000:5000") == Window(4000, 5000)
    for bad in ("4000", "5:5", "9:3", "-1:4", "a:b"):
        with pytest.raises(InputError, match="--measure-jobs"):
            parse_window(bad)
    with pytest.raises(InputError, match="only 60 jobs"):
        Window(10, 61).ids(JOBS)


def test_apply_window_reports_the_windows_jobs_and_keeps_the_rest_aside():
    from slurm_gavel.simulate.window import Window, apply_window

    summary = simulate(JOBS, NODES, TABLE, "isolated", SimulationOptions(progress=False)).summary
    w = apply_window(summary, JOBS, Window(20, 30))
    assert set(w["jct_s"]) == {str(i) for i in range(20, 30)}
    assert w["jobs"] == 10
    assert w["avg_jct_s"] == pytest.approx(sum(w["jct_s"].values()) / 10, rel=1e-6)
    assert w["all_completed"]["jobs"] == 60
    assert w["all_completed"]["avg_jct_s"] == summary["avg_jct_s"]
    mw = w["measure_window"]
    assert (mw["first"], mw["end"], mw["completed"], mw["missing"]) == (20, 30, 10, 0)
    assert mw["last_window_finish_s"] == pytest.approx(
        max(JOBS[i].arrival_time + w["jct_s"][str(i)] for i in range(20, 30)), abs=1e-3
    )
    assert mw["trace_exhausted"] == (JOBS[-1].arrival_time < mw["last_window_finish_s"])
    # a job that finished while others still arrived: the load lasted through it
    early = next(
        i
        for i in range(60)
        if JOBS[i].arrival_time + summary["jct_s"][str(i)] < JOBS[-1].arrival_time
    )
    assert not apply_window(summary, JOBS, Window(early, early + 1))["measure_window"][
        "trace_exhausted"
    ]
    # the last window of a finite trace has nobody arriving behind it
    assert apply_window(summary, JOBS, Window(50, 60))["measure_window"]["trace_exhausted"]


def test_cli_measure_jobs_single_run_and_sweep(tmp_path, capsys):
    import json

    from slurm_gavel.cli import main

    base = ["simulate", "--generate", "60", "--interarrival", "900", "--seed", "3"]
    base += ["--cluster", "v100:1x4,p100:1x4,k80:1x4", "--no-progress", "--no-wall-time"]
    out = tmp_path / "w.json"
    argv = [*base, "--policy", "max_min_fairness", "--measure-jobs", "10:30"]
    assert main([*argv, "--json", str(out)]) == 0
    s = json.loads(out.read_text())
    assert "measured: jobs 10-29" in capsys.readouterr().out
    assert s["jobs"] == 20 and s["measure_window"]["missing"] == 0
    assert s["all_completed"]["jobs"] < 60  # stopped before the trace ran out

    argv = [*base, "--sweep-rates", "2,4", "--policy", "isolated", "--measure-jobs", "50:60"]
    assert main([*argv, "--json", str(out)]) == 0
    points = json.loads(out.read_text())
    assert [p["jobs"] for p in points] == [10, 10]
    assert "load fell off" in capsys.readouterr().err

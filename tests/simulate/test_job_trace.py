"""`simulate --trace-job`: one job's decisions round by round (simulate/job_trace.py)."""

from __future__ import annotations

import json

import pytest
from plugin_configs import overhead
from plugin_configs import restart_aware as plugins_with

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.cli import main
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.errors import InputError
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.job_trace import traced_ids

TABLE = load_table()
NODES = parse_cluster_spec("v100:2x4,p100:2x4,k80:2x4", TABLE)


def _run(trace_jobs: frozenset[str], restart_aware: bool = False) -> tuple[dict, list[dict]]:
    jobs = generate_trace(60, 900, TABLE, seed=3, multi_gpu=True)
    opts = SimulationOptions(
        settings=overhead(120.0), plugins=plugins_with(restart_aware), record_wall_time=False,
        progress=False, trace_jobs=trace_jobs,
    )  # fmt: skip
    r = simulate(jobs, NODES, TABLE, "max_min_fairness", opts)
    return r.summary, r.job_trace


def _restarts_seen(lines: list[dict]) -> int:
    """(Re)starts the lines show: every new run after the job's first one."""
    runs, last = 0, None
    for line in lines:
        run = (line["gpu_type"], tuple(line["nodes"])) if line.get("running") else None
        if run is not None and run != last:
            runs += 1
        last = run
    return max(0, runs - 1)


@pytest.mark.parametrize("aware", [False, True])
def test_tracing_changes_nothing_in_the_summary(aware):
    plain, none = _run(frozenset(), aware)
    traced, lines = _run(frozenset({"5", "17"}), aware)
    assert none == []
    assert traced == plain
    assert {line["job"] for line in lines} == {"5", "17"}


def test_the_lines_account_for_every_restart_and_end_with_the_finish():
    ids = frozenset(str(i) for i in range(0, 60, 7))
    summary, lines = _run(ids)
    assert summary["preemptions"] > 0  # the trace restarts jobs, so this checks something
    moved = 0
    for job in ids:
        own = [line for line in lines if line["job"] == job]
        assert own[0]["event"] == "arrived"
        assert own[-1]["event"] == "finished"
        assert sum(line["event"] == "finished" for line in own) == 1
        finished = own[-1]
        assert finished["restarts"] == own[-2]["restarts"]
        # each new run after the first is a restart the simulated cluster counted
        assert _restarts_seen(own) == finished["restarts"]
        moved += finished["restarts"]
        times = [line["t_h"] for line in own]
        assert times == sorted(times)
        for line in own[:-1]:
            if line["running"]:
                assert line["gpus"] == sum(int(s.split(":")[1]) for s in line["nodes"])
                assert line["steps_per_s"] > 0
    assert moved > 0  # some traced job was restarted


def test_an_unknown_job_id_is_refused_with_the_ids_it_could_be(capsys):
    jobs = generate_trace(5, 900, TABLE, seed=1)
    with pytest.raises(InputError, match=r"no such job in the trace.*e\.g\. 0, 1, 2"):
        traced_ids(["0", "nope"], jobs)
    assert main(["simulate", "--generate", "5", "--trace-job", "x;rm -rf /"]) == 2
    assert "--trace-job x;rm -rf /: no such job" in capsys.readouterr().err


def test_the_cli_writes_json_lines_for_the_traced_jobs_only(tmp_path):
    out = tmp_path / "deep" / "trace.jsonl"
    args = ["simulate", "--generate", "30", "--seed", "2", "--no-progress"]
    rc = main([*args, "--trace-job", "4", "--trace-job", "9", "--trace-job-out", str(out)])
    assert rc == 0
    lines = [json.loads(s) for s in out.read_text().splitlines()]
    # default policies: max_min_fairness and slurm_fifo, each traced
    assert {(line["policy"], line["job"]) for line in lines} >= {
        ("max_min_fairness", "4"),
        ("slurm_fifo", "9"),
    }
    assert {line["job"] for line in lines} == {"4", "9"}

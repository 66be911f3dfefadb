"""Moldable jobs in traces and the simulator's summary: scale_factor MIN-MAX,
simulate --moldable's n/2..2n rule, and the counts chosen at (re)starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.backends.cluster_spec import parse_cluster_spec
from slurm_gavel.cli import main
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.engine import SimulationOptions, simulate
from slurm_gavel.simulate.moldable_trace import summarise, with_ranges
from slurm_gavel.simulate.traces import TraceError, load_trace, save_trace

TABLE = load_table()
HEADER = "job_id,arrival_time,job_type,scale_factor,total_steps,priority_weight,slo,account\n"
R18 = "ResNet-18 (batch size 16)"


def _write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "t.csv"
    p.write_text(body)
    return p


def test_a_range_in_the_scale_factor_column_makes_a_moldable_job(tmp_path):
    p = _write(tmp_path, HEADER + f"1,0,{R18},2-8,1000,1,,\n2,5,{R18},4,10,1,,\n")
    a, b = load_trace(p, TABLE)
    assert (a.scale_factor, a.scale_range) == (2, (2, 8))
    assert (b.scale_factor, b.scale_range) == (4, None)
    out = tmp_path / "again.csv"
    save_trace([a, b], out)
    assert "2-8" in out.read_text()
    assert load_trace(out, TABLE) == [a, b]


@pytest.mark.parametrize("bad", ["8-2", "0-4", "1-", "2-8-9", "1.5-3", "1-5000", "x-y", "-3"])
def test_hostile_ranges_name_the_line_the_field_and_the_form(tmp_path, bad):
    p = _write(tmp_path, HEADER + f"1,0,{R18},{bad},1000,1,,\n")
    with pytest.raises(TraceError, match=r"t\.csv:2: field 'scale_factor': .*(MIN-MAX|2-8)"):
        load_trace(p, TABLE)


def test_a_range_whose_minimum_the_table_lacks_is_refused(tmp_path):
    p = _write(tmp_path, HEADER + f"1,0,{R18},3-8,1000,1,,\n")
    with pytest.raises(TraceError, match="no figures"):
        load_trace(p, TABLE)


def test_the_rule_is_half_to_double_within_the_table_s_counts():
    jobs = [Job("a", R18, 1), Job("b", R18, 4), Job("c", R18, 8), Job("d", "A3C", 1)]
    got = {j.id: j.scale_range for j in with_ranges(jobs, TABLE)}
    assert got == {"a": (1, 2), "b": (2, 8), "c": (4, 8), "d": None}  # A3C: only 1 GPU


def test_up_only_never_goes_below_the_trace_s_count():
    jobs = [Job("a", R18, 1), Job("b", R18, 4), Job("c", R18, 8)]
    got = {j.id: j.scale_range for j in with_ranges(jobs, TABLE, shrink=False)}
    assert got == {"a": (1, 2), "b": (4, 8), "c": None}  # 8..8 is no range


def test_a_share_of_the_jobs_is_drawn_by_seed_and_job_id():
    jobs = [Job(str(i), R18, 2) for i in range(400)]
    half = with_ranges(jobs, TABLE, share=0.5, seed=1)
    picked = {j.id for j in half if j.scale_range is not None}
    assert 150 < len(picked) < 250
    assert picked == {j.id for j in with_ranges(jobs, TABLE, 0.5, 1) if j.scale_range}
    assert picked != {j.id for j in with_ranges(jobs, TABLE, 0.5, 2) if j.scale_range}


def test_the_summary_reports_the_counts_chosen():
    jobs = [
        Job("m", R18, 1, total_steps=TABLE.throughput(R18, 4, "v100") * 600, scale_range=(1, 4)),
        Job("r", R18, 1, total_steps=1000.0),
    ]
    nodes = parse_cluster_spec("v100:1x4", TABLE)
    s = simulate(jobs, nodes, TABLE, "max_min_fairness", SimulationOptions(progress=False))
    m = s.summary["moldable"]
    assert m["jobs"] == 1
    # 1 GPU grown to 2 beside r (3 GPUs left: 2 -> 4 does not fit), then 4 by a
    # restart once r has finished
    assert m["starts_by_count"] == {"2": 1, "4": 1}
    assert m["mean_gpus_at_start"] == 3.0
    rigid = simulate(jobs[1:], nodes, TABLE, "max_min_fairness", SimulationOptions(progress=False))
    assert "moldable" not in rigid.summary
    assert summarise(jobs[1:], {}) is None


def test_simulate_moldable_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "s.json"
    rc = main(
        [
            "simulate",
            "--generate",
            "30",
            "--multi-gpu",
            "--seed",
            "2",
            "--moldable",
            "--policy",
            "max_min_fairness",
            "--no-progress",
            "--no-wall-time",
            "--json",
            str(out),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "moldable: n/2..2n GPUs" in text and "(re)starts by GPU count" in text
    summary = json.loads(out.read_text())
    assert summary["moldable"]["jobs"] > 0


def test_moldable_share_out_of_range_is_refused(capsys):
    rc = main(["simulate", "--generate", "5", "--moldable", "--moldable-share", "0"])
    assert rc == 2
    assert "--moldable-share 0" in capsys.readouterr().err


def test_moldable_grow_widens_the_trace_rule_and_refuses_zero(tmp_path, capsys):
    out = tmp_path / "s.json"
    args = ["simulate", "--generate", "20", "--seed", "2", "--moldable", "--no-progress"]
    rc = main([*args, "--moldable-grow", "4", "--no-wall-time", "--json", str(out)])
    assert rc == 0
    assert "moldable: n/2..4n GPUs" in capsys.readouterr().out
    rc = main([*args, "--moldable-grow", "0"])
    assert rc == 2
    assert "--moldable-grow 0" in capsys.readouterr().err

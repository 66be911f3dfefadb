"""`slurm-gavel simulate --knowledge` and `--row-spread`."""

from __future__ import annotations

import json

import pytest
from refused_traces import refused_trace

from slurm_gavel.cli import main

SMALL = ["--generate", "30", "--interarrival", "900", "--no-progress", "--no-wall-time"]
KNOW = ["--knowledge", "oracle", "--knowledge", "learned", "--knowledge", "type-blind"]


def test_each_knowledge_runs_the_same_saved_trace_and_says_which(tmp_path, capsys):
    trace, first = tmp_path / "t.csv", tmp_path / "a.json"
    args = ["simulate", *SMALL, "--row-spread", "0.3", "--seed", "4", "--policy", "fifo"]
    assert main([*args, *KNOW, "--save-trace", str(trace), "--json", str(first)]) == 0
    header = trace.read_text().splitlines()[0]
    assert header.endswith("throughput_v100,throughput_p100,throughput_k80")
    data = json.loads(first.read_text())
    assert [d["knowledge"]["mode"] for d in data] == ["oracle", "learned", "type-blind"]
    assert all(d["knowledge"]["jobs_with_true_rows"] == 30 for d in data)
    out = capsys.readouterr().out
    assert "fifo [oracle]" in out and "fifo [type-blind]" in out
    # the saved trace replays the generated one exactly
    again = tmp_path / "b.json"
    rerun = ["simulate", "--trace", str(trace), "--no-progress", "--no-wall-time", *KNOW]
    assert main([*rerun, "--policy", "fifo", "--json", str(again)]) == 0
    assert json.loads(again.read_text()) == data


def test_default_is_learned_and_unreported_without_true_rows(tmp_path):
    out = tmp_path / "s.json"
    assert main(["simulate", *SMALL, "--policy", "fifo", "--json", str(out)]) == 0
    assert "knowledge" not in json.loads(out.read_text())
    assert (
        main(["simulate", *SMALL, "--policy", "fifo", "--knowledge", "learned", "--json", str(out)])
        == 0
    )
    # without true rows every job runs at its prior: nothing to learn, and no count of
    # what was learned is made up
    assert json.loads(out.read_text())["knowledge"] == {
        "mode": "learned",
        "jobs_with_true_rows": 0,
        "cells_measured": None,
        "jobs_never_measured": None,
    }


def test_row_spread_gives_a_loaded_trace_its_own_rows_too(tmp_path, capsys):
    """A public trace (Philly) has no rows of its own: --row-spread draws one per job,
    as for generated jobs, except where the trace gives the job's own figures."""
    trace = tmp_path / "t.csv"
    trace.write_text(
        "job_id,arrival_time,job_type,scale_factor,total_steps,throughput_v100\n"
        "1,0,A3C,1,1000,\n"
        "2,0,A3C,1,1000,7.5\n"
        "3,10,ResNet-18 (batch size 64),1,1000,\n"
    )
    out = tmp_path / "s.json"
    argv = ["simulate", "--trace", str(trace), "--cluster", "v100:1x2", "--no-progress",
            "--policy", "max_min_fairness", "--knowledge", "oracle",
            "--json", str(out)]  # fmt: skip
    assert main([*argv, "--row-spread", "0.3", "--seed", "4"]) == 0
    spread = json.loads(out.read_text())
    assert spread["knowledge"]["jobs_with_true_rows"] == 3
    assert main([*argv]) == 0  # the trace's one row alone
    alone = json.loads(out.read_text())
    assert alone["knowledge"]["jobs_with_true_rows"] == 1
    assert spread["jct_s"] != alone["jct_s"]  # the drawn rows are what the jobs ran at
    assert "(1 given by the trace)" in capsys.readouterr().out


def test_unknown_knowledge_is_refused(capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--knowledge", "psychic"])
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.hostile
def test_hostile_column_in_a_trace_file_names_row_column_and_fix(tmp_path, capsys):
    _, err = refused_trace(
        tmp_path,
        capsys,
        "job_id,arrival_time,job_type,scale_factor,total_steps,throughput_v100\n"
        "1,0,A3C,1,100,1e400\n",
    )
    assert "t.csv:2: column 'throughput_v100': '1e400' is not a finite number" in err
    assert "leave the cell empty" in err

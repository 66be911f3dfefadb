"""`trace philly` (simulate/philly.py): the window, the seeded job-type rule, steps
from the v100 rate, accounts, skips, and hostile rows named with their line."""

from __future__ import annotations

from datetime import datetime

import pytest

from slurm_gavel.cli import main
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.philly import parse_start, philly_jobs, pick_type
from slurm_gavel.simulate.traces import TraceError, load_trace

TABLE = load_table()
HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"
ROWS = (
    "2017-10-17 00:04:56,4905.0,1,4905.0,6c71a0\n"
    "2017-10-16 23:59:59,100.0,1,100.0,6c71a0\n"  # before the window
    "2017-10-17 00:01:55,75.0,1,75.0,11cb48\n"
    "2017-10-17 00:04:58,91527.0,8,732216.0,6c71a0\n"
    "2017-10-17 00:05:00,30.0,1,30.0,6c71a0\n"  # shorter than 60 s
    "2017-10-17 00:06:00,700000.0,1,700000.0,6c71a0\n"  # longer than 7 days
    "2017-10-17 00:07:00,600.0,16,9600.0,6c71a0\n"  # no job type has 16 GPUs
    "2017-10-17 00:08:00,600.0,2,1200.0,103959\n"
    "2017-10-17 00:08:00,600.0,2,1200.0,103959\n"  # the same row twice
    "2017-10-17 12:00:00,600.0,1,600.0,6c71a0\n"  # the window's end: out
)
START = datetime(2017, 10, 17)


def _jobs(text=HEADER + ROWS, seed=0, **kw):
    return philly_jobs(text, "philly.csv", TABLE, START, 12.0, seed=seed, **kw)


def test_a_window_becomes_jobs_in_arrival_order_with_steps_from_the_v100_rate():
    jobs, skipped = _jobs()
    assert [j.arrival_time for j in jobs] == [115.0, 296.0, 298.0, 480.0, 480.0]
    assert [j.id for j in jobs] == ["0", "1", "2", "3", "4"]
    assert [j.scale_factor for j in jobs] == [1, 1, 8, 2, 2]
    assert [j.account for j in jobs] == ["11cb48", "6c71a0", "6c71a0", "103959", "103959"]
    for j, dur in zip(jobs, (75.0, 4905.0, 91527.0, 600.0, 600.0), strict=True):
        assert j.total_steps == round(dur * TABLE.throughput(j.job_type, j.scale_factor, "v100"))
        assert TABLE.has(j.job_type, j.scale_factor)
    assert skipped.total == 3 and len(skipped.reasons) == 3


def test_the_job_type_rule_is_the_documented_hash_and_the_seed_changes_it():
    jobs, _ = _jobs()
    ones = [jt for jt in TABLE.job_types if TABLE.has(jt, 1)]
    assert jobs[0].job_type == pick_type(ones, 0, "2017-10-17 00:01:55,75.0,1,11cb48#0")
    twos = [jt for jt in TABLE.job_types if TABLE.has(jt, 2)]
    key = "2017-10-17 00:08:00,600.0,2,103959"
    assert (jobs[3].job_type, jobs[4].job_type) == (
        pick_type(twos, 0, key + "#0"),
        pick_type(twos, 0, key + "#1"),
    )
    assert _jobs()[0] == jobs  # deterministic
    types = {s: [j.job_type for j in _jobs(seed=s)[0]] for s in range(4)}
    assert len({tuple(v) for v in types.values()}) > 1


def test_the_cli_writes_a_trace_the_simulator_reads(tmp_path, capsys):
    src = tmp_path / "philly.csv"
    src.write_text(HEADER + ROWS)
    out = tmp_path / "t.csv"
    assert main(["trace", "philly", str(src), "--start", "2017-10-17", "-o", str(out)]) == 0
    assert len(load_trace(out, TABLE)) == 5
    assert "5 jobs kept, 3 skipped" in capsys.readouterr().err


@pytest.mark.parametrize(
    "row, match",
    [
        ("2017-10-17 00:01:00,-5,1,0,c1", "line 2|philly.csv:2: field 'duration': -5"),
        ("2017-10-17 00:01:00,nan,1,0,c1", "philly.csv:2: field 'duration'.*not a finite"),
        ("2017-10-17 00:01:00,1e400,1,0,c1", "philly.csv:2: field 'duration'.*not a finite"),
        ("2017-10-17 00:01:00,1e30,1,0,c1", "philly.csv:2: field 'duration'.*fix or delete"),
        ("2017-10-17 00:01:00,60,0,0,c1", "philly.csv:2: field 'num_gpus': 0"),
        ("2017-10-17 00:01:00,60,1.5,0,c1", "philly.csv:2: field 'num_gpus'.*whole"),
        ("2017-10-17 00:01:00,60,99999999999,0,c1", "philly.csv:2: field 'num_gpus'"),
        ("yesterday,60,1,0,c1", "philly.csv:2: field 'timestamp'"),
        ("2017-10-17 00:01:00,60,1,0,", "philly.csv:2: field 'cluster' is empty"),
        ("2017-10-17 00:01:00,60,1", "philly.csv:2: 3 fields, the header has 5"),
    ],
)
def test_hostile_rows_name_the_line_the_field_and_the_fix(row, match):
    with pytest.raises(TraceError, match=match):
        _jobs(HEADER + row + "\n")


def test_a_file_that_is_not_philly_says_what_it_expected():
    with pytest.raises(TraceError, match="header lacks duration, num_gpus"):
        _jobs("timestamp,cluster\n2017-10-17 00:00:00,c\n")
    with pytest.raises(TraceError, match="empty file"):
        _jobs("")
    with pytest.raises(TraceError, match="--start 'soon'"):
        parse_start("soon")
    with pytest.raises(TraceError, match="--reference-gpu"):
        _jobs(reference_gpu="a100")
    with pytest.raises(TraceError, match="--hours"):
        philly_jobs(HEADER, "p", TABLE, START, float("nan"))

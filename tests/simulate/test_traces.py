"""Trace loading: the CSV contract, Gavel's .trace files, and precise errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.generate import generate_trace
from slurm_gavel.simulate.traces import TraceError, load_trace, save_trace

TABLE = load_table()
HEADER = "job_id,arrival_time,job_type,scale_factor,total_steps,priority_weight,slo,account\n"
GOOD = "1,0,ResNet-50 (batch size 64),1,1000,1,,\n"


def _write(tmp_path: Path, body: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


def test_csv_round_trip(tmp_path):
    jobs = generate_trace(30, 600.0, TABLE, seed=3, multi_gpu=True, slos=True, accounts=("x",))
    p = tmp_path / "t.csv"
    save_trace(jobs, p)
    assert load_trace(p, TABLE) == jobs


def test_optional_fields(tmp_path):
    p = _write(tmp_path, HEADER + "7,5.5,LM (batch size 5),2,10,2.5,3600,physics\n" + GOOD)
    with pytest.raises(TraceError):  # 5.5 then 0: not monotonic
        load_trace(p, TABLE)
    p = _write(tmp_path, HEADER + GOOD + "7,5.5,LM (batch size 5),2,10,2.5,3600,physics\n")
    _, j = load_trace(p, TABLE)
    assert j == Job("7", "LM (batch size 5)", 2, 2.5, 10.0, 5.5, "physics", 3600.0)


def test_a_job_s_own_restart_seconds_column(tmp_path):
    header = HEADER.rstrip("\n") + ",restart_seconds\n"
    p = _write(
        tmp_path, header + GOOD.rstrip("\n") + ",\n" + "7,5,LM (batch size 5),1,10,1,,,240\n"
    )
    a, b = load_trace(p, TABLE)
    assert (a.restart_overhead, b.restart_overhead) == (None, 240.0)
    save_trace([a, b], tmp_path / "out.csv")
    assert (tmp_path / "out.csv").read_text() == p.read_text()
    # without the column, the file is written exactly as before
    save_trace([a], tmp_path / "plain.csv")
    assert (tmp_path / "plain.csv").read_text() == HEADER + GOOD
    for bad in ("-1", "inf", "nan", "1e400", "30s"):
        q = _write(tmp_path, header + f"7,5,LM (batch size 5),1,10,1,,,{bad}\n", "bad.csv")
        with pytest.raises(TraceError, match="'restart_seconds'"):
            load_trace(q, TABLE)


def test_the_column_s_old_name_overhead_is_still_read_but_not_beside_the_new(tmp_path):
    row = "7,5,LM (batch size 5),1,10,1,,,240\n"
    p = _write(tmp_path, HEADER.rstrip("\n") + ",overhead\n" + row)
    assert load_trace(p, TABLE)[0].restart_overhead == 240.0
    q = _write(tmp_path, HEADER.rstrip("\n") + ",overhead\n7,5,LM (batch size 5),1,10,1,,,-5\n")
    with pytest.raises(TraceError, match=r"'overhead'.*>= 0"):
        load_trace(q, TABLE)
    both = _write(
        tmp_path, HEADER.rstrip("\n") + ",overhead,restart_seconds\n" + row.rstrip() + ",1\n"
    )
    with pytest.raises(TraceError, match="both 'restart_seconds' and 'overhead'"):
        load_trace(both, TABLE)


@pytest.mark.parametrize(
    "row, line, field",
    [
        ("2,10,No Such Net,1,100,1,,\n", 3, "job_type"),
        ("2,-5,LM (batch size 5),1,100,1,,\n", 3, "arrival_time"),
        ("2,abc,LM (batch size 5),1,100,1,,\n", 3, "arrival_time"),
        ("2,10,LM (batch size 5),1,0,1,,\n", 3, "total_steps"),
        ("2,10,LM (batch size 5),1.5,100,1,,\n", 3, "scale_factor"),
        ("2,10,LM (batch size 5),3,100,1,,\n", 3, "scale_factor"),  # no 3-GPU figures
        ("2,10,LM (batch size 5),1,100,0,,\n", 3, "priority_weight"),
        ("1,10,LM (batch size 5),1,100,1,,\n", 3, "job_id"),  # duplicate id
        (",10,LM (batch size 5),1,100,1,,\n", 3, "job_id"),
    ],
)
def test_bad_rows_name_file_line_and_field(tmp_path, row, line, field):
    p = _write(tmp_path, HEADER + GOOD + row)
    with pytest.raises(TraceError) as e:
        load_trace(p, TABLE)
    msg = str(e.value)
    assert f"{p}:{line}" in msg and f"'{field}'" in msg, msg


def test_non_monotonic_arrivals(tmp_path):
    p = _write(
        tmp_path, HEADER + "1,100,LM (batch size 5),1,10,1,,\n2,50,LM (batch size 5),1,10,1,,\n"
    )
    with pytest.raises(TraceError, match=r"t\.csv:3: field 'arrival_time'.*earlier"):
        load_trace(p, TABLE)


def test_malformed_rows_and_files(tmp_path):
    with pytest.raises(TraceError, match=r":2: 3 fields, the header has 8"):
        load_trace(_write(tmp_path, HEADER + "1,2,3\n"), TABLE)
    with pytest.raises(TraceError, match="header lacks total_steps"):
        load_trace(_write(tmp_path, "job_id,arrival_time,job_type,scale_factor\n"), TABLE)
    with pytest.raises(TraceError, match="empty file"):
        load_trace(_write(tmp_path, ""), TABLE)
    with pytest.raises(TraceError, match="no jobs"):
        load_trace(_write(tmp_path, HEADER), TABLE)
    with pytest.raises(TraceError, match="cannot read"):
        load_trace(tmp_path / "missing.csv", TABLE)


def test_gavel_trace_formats(tmp_path):
    ten = (
        "ResNet-50 (batch size 64)\tpython3 main.py\t/dir\t--num_steps\t1\t5000\t1\t1\t-1\t0\n"
        "LM (batch size 5)\tpython main.py\t/dir\t--steps\t1\t800\t2\t5\t7200\t12.5\n"
    )
    jobs = load_trace(_write(tmp_path, ten, "a.trace"), TABLE)
    assert jobs[0] == Job("0", "ResNet-50 (batch size 64)", 1, 1.0, 5000.0, 0.0, None, None)
    assert jobs[1] == Job("1", "LM (batch size 5)", 2, 5.0, 800.0, 12.5, None, 7200.0)
    seven = "LM (batch size 5)\tcd x && python main.py\t--steps\t1\t2799809\t12.000000\t1\n"
    (job,) = load_trace(_write(tmp_path, seven, "b.trace"), TABLE)
    assert (job.total_steps, job.arrival_time, job.scale_factor) == (2799809.0, 12.0, 1)
    with pytest.raises(TraceError, match=r"c\.trace:1: 3 tab-separated fields"):
        load_trace(_write(tmp_path, "a\tb\tc\n", "c.trace"), TABLE)
    bad = "Nope\tcmd\t/d\t--s\t1\t10\t1\t1\t-1\t0\n"
    with pytest.raises(TraceError, match=r"d\.trace:1: field 'job_type'"):
        load_trace(_write(tmp_path, bad, "d.trace"), TABLE)

"""sacct end to end: the daemon schedules jobs on a cluster with slurmdbd and MariaDB
(`tools/local-cluster up --accounting`), then `trace from-sacct` and `report` read
what the real slurmdbd recorded and must agree with what the jobs themselves logged.

SLURM_GAVEL_SACCT_CAPTURE=DIR also saves the sacct output (JSON and -P) under
DIR/<release>/: that is how tests/data/sacct/ was captured.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import new_scenario

from slurm_gavel.accounting.sacct import FIELDS, parse_json, parse_parsable
from slurm_gavel.domain.throughputs import load_table
from slurm_gavel.simulate.traces import parse_csv

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TYPES = ("ResNet-50 (batch size 64)", "A3C", "Recommendation (batch size 2048)")
# A plain job's comment: user text with a forged sacct -P record (the 12 FIELDS: a
# v100 x8 A3C job of an hour) and a terminal escape.
HOSTILE = (
    "evil\x1b]0;pwned\x07\n999|x|root|physics|gpu|COMPLETED|2026-01-01T00:00:00|"
    "2026-01-01T00:00:00|2026-01-01T01:00:00|3600|gres/gpu:v100=8,gres/gpu=8|gavel:type=A3C"
)


def gavel(slurm, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "slurm_gavel", *argv],
        capture_output=True, text=True, timeout=120, env={**os.environ, **slurm.env},
    )  # fmt: skip


@pytest.mark.hostile(inputs=1)  # HOSTILE, through the real slurmdbd
def test_trace_and_report_from_the_real_slurmdbd(slurm_accounting, tmp_path: Path):
    slurm = slurm_accounting
    # Only this test's jobs: other tests share the accounting cluster (and sacct keeps
    # their jobs), so the window starts after the fixture cancelled theirs.
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(time.time() + 1))
    time.sleep(1.1)
    sc = new_scenario(slurm, tmp_path)
    try:
        # 9 one-GPU jobs on 6 GPUs: rounds time-share, so some jobs are requeued.
        for i in range(9):
            sc.submit(TYPES[i % 3], steps=6)
        plain = slurm.sbatch("-p", "gpu", "-o", "/dev/null", "--gres=gpu:k80:1",
                             f"--comment={HOSTILE}", "--wrap", "sleep 2")  # fmt: skip
        other = slurm.sbatch("-p", "gpu", "-A", "biology", "-o", "/dev/null", "--wrap", "true")
        sc.daemon.start()
        sc.assert_all_completed(sc.wait_finished([*sc.managed, plain, other], timeout=240))
        segments = {j: sc.segments(j) for j in sc.managed}
        restarts = sum(len(s) - 1 for s in segments.values())
        report_daemon = gavel(slurm, "report", "--since", since, "--config",
                              str(sc.daemon.config), "--json")  # fmt: skip
    finally:
        sc.daemon.stop()
    assert restarts > 0, "6 GPUs for 9 jobs, yet no job was preempted"

    # slurmdbd gets the job records a moment after the jobs end.
    doc: dict = {}
    ids: set[str] = set()
    for _ in range(120):  # a loaded CI machine: slurmdbd lags
        res = slurm.cmd("sacct", "-a", "-X", "-D", "-S", since, "--json")
        doc = json.loads(res.stdout)
        ids = {str(j["job_id"]) for j in doc["jobs"]}
        if ids >= {*sc.managed, plain, other} and len(doc["jobs"]) >= 11 + restarts:
            break
        time.sleep(1)
    else:
        raise AssertionError(
            f"slurmdbd holds {len(doc.get('jobs', []))} records of jobs {sorted(ids)} after "
            f"120 s; expected {11 + restarts} of {sorted({*sc.managed, plain, other})}"
        )
    delim = "|#7f3a#|"
    parsable = slurm.cmd(
        "sacct", "-a", "-X", "-D", "-S", since, "-P", "--delimiter", delim,
        "-o", ",".join(FIELDS),
    ).stdout  # fmt: skip
    capture = os.environ.get("SLURM_GAVEL_SACCT_CAPTURE")
    if capture:
        out = Path(capture) / slurm.release
        out.mkdir(parents=True, exist_ok=True)
        (out / "sacct.json").write_text(json.dumps(doc, indent=1) + "\n")
        (out / "sacct-P.txt").write_text(parsable)  # its delimiter: delim

    runs = parse_json(doc)
    by_id = {r.job_id: r for r in runs}
    # Every run of a managed job is a record; their count is the jobs' own restarts.
    got = sorted(r.job_id for r in runs if r.job_id in sc.managed)
    assert len(got) == len(sc.managed) + restarts, (got, {j: len(s) for j, s in segments.items()})
    assert by_id[plain].comment == HOSTILE and by_id[plain].gpus == {"k80": 1}
    assert by_id[other].account == "biology" and by_id[other].gpu_total == 0
    # The fallback reads the same records, the forged line included in its comment.
    p_runs, bad = parse_parsable(parsable, delim)
    assert bad == 0 and sorted(map(_key, p_runs)) == sorted(map(_key, runs))
    assert "999" not in {r.job_id for r in p_runs}

    # trace from-sacct: every managed job, with the work its runs did
    res = gavel(slurm, "trace", "from-sacct", "--since", since, "-o", str(tmp_path / "t.csv"))
    assert res.returncode == 0, res.stderr
    assert "9 jobs kept, 2 skipped" in res.stderr, (res.stderr, sorted(by_id))
    assert "no GPUs" in res.stderr and "no gavel: comment" in res.stderr
    table = load_table()
    jobs = {j.id: j for j in parse_csv((tmp_path / "t.csv").read_text(), "t.csv", table)}
    assert set(jobs) == set(sc.managed)
    assert min(j.arrival_time for j in jobs.values()) == 0
    for job_id, job in jobs.items():
        assert job.job_type == sc.managed[job_id] and job.scale_factor == 1
        row = table.row(job.job_type, 1)
        logged = sum((s.end - s.start) * row[s.gpu_type] for s in segments[job_id])
        # sacct counts whole seconds from slurmd's start to the end of the job step
        assert logged * 0.6 <= job.total_steps <= logged * 1.6 + 3 * max(row.values()), (
            job_id,
            job.total_steps,
            logged,
            segments[job_id],
        )

    # report: restarts per sacct equal the jobs' own; GPU-hours per type add up
    res = gavel(slurm, "report", "--since", since, "--by", "type", "--json", "-")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    groups = {g["group"]: g for g in rep["groups"]}
    assert sum(groups[t]["restarts"] for t in TYPES) == restarts, (groups, restarts)
    assert groups["(plain)"]["jobs"] == 1 and rep["capacity"] == {"k80": 2, "p100": 2, "v100": 2}
    for t in TYPES:
        assert groups[t]["finished"] == 3 and groups[t]["jct_s"]["mean"] > 0
        assert groups[t]["rho"]["mean"] is not None
    logged_h = sum(s.end - s.start for segs in segments.values() for s in segs) / 3600
    sacct_h = sum(h for t in TYPES for h in groups[t]["gpu_hours"].values())
    assert logged_h * 0.6 <= sacct_h <= logged_h * 1.6 + 30 / 3600, (logged_h, sacct_h)
    # with the daemon's state: its capacity, and no fewer restarts than sacct's
    assert report_daemon.returncode == 0, report_daemon.stderr
    assert json.loads(report_daemon.stdout)["capacity"] == rep["capacity"]

    # the terminal table shows the hostile comment's job escaped, not raw
    res = gavel(slurm, "report", "--since", since, "--by", "user")
    assert res.returncode == 0 and "\x1b" not in res.stdout and "root" in res.stdout
    # --plot: PNGs with their data as CSV, or without matplotlib a clear error
    plots = tmp_path / "plots"
    res = gavel(slurm, "report", "--since", since, "--by", "type", "--plot", str(plots))
    if importlib.util.find_spec("matplotlib"):
        assert res.returncode == 0, res.stderr
        assert (plots / "gpu_hours.png").stat().st_size > 0
        with (plots / "gpu_hours.csv").open(newline="") as f:
            rows = {r.pop("type"): r for r in csv.DictReader(f)}
        for t in TYPES:
            # The CSV has a column per GPU type, 0.0 where the type had none; the report
            # also names a type that only a 0 s run was on (a job preempted in the second
            # it started) with 0.0 hours. Compare the hours, not which zeros show.
            got = {k.removesuffix("_gpu_hours"): float(v) for k, v in rows[t].items() if float(v)}
            want = {k: h for k, h in groups[t]["gpu_hours"].items() if h}
            assert got == pytest.approx(want), (t, rows[t], groups[t]["gpu_hours"])
    else:
        assert res.returncode != 0 and "matplotlib" in res.stderr


def _key(r):
    return (r.job_id, r.state, r.user, r.account, r.comment, sorted(r.gpus.items()), r.elapsed,
            r.submit)  # fmt: skip

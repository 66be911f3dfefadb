"""Day one on a modern cluster: GPU types the throughput table lacks (cluster_rows.py).

A local Slurm cluster whose GPUs are typed a100 and h100, and the shipped table (V100,
P100, K80 only). Every job must run from the first round, type-blind and marked so in
`status` and in the daemon's log, and the jobs' progress reports (from two users: a cell
moves only when several users agree, daemon/progress_learning.py) must put measured a100/h100
cells into the table the daemon saves in its state_dir; a job type never run on a100
then gets an estimate there from the measured one.
"""

from __future__ import annotations

import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from own_cluster import module_cluster

from slurm_gavel.domain.throughputs import load_table

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

TOPOLOGY = "a100:1x2,h100:1x2"
MEASURED, ESTIMATED = "A3C", "ResNet-50 (batch size 64)"
BLIND = "unmeasured: type-blind"
USERS = ("root", "nobody")

# A managed job that keeps a progress report as slurm_gavel.job does (docs/user-guide.md
# section 5; bash, so it runs on every Slurm release's nodes): <spool>/<uid>/<job id>.json,
# replaced atomically, its rate measured over this run with the first step excluded. The
# GPUs are empty files, so the node's type sets the pace: 2 steps/s on a100, 4 on h100.
# $1 steps, $2 progress spool, $3 scratch folder (checkpoints).
JOB = r"""#!/bin/bash
steps="$1"; spool="$2/$(id -u)"; ckpt="$3/$SLURM_JOB_ID.ckpt"
case "$SLURMD_NODENAME" in a100-*) pace=0.5 ;; *) pace=0.25 ;; esac
step=0; [ -f "$ckpt" ] && step=$(cat "$ckpt")
run=0; t0=""
on_signal() { echo "$step" > "$ckpt"; exit 99; }
trap on_signal USR1
report() {
  [ -d "$spool" ] || return 0  # the daemon makes it when it first sees this user's job
  now=$(date +%s.%N); rate=null
  [ "$run" -ge 2 ] && rate=$(awk -v n="$run" -v a="$t0" -v b="$now" 'BEGIN {
    printf "%.4f", (n - 1) / (b - a) }')
  printf '{"format": "slurm-gavel-progress/1", "job_id": "%s", "job_type": null,
 "steps": %d, "steps_per_s": %s, "run_steps": %d, "restart_count": %d,
 "state": "%s", "hostname": "%s", "gpu": "fake", "updated": %s}\n' "$SLURM_JOB_ID" \
    "$step" "$rate" "$run" "${SLURM_RESTART_COUNT:-0}" "$1" "$SLURMD_NODENAME" "$now" \
    > "$spool/.$SLURM_JOB_ID.tmp"
  mv -f "$spool/.$SLURM_JOB_ID.tmp" "$spool/$SLURM_JOB_ID.json"
}
while [ "$step" -lt "$steps" ]; do
  sleep "$pace" & wait $!
  step=$((step + 1)); run=$((run + 1))
  [ "$run" -eq 1 ] && t0=$(date +%s.%N)
  report running
done
report finished
"""


# a cluster of its own (same release and plugins as the session's) with a100/h100
module_slurm, slurm = module_cluster(TOPOLOGY, "slurm-gavel-day-one-")


@pytest.fixture
def site() -> Iterator[Path]:
    """Job script, spool and scratch where every user can reach them (tmp_path is 0700)."""
    d = Path(tempfile.mkdtemp(prefix="slurm-gavel-day-one-site-"))
    d.chmod(0o755)
    (d / "job.sh").write_text(JOB)
    (d / "job.sh").chmod(0o755)
    (d / "scratch").mkdir()
    (d / "scratch").chmod(0o1777)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def submit(sc, site: Path, user: str, job_type: str, steps: int) -> str:
    argv = [
        "sbatch", "--parsable", "-D", "/tmp", "-o", "/dev/null", "-p", "gpu",
        f"--comment=gavel:type={job_type},scale=1",
        str(site / "job.sh"), str(steps), str(site / "progress"), str(site / "scratch"),
    ]  # fmt: skip
    res = sc.slurm.cmd(*argv) if user == "root" else sc.slurm.as_user(user, *argv)
    assert res.returncode == 0, res.stderr
    job_id = res.stdout.strip().split(";")[0]
    sc.managed[job_id] = job_type
    return job_id


def status_text(sc) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "slurm_gavel", "status", "--config", str(sc.daemon.config)],
        capture_output=True, text=True, check=True, timeout=30,
    )  # fmt: skip
    return res.stdout


def test_day_one_jobs_run_type_blind_and_the_table_learns_a100_and_h100(scenario, site):
    sc = scenario
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        pytest.fail("no user 'nobody': the test needs a second user to agree on a cell")
    with open(sc.daemon.config, "a") as f:
        f.write(f"progress_dir: {site / 'progress'}\n")
    # 7 jobs on 4 GPUs: A3C from both users (they measure a100 and h100 as they take
    # turns), one longer ResNet-50 that runs type-blind, then on an estimate.
    ids = [submit(sc, site, u, MEASURED, steps=16) for u in USERS for _ in range(3)]
    ids.append(submit(sc, site, "root", ESTIMATED, steps=80))
    sc.daemon.start()

    # The first saved round: every job considered, none skipped, each marked type-blind.
    deadline = time.monotonic() + 60
    view: dict = {}
    while time.monotonic() < deadline:
        view = sc.status() if sc.state_file.exists() else {}
        if view.get("jobs") and any(j["state"] in ("starting", "running") for j in view["jobs"]):
            break
        time.sleep(0.5)
    assert {j["id"] for j in view["jobs"]} == set(ids), view
    for j in view["jobs"]:
        assert j["state"] != "skipped", j
        assert j["unmeasured"] == {"a100": BLIND, "h100": BLIND}, j
    text = status_text(sc)
    assert "unmeasured throughputs (type-blind" in text
    assert f"  {MEASURED} x1: a100 {BLIND}, h100 {BLIND} (jobs " in text

    states = sc.wait_finished(ids, timeout=300)
    sc.daemon.stop()
    sc.assert_all_completed(states)
    assert sc.daemon.events("job_skipped") == []
    events = sc.daemon.events("throughput_unmeasured")
    blind = sorted((e["job_type"], e["gpu_type"]) for e in events if e["mark"] == BLIND)
    types = (MEASURED, ESTIMATED)
    assert blind == sorted((jt, t) for jt in types for t in ("a100", "h100"))  # once each

    # What the running jobs measured is in the table the daemon saved, the shipped
    # figures untouched; the job type that never ran on a100 was estimated there.
    learned = load_table(sc.dir / "state" / "throughputs-learned.json")
    learned_cells = [
        t for t in ("a100", "h100") if (learned.note(MEASURED, 1, t) or "").startswith("observed")
    ]
    assert learned_cells, (learned.notes, sc.daemon.events("progress_refused"))
    assert all(learned.row(MEASURED, 1)[t] > 0 for t in learned_cells)
    shipped = load_table()
    for key, row in shipped.alone.items():
        assert {t: learned.alone[key][t] for t in row} == row
    estimated = {e["gpu_type"] for e in events if e["mark"] == "estimate"}
    assert estimated and estimated <= set(learned_cells), events
    assert all(e["job_type"] == ESTIMATED for e in events if e["mark"] == "estimate")

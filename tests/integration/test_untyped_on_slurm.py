"""Jobs of models the table never saw, managed from submission on the real local Slurm
cluster: `--comment=gavel:` and no type. Each paces its steps to its own
speed per GPU type (GAVEL_EMULATE_RATES) and reports progress through the spool; the
daemon (`slurm-gavel run`, LEARNED with its trust bounds) learns each job's own row
from those reports and from Slurm's record of the GPU type each run ran on, keeps it
in its state file, and `status --json` shows each cell measured with the seconds of
running behind it. (That the placement then follows the learned rows: on the simulated
cluster, tests/daemon/test_daemon_job_rows.py, and on real Slurm with two jobs contending
for one GPU of each type, test_learned_placement_on_slurm.py: here nothing contends.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rated_jobs import rated_jobs
from waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

# steps/s per GPU type of two models no table has: one 10x faster on a V100 than on
# a K80, one faster on the K80
RATES = {"fast-on-v100": "v100=20,p100=10,k80=2", "fast-on-k80": "v100=3,p100=3,k80=4"}
# Each runs over a minute where it first starts (both start on a V100: nothing is known
# of them): a report counts once the job's progress bounds it, after the start-up
# allowance of running there (TrustBounds.start_allowance_s, 30 s); 400 steps at 20
# steps/s ended before any report could.
STEPS = {"fast-on-v100": 1600, "fast-on-k80": 400}


def _rates(text: str) -> dict[str, float]:
    return {k: float(v) for k, v in (p.split("=") for p in text.split(","))}


def test_untyped_jobs_run_managed_and_learn_their_own_rows(scenario):
    sc = scenario
    rated = rated_jobs(sc)
    jobs = {}
    for name, rates in RATES.items():
        jobs[name] = rated.submit(name, rates, STEPS[name])
        # held on arrival: managed from submission, no type needed
        assert sc.slurm.show(jobs[name])["Priority"] == "0"
    sc.daemon.start()

    def learned() -> dict | None:
        doc = sc.state_doc() or {}
        rows = ((doc.get("scheduler") or {}).get("plugins") or {}).get("learned_rows") or {}
        cells = {j: (rows.get("jobs") or {}).get(j, {}).get("measured") for j in jobs.values()}
        return cells if all(cells.values()) else None

    cells = wait_for(learned, 120, "both jobs' first measured cell in the state file", 1.0)
    view = subprocess.run(
        [sys.executable, "-m", "slurm_gavel", "status", "--config", str(sc.daemon.config),
         "--json"], capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    shown = {j["id"]: j for j in json.loads(view.stdout)["jobs"]}
    states = sc.wait_finished(list(jobs.values()), timeout=240)
    sc.daemon.stop()
    sc.assert_all_completed(states)
    for name, job in jobs.items():
        true = _rates(RATES[name])
        ran = set(rated.gpu_types(job))
        for gpu, (rate, seconds, *_earlier_runs) in cells[job].items():
            # a cell only for a type Slurm ran the job on, at its own speed there
            assert gpu in ran, (name, gpu, ran)
            assert rate == pytest.approx(true[gpu], rel=0.15), (name, gpu, rate)
            assert seconds > 0
        row = shown[job]["throughput"]
        assert shown[job]["job_type"] == ""
        measured = {t for t, c in row.items() if c["backed_by"] == "measured"}
        assert measured and measured <= ran, (name, row)
        assert all(row[t]["seconds"] > 0 for t in measured)

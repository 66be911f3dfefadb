"""Restart-aware rounds on the real local Slurm cluster: more jobs than GPUs,
so the daemon preempts and resumes them; it times each restart (the backend's
checkpoint wait, then the resumed run's start until its progress reports show steps
again), reports it with the act, and the round keeps the job's learned restart cost
in its own slot of the state file; Prometheus counts it."""

from __future__ import annotations

import pytest
from rated_jobs import rated_jobs
from waiting import wait_for

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

RATES = "v100=20,p100=10,k80=10"


def test_restarts_are_timed_and_learned_per_job(scenario):
    sc = scenario
    # each run kept 2 s / 0.1 = 20 s (5 rounds), then the 12 jobs take turns on the GPUs
    rated = rated_jobs(sc, "restart_aware: true\npreemption_overhead_seconds: 2\n")
    jobs = [rated.submit(f"j{i}", RATES, 4000) for i in range(12)]
    sc.daemon.start()

    def learned() -> dict[str, float] | None:
        doc = sc.state_doc() or {}
        # the round keeps them in their own slot (core/restart_costs/restart_costs.py)
        slots = (doc.get("scheduler") or {}).get("plugins") or {}
        got = dict(slots.get("restart_costs") or {})
        return got or None

    try:
        costs = wait_for(learned, 240, "a job's measured restart cost in the state file", 1.0)
    except AssertionError:
        doc = sc.state_doc() or {}
        accts = (doc.get("scheduler") or {}).get("jobs") or {}
        log = sc.daemon.log_path.read_text().splitlines()
        raise AssertionError(
            f"accounts: {accts}\nstatus: {sc.states(jobs)}\nlog tail:\n" + "\n".join(log[-40:])
        ) from None
    # status and the AdminComment say which runs are kept, on the real cluster too
    kept = "kept where it runs until this run has paid for its restart"

    def kept_in_slurm() -> str | None:
        for j in sc.status()["jobs"]:
            if kept in j["why"]:
                out = sc.slurm.cmd("scontrol", "show", "job", "--oneliner", j["id"]).stdout
                if kept in out:
                    return str(j["id"])
        return None

    wait_for(kept_in_slurm, 60, "a kept run's reason in status and its AdminComment", 1.0)
    metrics = sc.metrics()
    sc.daemon.stop()
    assert set(costs) <= set(jobs)
    # a restart here: the grace to exit (< 3 s), requeue, Slurm's start, python's start
    # and the first progress report (1 s interval); never the 600 s cap
    assert all(0.0 < c < 120.0 for c in costs.values()), costs
    assert metrics["slurm_gavel_restart_seconds_total"] > 0
    assert metrics["slurm_gavel_restart_gpu_seconds_total"] > 0
    # a resumed job continued from its checkpoint
    for j in costs:
        starts = rated.starts(j)
        if starts:
            assert len(starts) >= 2 and starts[-1].step > 0, starts

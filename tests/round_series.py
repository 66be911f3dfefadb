"""Running a series of scheduling rounds on a simulated cluster, for the tests of the round.

Imported as a plain module: pytest puts tests/core on sys.path (it is not a package).
"""

from __future__ import annotations

from slurm_gavel.backends.simulated import SimulatedCluster
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_report import RoundReport
from slurm_gavel.core.scheduler import run_round
from slurm_gavel.core.scheduler_state import SchedulerState


def run_rounds(
    sim: SimulatedCluster, config: SchedulerConfig, n: int, state: SchedulerState | None = None
) -> tuple[SchedulerState, list[RoundReport]]:
    """N rounds from `state` (a fresh one by default), the clock advanced one round
    length after each: the last state and every round's report."""
    state = SchedulerState() if state is None else state
    reports = []
    for _ in range(n):
        state, report = run_round(state, sim, config)
        reports.append(report)
        sim.advance(sim.clock + config.settings.round_seconds)
    return state, reports

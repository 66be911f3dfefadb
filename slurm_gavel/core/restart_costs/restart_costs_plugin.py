"""The measured restart costs' plugin (round_plugins.py has the table of plugins): after
the act, the daemon's measurements into the slot of restart_costs.py. No settings.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.core.restart_costs import restart_costs
from slurm_gavel.core.round_stages import RoundContext


@dataclass(frozen=True)
class RestartCosts:
    """Each job's restart cost as the daemon measured it (daemon/restart_clock.py),
    received with the backend's report of the act (``ActResult.restart_costs``) and
    kept in its own slot (restart_costs.py), where restart_aware.restart_cost reads it
    before any configured figure. The simulator measures nothing: its slot stays empty."""

    name: str = "restart_costs"

    def after_act(self, ctx: RoundContext) -> None:
        slot = ctx.state.plugins.restart_costs
        if slot or ctx.result.restart_costs:
            restart_costs.fold(slot, ctx.result.restart_costs, ctx.state.jobs)

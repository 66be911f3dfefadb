"""The learned rows' settings (``PluginSettings.learned_rows``, plugin_settings.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_gavel.core.learned_rows.explore import Exploration
from slurm_gavel.core.learned_rows.row_trust import TrustBounds


@dataclass(frozen=True)
class LearnedRowsSettings:
    # What a job's own reports may move its row by (row_trust.py), the same in the
    # daemon (its users write the reports) and the simulator (whose noisy reports go
    # through the same bounds). None takes measurements as they come: for ablations
    # only. YAML: learning.ratio_factor, step_factor, start_allowance_s.
    bounds: TrustBounds | None = field(default_factory=TrustBounds)
    # Exploration budget (explore.py): None, no optimism for unmeasured cells.
    # YAML: learning.explore_*.
    explore: Exploration | None = None

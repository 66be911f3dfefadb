"""The features that plug into the round's stages (round_stages.py), and the one place
that chooses them from the config (``pipeline_for``). Each feature is a package of its
own under core/, holding its plugin, its settings, its state and its logic:

| plugin | package | stages | on | settings | state |
|---|---|---|---|---|---|
| MoldableCounts | moldable/ | enrich | always (1) | MoldableSettings | MoldMemory |
| LearnedRows | learned_rows/ | enrich | ``knowledge: learned`` | LearnedRowsSettings | JobRows |
| UnresponsiveNodes | unresponsive_nodes/ | keep | always | none | none |
| RestartAware | restart_aware/ | keep, assign, after | (5) | RestartAwareSettings | RunProtection |
| SpaceSharing | space_sharing/ | pose, steady | a packing policy (2) | none | none |
| Mechanism | core/ (mechanism_plugin.py) | assign | the default (3) | MechanismSettings | none |
| Baseline | baseline/ | assign | ``SchedulerConfig.baseline`` | none | none |
| RestartCosts | restart_costs/ | after | always (4) | none | restart costs |

(1) a no-op without GPU ranges; (2) ``PACKING_POLICIES``; (3) Gavel's, with the stay
credit; (4) a no-op without measurements; (5) ``restart_aware``. Baseline: no allocation,
no mechanism.

Each plugin is a small object with a name and the stage methods it implements, in its
package's ``<feature>_plugin.py``. Its settings are ``config.plugins.<name>`` (its
package's ``<feature>_settings.py``, gathered in plugin_settings.py), what it keeps
between rounds ``state.plugins.<name>`` (scheduler_state.PluginSlots), and what it
carries between its stages within a round ``ctx.notes[name]``. Adding a feature: write
its package and plugin (the smallest real one, UnresponsiveNodes, is the example in
CONTRIBUTING.md) and add it in ``pipeline_for``; scheduler.run_round is not touched.
"""

from __future__ import annotations

from slurm_gavel.core.baseline.baseline_plugin import Baseline
from slurm_gavel.core.learned_rows.job_rows import Knowledge
from slurm_gavel.core.learned_rows.learned_rows_plugin import LearnedRows
from slurm_gavel.core.mechanism_plugin import Mechanism
from slurm_gavel.core.moldable.moldable_plugin import MoldableCounts
from slurm_gavel.core.restart_aware.restart_aware_plugin import RestartAware
from slurm_gavel.core.restart_costs.restart_costs_plugin import RestartCosts
from slurm_gavel.core.round_config import SchedulerConfig
from slurm_gavel.core.round_stages import Pipeline
from slurm_gavel.core.space_sharing.space_sharing_plugin import SpaceSharing
from slurm_gavel.core.unresponsive_nodes.unresponsive_nodes_plugin import UnresponsiveNodes
from slurm_gavel.policies import PACKING_POLICIES


def pipeline_for(config: SchedulerConfig) -> Pipeline:
    """The round's plugins for this config, stage by stage."""
    learned = (LearnedRows(),) if config.knowledge is Knowledge.LEARNED else ()
    costs = RestartCosts()
    shares = (SpaceSharing(),) if config.policy in PACKING_POLICIES else ()
    if config.baseline is not None:
        return Pipeline(
            assign=Baseline(config.baseline),
            enrich=learned,
            keep=(UnresponsiveNodes(),),
            after_act=(costs,),
            allocates=False,
        )
    enrich = (MoldableCounts(), *learned)  # a job's count first: its row is at that count
    if config.plugins.restart_aware.enabled:
        aware = RestartAware()
        # a run on a node that stopped answering stays whatever protection says; this
        # round's measured costs count from the next round on: after the new runs'
        # protection, which is at the cost the round planned with
        return Pipeline(
            assign=aware,
            enrich=enrich,
            keep=(aware, UnresponsiveNodes()),
            after_act=(aware, costs),
            pose=shares,
            steady=shares,
        )
    return Pipeline(
        assign=Mechanism(),
        enrich=enrich,
        keep=(UnresponsiveNodes(),),
        after_act=(costs,),
        pose=shares,
        steady=shares,
    )

"""The moldable counts' settings (``PluginSettings.moldable_counts``, plugin_settings.py)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MoldableSettings:
    # Not Gavel, opt-in: a moldable job's count from one max-min LP over (GPU type,
    # count) (core/moldable/mold_joint.py) instead of least-first + grow into idle GPUs.
    # YAML: moldable_lp.
    lp: bool = False
    # Least-first under learned rows: a waiting moldable job may grow past the largest
    # count it has a row for, into GPUs no known gain takes (core/moldable/moldable.py, 2.). On
    # in the daemon (a real job just runs at the count); off in the simulator, whose
    # jobs have no true rate at a count the table lacks. YAML: moldable_untried.
    untried: bool = False

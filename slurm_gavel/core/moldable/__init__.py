"""Moldable counts: a job that gives a GPU range runs at a count chosen each round
(least-first, or one joint LP). Plugin: moldable_plugin.py; settings:
moldable_settings.py; state: mold_round.py (``MoldMemory``, its JSON in
mold_memory_doc.py).

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""

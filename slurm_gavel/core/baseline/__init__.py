"""The simulator's baselines (Slurm FIFO): a plugin that places jobs itself, without
allocation or mechanism. Plugin: baseline_plugin.py; no settings, no state.

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""

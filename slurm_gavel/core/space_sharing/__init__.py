"""Space sharing (Gavel's packed policies): pairs of jobs on the same GPUs. Plugin:
space_sharing_plugin.py; no settings (the policy turns it on), no state.

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""

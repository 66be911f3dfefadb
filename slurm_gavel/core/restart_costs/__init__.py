"""Measured restart costs: the daemon's per-job figures, kept for the rounds that plan
with them. Plugin: restart_costs_plugin.py; no settings; state: restart_costs.py.

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""

"""Restart-aware rounds: each run protected for its restart cost / budget, the mechanism
placing around protected runs, consolidation and fill moves. Plugin:
restart_aware_plugin.py; settings: restart_aware_settings.py; state: run_protection.py
(``RunProtection``).

Imports the round's interfaces (slurm_gavel.core's own modules), not another
feature's internals, except where tests/test_layering.py names it."""

"""The scheduling core: the domain types, the throughput table, the allocation problem, the
round mechanism and the round itself (scheduler.run_round, its stages and config, the
scheduler state); each feature of the round a package of its own (learned_rows/,
moldable/, restart_aware/, restart_costs/, space_sharing/, unresponsive_nodes/,
baseline/) with its plugin, settings, state and logic. Pure: it imports no backend,
no simulator and no daemon (tests/test_layering.py checks it); the policies it runs live in
slurm_gavel.policies."""

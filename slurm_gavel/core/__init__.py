"""The scheduling core: the domain types, the throughput table, the allocation problem, the
round mechanism and the round itself (scheduler.run_round). Pure: it imports no backend,
no simulator and no daemon (tests/test_layering.py checks it); the policies it runs live in
slurm_gavel.policies."""

"""The live daemon (`slurm-gavel run`): its config, the round loop (daemon.py), what it
learns from the jobs' progress reports, its state on disk, the status views it publishes
and its metrics. Talks to Slurm only through slurm_gavel.backends."""

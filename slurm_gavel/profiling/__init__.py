"""`slurm-gavel profile`: measuring the reference workloads into a throughput table."""

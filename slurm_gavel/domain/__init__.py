"""The domain: plain data and its contracts, below the policies and the round
(jobs, allocations and problems, the cluster as observed, throughput tables, the
`gavel:` comment grammar, field checks). Imports nothing else of slurm_gavel."""

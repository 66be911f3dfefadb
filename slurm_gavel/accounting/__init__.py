"""Slurm's accounting (sacct) read back: `slurm-gavel trace from-sacct` and `report`."""

"""slurm-gavel: Gavel's heterogeneity-aware scheduling policies for Slurm clusters."""

from slurm_gavel._version import __version__

__all__ = ["__version__"]

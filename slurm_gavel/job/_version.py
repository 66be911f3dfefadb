"""The one version of slurm-gavel and slurm-gavel-job (both pyproject.toml files repeat it;
tests/job/test_packaging.py checks that they agree)."""

__version__ = "0.1.0"

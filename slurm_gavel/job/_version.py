"""slurm-gavel-job's version, released with the scheduler's (slurm_gavel/_version.py and
both pyproject.toml files repeat it; tests/job/test_packaging.py checks that they agree)."""

__version__ = "0.1.0"

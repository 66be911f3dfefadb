"""The scheduler's version (pyproject.toml repeats it; slurm-gavel-job, the job library,
keeps its own in slurm_gavel/job/_version.py: tests/job/test_packaging.py checks that the
three agree). The scheduler takes nothing of its identity from the job library."""

__version__ = "0.1.0"

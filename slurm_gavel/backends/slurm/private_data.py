"""Slurm's PrivateData, read from `scontrol show config`: whether squeue hides other
users' jobs, so that `status_privacy: auto` hides them in `slurm-gavel status` too.

scontrol prints the flags as a comma list ("PrivateData = jobs,usage"), "none" when
none is set; `PrivateData=all` in slurm.conf is printed as every flag, but the word
"all" is accepted too.
"""

from __future__ import annotations

# The flags that hide other users' jobs from squeue and scontrol show job.
HIDES_JOBS = frozenset({"jobs", "all"})


def private_data_value(config_text: str) -> str | None:
    """The PrivateData value of `scontrol show config` ("none", "jobs,usage"), or None
    when the line is missing."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "PrivateData":
            return value.strip() or "none"
    return None


def hides_jobs(value: str) -> bool:
    """Whether a PrivateData value hides other users' jobs."""
    return bool({w.strip().lower() for w in value.split(",")} & HIDES_JOBS)


__all__ = ["HIDES_JOBS", "hides_jobs", "private_data_value"]

"""Why the round could not consider a job: a code, the admin's detail, and the sentence
its owner sees, in one place.

The round (round_jobs.considered_jobs) gives each job it leaves out a ``Skip``. The
daemon logs the detail (it may quote the user's job type: the admin's log only), and
`status`, `explain` and the job's AdminComment show the owner the fixed sentence of
the code (``owner_sentence``), built from the daemon's own numbers, never from text a
user wrote. The one detail an owner sees as it is, is Slurm's own reason for not
starting a job (WAITING_ON_CLUSTER: Slurm's reason names, a time, a dependency as
Slurm printed it after checking it at submit).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class SkipCode(StrEnum):
    # Slurm would not start it now (its reason, a dependency, a begin time)
    WAITING_ON_CLUSTER = "waiting_on_cluster"
    # its job type is not in the site's throughput table (table knowledge)
    UNKNOWN_TYPE = "unknown_type"
    # the table has its type, but not at its GPU count
    NO_FIGURES_AT_SCALE = "no_figures_at_scale"
    # its own request (constraint, type, node list) fits no usable node
    NO_NODE_FITS = "no_node_fits"
    # no usable GPU type has a throughput for it
    NO_USABLE_TYPE = "no_usable_type"
    # more GPUs of one type than any usable GPU type has
    TOO_BIG = "too_big"
    # anything else the round refused (the admin's log says what)
    OTHER = "other"


# The prefix of a WAITING_ON_CLUSTER detail, before Slurm's words.
WAITING_ON_CLUSTER = "Slurm would not start it now: "


@dataclass(frozen=True)
class Skip:
    code: SkipCode
    detail: str  # for the admin: may quote the user's job type

    def __str__(self) -> str:
        return self.detail


def owner_sentence(code: str, detail: str, scale_factor: int) -> str:
    """What the job's owner sees for a skip (`status`, `explain`, AdminComment): a
    fixed sentence per code, with the daemon's own figures; ``code`` as the status
    file holds it (an unknown one reads as OTHER)."""
    if code == SkipCode.WAITING_ON_CLUSTER:
        # Slurm's own words: no user text, and the user learns what to change
        return "not scheduled: " + detail
    if code == SkipCode.UNKNOWN_TYPE:
        return "not scheduled: its job type is not in the throughput table of the site"
    if code == SkipCode.NO_FIGURES_AT_SCALE:
        return (
            "not scheduled: the throughput table of the site has no figures for its job type "
            f"on {scale_factor} GPUs"
        )
    if code == SkipCode.TOO_BIG:
        return (
            f"not scheduled: it needs {scale_factor} GPUs of one type, more than any usable "
            "GPU type has"
        )
    if code == SkipCode.NO_NODE_FITS:
        return (
            "not scheduled: its own request (GPU type, constraint, node list or "
            "reservation) fits no usable node"
        )
    if code == SkipCode.NO_USABLE_TYPE:
        return "not scheduled: no usable GPU type has a throughput for its job type"
    return "not scheduled: the daemon cannot consider it (the admin sees why in its log)"

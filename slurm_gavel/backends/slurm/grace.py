"""Each managed job's own grace: seconds from the checkpoint signal to requeue-hold.

A job asks with ``grace=SECONDS`` in its comment (``--gavel-grace``); the admin's
``checkpoint.max_grace_seconds`` caps the ask, and a job asking nothing gets
``checkpoint.grace_seconds``. Pure: the backends read comments, this decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from slurm_gavel.domain.comment_grammar import CommentReading


@dataclass(frozen=True)
class Grace:
    seconds: float
    asked: int | None  # what the comment asked, None when nothing (or unreadable)

    @property
    def capped(self) -> bool:
        return self.asked is not None and self.asked > self.seconds


def job_grace(reading: CommentReading, *, default_s: float, cap_s: float | None) -> Grace:
    """The grace for a job whose comment reads so. An unreadable comment gets the
    default: such a job is not managed, and the grace must never be the reason it
    loses work."""
    spec = reading.spec
    if spec is None or spec.grace is None:
        return Grace(default_s, None)
    cap = default_s if cap_s is None else cap_s
    return Grace(min(float(spec.grace), cap), spec.grace)

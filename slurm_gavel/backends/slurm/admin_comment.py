"""The daemon's one-line reason, written where users already look: the AdminComment.

    scontrol update JobId=12,15,19 "AdminComment=slurm-gavel: waiting: ..."

`scontrol show job`, `squeue --json`'s ``admin_comment`` and, from 24.11,
`squeue -O admin_comment` show it to the job's owner (user guide, "Where is my
job?"); only operators and admins can set it, and the daemon is one, so a user
cannot forge it. Jobs with the same text share one command (scontrol takes
a job list), and the daemon sends only texts that changed since it last wrote
them (daemon/publish.py), so a quiet round issues no command at all.

The text is built by the daemon from its own data (status_view.why); this module
still makes whatever it is given safe for Slurm: printable ASCII only, no quote
or backslash, bounded, and it goes as one argv element (no shell; scontrol keeps
the quotes of a quoted value read from stdin, so the batch-on-stdin form is not
used). Pure functions; the backends issue the commands.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from slurm_gavel.domain.model import JobId

PREFIX = "slurm-gavel: "
MAX_CHARS = 400  # Slurm refuses comments over 1024 bytes; a line stays readable
JOBS_PER_COMMAND = 100  # keeps one argv short (ids of 10 digits: ~1 kB)
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?", re.ASCII)  # a job, or an array task (28_2)


def admin_comment(text: str) -> str:
    """The AdminComment for a reason: printable ASCII, no quotes, bounded, prefixed.
    The backticks around a command in the daemon's reasons (`scontrol release 5`) are
    dropped, not turned into "?" as any other unsafe character: users read this text
    in squeue and scontrol."""
    text = text.replace("`", "")
    clean = "".join(c if " " <= c <= "~" and c not in "\"'\\`" else "?" for c in text)
    clean = " ".join(clean.split())
    if len(clean) > MAX_CHARS - len(PREFIX):
        clean = clean[: MAX_CHARS - len(PREFIX) - 3] + "..."
    return PREFIX + clean


@dataclass(frozen=True)
class CommentOrder:
    """One AdminComment for some jobs: one scontrol command."""

    job_ids: tuple[JobId, ...]
    text: str

    def argv(self) -> list[str]:
        return [
            "scontrol",
            "update",
            f"JobId={','.join(self.job_ids)}",
            f"AdminComment={self.text}",
        ]


def comment_orders(texts: Mapping[JobId, str]) -> list[CommentOrder]:
    """Jobs grouped by their (made safe) text, at most JOBS_PER_COMMAND per order.
    A job id that is not a plain number or an array task (28_2) is left out: it would
    not be a Slurm job."""
    groups: dict[str, list[JobId]] = {}
    # Thousands of jobs share a handful of reasons (the first round after a start
    # writes every job's): each distinct text is made safe once.
    safe: dict[str, str] = {}
    for job_id, text in sorted(texts.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if _JOB_ID.fullmatch(job_id):
            clean = safe.get(text)
            if clean is None:
                clean = safe[text] = admin_comment(text)
            groups.setdefault(clean, []).append(job_id)
    orders = []
    for text, ids in groups.items():
        for i in range(0, len(ids), JOBS_PER_COMMAND):
            orders.append(CommentOrder(tuple(ids[i : i + JOBS_PER_COMMAND]), text))
    return orders

"""Held managed jobs the daemon cannot use go back to Slurm, never held forever.

job_submit.lua holds every job whose comment claims it for slurm-gavel. When the
daemon cannot schedule such a job (its comment breaks the grammar: a job from before
the Lua or a grammar change; its job type or scale is not in the throughput table; its
partition is none the daemon manages: submitted there, or moved there by its owner
while held) nobody else could release it: the Lua forbids users to. The daemon therefore gives
it back to Slurm's own scheduling:

    scontrol update JobId=N "Comment=gavel-released: <reason>" [Gres=gpu:G]
    scontrol release N

The new comment is what the user sees in ``squeue -o %k`` and ``scontrol show job``,
and it is plain under the grammar (it does not start with ``gavel:``), so no enforcer
claims the job again. ``Gres`` puts back the GPU request the Lua moved into the
comment (``scale=``), per node, when the scale is known. Pure functions; the Slurm
backend issues the commands.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from slurm_gavel.backends.slurm.eligibility import deadline_passed, expired
from slurm_gavel.backends.slurm.records import SlurmJob
from slurm_gavel.backends.slurm.view import is_managed_partition
from slurm_gavel.domain.comment_grammar import (
    MAX_SCALE,
    is_managed_comment,
)
from slurm_gavel.domain.model import JobId

RELEASED_PREFIX = "gavel-released: "
MAX_REASON_CHARS = 600  # Slurm refuses comments over 1024 bytes
WAITING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "SPECIAL_EXIT"})
_SCALE = re.compile(r"(?:^gavel:|,)scale=([1-9][0-9]{0,3})(?:,|$)", re.ASCII)


@dataclass(frozen=True)
class GiveBack:
    job_id: JobId
    comment: str
    gres: str | None  # "gpu:G" per node, None: leave the request as it is

    def argv(self) -> list[str]:
        """One scontrol command (argv, never a shell): scontrol keeps the quotes of a
        quoted value read from stdin, so a comment with spaces goes as one argument."""
        gres = [f"Gres={self.gres}"] if self.gres else []
        return ["scontrol", "update", f"JobId={self.job_id}", f"Comment={self.comment}", *gres]


def released_comment(reason: str) -> str:
    """The comment the user will read: printable ASCII only, no quotes, bounded."""
    text = "".join(c if " " <= c <= "~" and c not in '"\\' else "?" for c in reason)
    text = text.replace("  ", " ").strip()
    if len(text) > MAX_REASON_CHARS:
        text = text[: MAX_REASON_CHARS - 3] + "..."
    return RELEASED_PREFIX + text + "; released to Slurm's own scheduling"


def gres_back(scale: int | None, node_count: int) -> str | None:
    """The per-node GPU request for a scale, when it divides evenly over the nodes."""
    if scale is None or scale < 1:
        return None
    nodes = max(1, node_count)
    return f"gpu:{scale // nodes}" if scale % nodes == 0 else None


def scale_in(comment: str) -> int | None:
    """The GPU count the Lua moved into a comment (``scale=N``), read even where the
    rest of the comment is refused, so a given-back job gets its GPUs back."""
    m = _SCALE.search(comment)
    return int(m.group(1)) if m and int(m.group(1)) <= MAX_SCALE else None


def refused_held(
    jobs: Iterable[SlurmJob], managed_partitions: Collection[str] | None, now: float = 0.0
) -> dict[JobId, str]:
    """Held jobs whose comment claims them for slurm-gavel but that the daemon cannot
    schedule, with the reason: a comment that breaks the grammar (the daemon reads with
    no weight cap: it clamps instead), a partition it does not manage (outside()), or a
    --deadline passed by ``now`` (Slurm, released, ends it as DEADLINE without running
    it; held, it would wait for ever: eligibility.deadline_passed)."""
    out: dict[JobId, str] = {}
    for sj in jobs:
        if not is_managed_comment(sj.comment):
            continue
        if sj.state not in WAITING or not sj.held:
            continue
        if not is_managed_partition(sj.partitions, managed_partitions):
            assert managed_partitions is not None  # None manages every partition
            out[sj.job_id] = outside(sj, managed_partitions)
            continue
        reading = sj.reading
        if reading.refusal is not None:
            out[sj.job_id] = str(reading.refusal)
            continue
        spec = reading.spec
        # not a job its owner holds: the Lua lets only the owner release that one
        if now and deadline_passed(sj, now) and spec is not None and not spec.user_hold:
            out[sj.job_id] = expired(sj)
    return out


def outside(sj: SlurmJob, managed_partitions: Collection[str]) -> str:
    """Why a held job with a gavel comment is given back: its partition is none the
    daemon manages. Its owner moved it there (`scontrol update Partition=`, which
    job_submit.lua allows while it is held) or submitted it there; job_submit.lua held
    it all the same, and only the daemon releases a managed job, so without this it
    would wait forever. It runs there as a plain job."""
    where = ",".join(sj.partitions) or "(none)"
    managed = ",".join(sorted(managed_partitions)) or "(none)"
    return (
        f"partition {where} is not managed by the gavel scheduler (it manages {managed}); "
        "the job runs there as a plain Slurm job, not preempted; to have it scheduled by "
        "gavel, submit it again to a managed partition"
    )


def give_back_orders(
    reasons: dict[JobId, str], jobs: dict[JobId, SlurmJob], scales: dict[JobId, int]
) -> list[GiveBack]:
    """The orders for the jobs still waiting; a job Slurm no longer lists is skipped.
    scales: the managed jobs' scale factors; for the others the comment's scale=."""
    orders = []
    for job_id, reason in sorted(reasons.items()):
        sj = jobs.get(job_id)
        if sj is None or sj.state not in WAITING:
            continue
        gres = gres_back(scales.get(job_id) or scale_in(sj.comment), sj.node_count)
        orders.append(GiveBack(job_id, released_comment(reason), gres))
    return orders

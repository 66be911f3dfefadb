"""Shares come from the admin, never from the user.

A managed job's priority weight is the admin's weight for its Slurm QOS times the
user's own factor (``weight=W`` in the comment, ``--gavel-priority``), and that factor
is capped at ``max_user_weight`` (default 1): a user can only lower their share, like
``--nice``. Accounts get their weight from the admin too: the entity weights of
hierarchical_max_min_fairness. QOS and account are read from Slurm's job record,
which only admins set (sacctmgr), so no user text reaches a share.

job_submit.lua and the SPANK plugin refuse a weight above the cap at submit; this is
the daemon's side: a job that slipped through (submitted before the cap was lowered,
or on a cluster without the Lua) is clamped to the cap and logged once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from slurm_gavel.domain.cluster_model import ClusterSnapshot
from slurm_gavel.domain.comment_grammar import DEFAULT_MAX_USER_WEIGHT
from slurm_gavel.domain.model import JobId

MAX_ADMIN_WEIGHT = 1e6  # keeps weights products well inside the solvers' range


@dataclass(frozen=True)
class WeightsConfig:
    """The daemon config's ``weights:`` section."""

    # The cap on a user's own weight. Keep equal to MAX_USER_WEIGHT in
    # job_submit.lua and the SPANK plugin's max_weight= (all default 1).
    max_user_weight: float = DEFAULT_MAX_USER_WEIGHT
    # Slurm QOS -> the weight of every job in it; a QOS not listed weighs 1.
    qos: Mapping[str, float] = field(default_factory=dict)
    # Slurm account -> its weight among accounts (hierarchical_max_min_fairness);
    # an account not listed weighs 1.
    accounts: Mapping[str, float] = field(default_factory=dict)


def job_weight(user_weight: float, qos: str | None, weights: WeightsConfig) -> float:
    """The admin's QOS weight times the user's factor, the factor capped."""
    return weights.qos.get(qos or "", 1.0) * min(user_weight, weights.max_user_weight)


def apply_weights(
    snap: ClusterSnapshot,
    weights: WeightsConfig,
    on_capped: Callable[[JobId, float], None] = lambda job, weight: None,
) -> ClusterSnapshot:
    """Every job's priority weight as the admin set it (see module doc).

    on_capped(job, user_weight) is called for each job whose own weight was above the
    cap (the daemon logs it once per job).
    """
    jobs = []
    changed = False
    for o in snap.jobs:
        user = o.job.priority_weight
        if user > weights.max_user_weight:
            on_capped(o.job.id, user)
        w = job_weight(user, o.job.qos, weights)
        if w != user:
            o = replace(o, job=replace(o.job, priority_weight=w))
            changed = True
        jobs.append(o)
    return replace(snap, jobs=tuple(jobs)) if changed else snap


def capped_message(job: JobId, user_weight: float, weights: WeightsConfig) -> dict[str, object]:
    """The fields of the daemon's weight_capped event."""
    return {
        "job": job,
        "weight": user_weight,
        "cap": weights.max_user_weight,
        "fix": "job_submit.lua and the SPANK plugin refuse this at submit; check that "
        "MAX_USER_WEIGHT and max_weight= equal weights.max_user_weight",
    }

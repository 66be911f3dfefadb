"""The private status view: each user sees their own managed jobs only.

Where Slurm's PrivateData hides other users' jobs from squeue, a world-readable
status.json listing every job would undo it. With ``status_privacy`` private
(config.py; ``auto`` follows PrivateData, daemon/publish.py) the daemon writes
instead:

- status.json (0644) without job rows: ``"private": true``, the daemon line, the
  round, the capacity and the number of jobs per state (``job_states``);
- one view per user with managed jobs, ``status.d/<uid>.json`` (0600, owned by that
  user; status_d.py writes them), holding that user's jobs only.

A job of another user is never named in a user's view: where a job shares its GPUs
with one (``partner``, ``pair_cell``), the partner's id and job type read
``HIDDEN``. Jobs whose uid Slurm did not give (or gave as no plain uid) are in no
user's view: root and the daemon's user see them in the full view (state.json).

Pure functions over the full view (status_view.py): no I/O.
"""

from __future__ import annotations

from typing import Any

HIDDEN = "hidden"  # what a user's view shows in place of another user's job id or type
MAX_UID = 2**32 - 2  # (uid_t)-1 means "no uid" to the kernel


def job_uid(job: dict[str, Any]) -> int | None:
    """The job's uid when it is a plain one (an int within uid_t), else None."""
    uid = job.get("user_id")
    if isinstance(uid, bool) or not isinstance(uid, int) or not 0 <= uid <= MAX_UID:
        return None
    return uid


def public_summary(view: dict[str, Any]) -> dict[str, Any]:
    """status.json in private mode: the full view less its job rows."""
    states: dict[str, int] = {}
    for j in view["jobs"]:
        state = str(j.get("state"))
        states[state] = states.get(state, 0) + 1
    return {**view, "private": True, "jobs": [], "notices": [], "job_count": len(view["jobs"]),
            "job_states": dict(sorted(states.items()))}  # fmt: skip


def user_views(view: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """uid -> that user's view: the full view's header, the user's jobs only."""
    by_uid: dict[int, list[dict[str, Any]]] = {}
    for j in view["jobs"]:
        uid = job_uid(j)
        if uid is not None:
            by_uid.setdefault(uid, []).append(j)
    notices: dict[int, list[dict[str, Any]]] = {}
    for n in view.get("notices") or []:
        uid = job_uid(n)
        if uid is not None:
            notices.setdefault(uid, []).append(n)
            by_uid.setdefault(uid, [])
    header = {k: v for k, v in view.items() if k not in ("jobs", "notices")}
    out = {}
    for uid, jobs in by_uid.items():
        own = {j["id"] for j in jobs}
        rows = [_redact(j, own) for j in jobs]
        out[uid] = {**header, "private": True, "user_id": uid, "jobs": rows,
                    "notices": notices.get(uid, [])}  # fmt: skip
    return out


def _redact(job: dict[str, Any], own: set[str]) -> dict[str, Any]:
    """The job with its GPU partner's id and job type hidden unless the partner is the
    same user's job."""
    partner = job.get("partner")
    if partner is None or partner in own:
        return job
    out = {**job, "partner": HIDDEN}
    if isinstance(job.get("pair_cell"), dict):
        out["pair_cell"] = {**job["pair_cell"], "partner": HIDDEN, "partner_type": HIDDEN}
    return out


def empty_user_view(summary: dict[str, Any], uid: int) -> dict[str, Any]:
    """What a user without a view sees: the private status.json's header, no jobs."""
    header = {k: v for k, v in summary.items() if k not in ("job_count", "job_states")}
    return {**header, "private": True, "user_id": uid, "jobs": [], "notices": []}

"""What slurmrestd is sent and what its answers say, per API version: the bodies of
the job updates (place, give back), and the per-job failures and job states read from
its answers. Pure: transport.py sends the requests and chooses the fallbacks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from slurm_gavel.backends.slurm.fields import job_state
from slurm_gavel.backends.slurm.giveback import GiveBack
from slurm_gavel.backends.slurm.records import SlurmNode
from slurm_gavel.backends.slurm.rest.versions import RestApi
from slurm_gavel.backends.slurm.shard_pairs import StartOrder
from slurm_gavel.domain.model import JobId

REQUEUE_FAILED = re.compile(r"JobId=(\d+)")


def place_body(api: RestApi, o: StartOrder) -> dict[str, Any]:
    """The job update that places a start order: partition, GPUs and node count, and
    the node list where the version can set it (else transport.py pins it with scontrol)."""
    n = len(o.nodes)
    if api.legacy:  # v0.0.38 (22.05): gres and a [min, max] node count
        return {
            "partition": o.partition,
            "gres": o.gres(),
            "nodes": [n, n],
            "begin_time": "now",
        }
    body: dict[str, Any] = {
        "partition": o.partition,
        "tres_per_node": f"gres/{o.gres()}",
        "minimum_nodes": n,
        "maximum_nodes": n,
        "begin_time": "now",
    }
    if api.node_list:
        body["required_nodes"] = list(o.nodes)
    return body


def give_back_body(api: RestApi, o: GiveBack) -> dict[str, Any]:
    """The job update that gives a held job back to Slurm: its comment, its GPUs."""
    body: dict[str, Any] = {"comment": o.comment}
    if o.gres:
        body.update({"gres": o.gres} if api.legacy else {"tres_per_node": f"gres/{o.gres}"})
    return body


def type_only(o: StartOrder, nodes: Mapping[str, SlurmNode]) -> bool:
    """Whether the order's partition holds only GPUs of its type."""
    parts = set(o.partition.split(","))  # a job's own list of several (act_plan)
    types = {n.gpu_type for n in nodes.values() if parts & set(n.partitions)}
    return types == {o.gpu_type}


def states_of(
    docs: Iterable[Mapping[str, Any]], field: str, wanted: set[JobId]
) -> dict[JobId, str]:
    """The states of the wanted jobs in /jobs/state/ (field "state") or /jobs
    ("job_state") answers."""
    out = {}
    for doc in docs:
        for raw in doc.get("jobs") or []:
            job_id = str(raw.get("job_id"))
            if job_id in wanted:
                # As squeue names it: 24.11+ list a requeued job still cleaning up
                # as ["PENDING", "COMPLETING"], which must read as COMPLETING (a
                # release before it is done lost the relaunch's batch script on 26.05).
                out[job_id] = job_state(raw.get(field))[0]
    return out


def note_rest_errors(
    doc: Mapping[str, Any], ids: list[JobId], failed: dict[JobId, str]
) -> set[JobId]:
    """Per-job failures of a signal or requeue answer; returns the jobs that failed.

    24.11+ report a signal's failures per job in ``status`` (with HTTP 200 and no
    ``errors``: seen for an unknown job id, also for a single-job DELETE); the
    requeue call reports them in ``errors`` ("Requeue JobId=N failed"). An error
    that names no job of `ids` fails them all (unattributable)."""
    bad: set[JobId] = set()
    wanted = set(ids)
    unattributed: list[str] = []
    for st in doc.get("status") or []:
        if not isinstance(st, Mapping):
            continue
        err = st.get("error") or {}
        code = err.get("code") if isinstance(err, Mapping) else None
        if not code:
            continue
        msg = str(err.get("message") or err.get("string") or code)
        job = str(st.get("step_id") or "").split(".", 1)[0]
        if job in wanted:
            failed[job] = f"slurmrestd: {msg}"
            bad.add(job)
        else:
            unattributed.append(msg)
    for e in doc.get("errors") or []:
        text = (
            str(e.get("description") or e.get("error") or e) if isinstance(e, Mapping) else str(e)
        )
        detail = str(e.get("error") or "") if isinstance(e, Mapping) else ""
        m = REQUEUE_FAILED.search(text)
        if m and m.group(1) in wanted:
            failed[m.group(1)] = f"slurmrestd: {text}" + (f": {detail}" if detail else "")
            bad.add(m.group(1))
        elif not m:
            unattributed.append(text + (f": {detail}" if detail and detail not in text else ""))
    if unattributed and len(ids) == 1:
        failed[ids[0]] = f"slurmrestd: {'; '.join(unattributed)}"
        bad.add(ids[0])
    elif unattributed:
        for j in ids:
            if j not in bad:
                failed.setdefault(j, f"slurmrestd: {'; '.join(unattributed)}")
                bad.add(j)
    return bad

"""All parsing of Slurm's JSON (sinfo/squeue/scontrol ``--json``, slurmrestd).

Field shapes move between Slurm releases, so every read goes through a few
helpers that accept each known shape and fail with a message naming the field
and the release when a field is missing or unreadable. Verified on captures
from real daemons (tests/backends/data/<release>/):

* 22.05 (openapi/v0.0.38): ``job_state`` and node ``state`` are strings
  (``MIXED+DRAIN``), numbers plain ints, exit codes raw wait statuses (99 << 8),
  GPU requests ``gres:gpu:k80:1``; ``sinfo --json`` lists ``nodes``.
* 24.11 and 26.05 (data_parser v0.0.40 .. v0.0.45): states are lists, base
  first (``["PENDING", "SPECIAL_EXIT"]``, ``["UNKNOWN", "DRAIN",
  "NOT_RESPONDING"]``), numbers are objects ``{"set": true, "infinite": false,
  "number": 5}``, ``exit_code`` is an object with ``return_code``, meta moved to
  ``meta.slurm``, GPU requests are TRES (``gres/gpu:v100:1``), and ``sinfo
  --json`` groups nodes under ``"sinfo"`` (``scontrol --json show nodes`` and
  slurmrestd /nodes keep one record per node under ``"nodes"``).

GPUs come from typed GRES: a node's ``gres`` (``gpu:v100:4``, maybe with
``(S:0-1)``), its ``gres_used`` (``gpu:v100:2(IDX:0-1)``) and a running job's
``gres_detail`` (one entry per allocated node, in node-list order). The
``gres/gpu`` TRES of a node is absent unless AccountingStorageTRES names it, so
it is not relied on. Which release and data_parser to expect: slurm/releases.py.

The same functions read slurmrestd's /nodes and /jobs (slurm/rest/transport.py). What they
return (SlurmNode, SlurmJob, GpuSlice) is slurm/records.py's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from slurm_gavel.backends.slurm.arrays import pending_tasks, task_job_id
from slurm_gavel.backends.slurm.fields import (
    dependency_text,
    exit_code,
    exit_signal,
    expand_hostlist,
    gpu_gres,
    gres_indices,
    job_state,
    number,
    shard_gres,
    state_list,
    time_limit,
)
from slurm_gavel.backends.slurm.fit import JobNeeds
from slurm_gavel.backends.slurm.records import ACTIVE_STATES, GpuSlice, SlurmJob, SlurmNode
from slurm_gavel.backends.slurm.releases import (
    SlurmReleaseError,
    SlurmVersion,
    check_release,
)
from slurm_gavel.errors import InputError


class SlurmJsonError(InputError):
    """Slurm's JSON lacks a field or has a shape this parser does not know."""


# --- shape helpers -------------------------------------------------------------------


def _where_version(version: SlurmVersion | None) -> str:
    return f"Slurm {version} ({version.plugin or 'no plugin named'})" if version else "this Slurm"


def _get(obj: Mapping[str, Any], key: str, where: str, version: SlurmVersion | None) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        raise SlurmJsonError(
            f"{where}: field {key!r} missing in the JSON of {_where_version(version)}; this "
            "parser knows the shapes of Slurm 22.05 to 26.05 (data_parser v0.0.38 to "
            "v0.0.45); capture the output (tests/backends/data/capture.sh) and extend "
            "slurm_gavel/backends/slurm/from_json.py"
        )
    return obj[key]


# --- documents -----------------------------------------------------------------------


def parse_version(doc: Mapping[str, Any], *, allow_newer: bool = False) -> SlurmVersion:
    """The Slurm release from ``meta``; refuses output it cannot date and releases it
    does not know (allow_newer: read a release newer than 26.05 anyway)."""
    meta = doc.get("meta") if isinstance(doc, Mapping) else None
    if not isinstance(meta, Mapping):
        raise SlurmJsonError("Slurm JSON has no 'meta' object; is this sinfo/squeue --json output?")
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    plugin = meta.get("plugin") or {}
    # 23.02+ name the data_parser (the shape); 22.05 only the openapi plugin
    plugin_name = str(plugin.get("data_parser") or plugin.get("type") or "")
    release = str(slurm.get("release") or "")
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)", release)
    if not m:
        ver = slurm.get("version") or {}
        try:
            m_major, m_minor, m_micro = (number(ver[k]) for k in ("major", "minor", "micro"))
        except (KeyError, TypeError, ValueError):
            raise SlurmJsonError(
                f"cannot read the Slurm version from meta (release={release!r}); "
                "slurm-gavel reads Slurm >= 22.05 JSON"
            ) from None
    else:
        m_major, m_minor, m_micro = (int(x) for x in m.groups())
    version = SlurmVersion(m_major, m_minor, m_micro, plugin_name)
    try:
        check_release(version, allow_newer=allow_newer)
    except SlurmReleaseError as e:
        raise SlurmJsonError(str(e)) from None
    return version


def _errors(doc: Mapping[str, Any], what: str) -> None:
    errs = doc.get("errors") or []
    if errs:
        first = errs[0]
        text = first
        if isinstance(first, Mapping):
            text = first.get("description") or first.get("error") or first
        raise SlurmJsonError(f"{what} reported an error: {text}")


def parse_nodes(
    doc: Mapping[str, Any], *, allow_newer: bool = False
) -> tuple[SlurmVersion, list[SlurmNode]]:
    """Nodes from ``scontrol --json show nodes``, slurmrestd /nodes or ``sinfo --json``
    (22.05: one record per node under "nodes"; 23.11+: records under "sinfo")."""
    version = parse_version(doc, allow_newer=allow_newer)
    _errors(doc, "sinfo")
    if "nodes" not in doc and "sinfo" in doc:
        return version, _sinfo_nodes(doc["sinfo"], version)
    return version, [_node(raw, version) for raw in _get(doc, "nodes", "sinfo", version)]


def _node(raw: Mapping[str, Any], version: SlurmVersion) -> SlurmNode:
    """One node record (every release: name, state, gres, gres_used, partitions)."""
    name = str(_get(raw, "name", "node", version))
    where = f"sinfo node {name}"
    parts = raw.get("partitions") or []
    reason = raw.get("reason") or ""
    return _make_node(
        name,
        _get(raw, "state", where, version),
        raw.get("state_flags") or [],
        str(_get(raw, "gres", where, version) or ""),
        str(raw.get("gres_used") or ""),
        parts.split(",") if isinstance(parts, str) else parts,
        reason.get("description", "") if isinstance(reason, Mapping) else reason,
        where,
        version,
        raw.get("slurmd_start_time"),
        raw,
    )


def _sinfo_nodes(records: Any, version: SlurmVersion) -> list[SlurmNode]:
    """23.11+ ``sinfo --json``: one record per group of alike nodes in one partition
    (node.state, nodes.nodes, gres.total/used, partition.name); a node in two
    partitions appears twice. gres.used cannot be split among a group's nodes, so a
    record that groups several nodes is refused."""
    by_name: dict[str, SlurmNode] = {}
    for rec in records if isinstance(records, list) else []:
        names = _get(_get(rec, "nodes", "sinfo record", version), "nodes", "sinfo record", version)
        if len(names) != 1:
            raise SlurmJsonError(
                f"sinfo record groups nodes {','.join(map(str, names))} (Slurm {version}): "
                "their GPU use cannot be told apart; read nodes with "
                "`scontrol --json show nodes` (what the CLI transport reads on this release)"
            )
        name = str(names[0])
        where = f"sinfo node {name}"
        gres = _get(rec, "gres", where, version)
        part = _get(rec, "partition", where, version)
        reason = rec.get("reason") or ""
        node = _make_node(
            name,
            _get(_get(rec, "node", where, version), "state", where, version),
            [],
            str(_get(gres, "total", where, version) or ""),
            str(gres.get("used") or ""),
            [part.get("name", "")] if isinstance(part, Mapping) else [],
            reason.get("description", "") if isinstance(reason, Mapping) else str(reason),
            where,
            version,
        )
        seen = by_name.get(name)
        if seen is not None:
            node = replace(seen, partitions=seen.partitions + node.partitions)
        by_name[name] = node
    return list(by_name.values())


def _make_node(
    name: str,
    state: Any,
    state_flags: Any,
    gres: str,
    gres_used: str,
    partitions: Iterable[Any],
    reason: str,
    where: str,
    version: SlurmVersion,
    slurmd_start_time: Any = None,
    raw: Mapping[str, Any] | None = None,
) -> SlurmNode:
    try:
        states = state_list(state)
        flags = set(states[1:]) | set(state_list(state_flags))
        gpus = gpu_gres(gres)
        used = gpu_gres(gres_used)
        started = max(0, number(slurmd_start_time))
        room = _node_room(raw or {})
    except ValueError as e:
        raise SlurmJsonError(f"{where}: {e} ({_where_version(version)})") from None
    typed = [(t, n) for t, n in gpus if t]
    gpu_type = typed[0][0] if typed else None
    return SlurmNode(
        name=name,
        state=states[0].lower() if states else "unknown",
        flags=frozenset(flags),
        gpu_type=gpu_type,
        gpus=sum(n for t, n in typed if t == gpu_type),
        gpus_used=_gpus_used(used, gpu_type, gres_used),
        partitions=tuple(str(p) for p in partitions if p),
        reason=str(reason or ""),
        slurmd_start_time=started,
        shards=sum(n for _, n in shard_gres(gres)),
        other_gpus=sum(n for t, n in gpus if t != gpu_type or t is None),
        **room,
    )


def _node_room(raw: Mapping[str, Any]) -> dict[str, Any]:
    """Features, memory and CPUs of one node record (22.05: features a string "a,b";
    23.02+: a list; every release: real_memory, alloc_memory, cpus, alloc_cpus)."""
    feats = raw.get("active_features") or raw.get("features") or ""
    if isinstance(feats, str):
        feats = feats.split(",")
    return {
        "features": frozenset(str(f).strip() for f in feats if str(f).strip()),
        "memory_mb": max(0, number(raw.get("real_memory"))),
        "memory_used_mb": max(0, number(raw.get("alloc_memory"))),
        "cpus": max(0, number(raw.get("cpus"))),
        "cpus_used": max(0, number(raw.get("alloc_cpus"))),
    }


def job_needs(raw: Mapping[str, Any]) -> JobNeeds:
    """A job record's --constraint, --exclude, memory and CPUs per node (fit.py). On
    24.11+ a --mem-per-gpu job also shows the per-GPU value as memory_per_node: the
    memory_per_tres entry decides."""
    per_gpu = _per_gpu(raw.get("memory_per_tres"))
    return JobNeeds(
        features=str(raw.get("features") or ""),
        excluded=tuple(expand_hostlist(str(raw.get("excluded_nodes") or ""))),
        memory_per_node_mb=0 if per_gpu else max(0, number(raw.get("memory_per_node"))),
        memory_per_cpu_mb=max(0, number(raw.get("memory_per_cpu"))),
        memory_per_gpu_mb=per_gpu,
        cpus_per_node=max(1, number(raw.get("minimum_cpus_per_node"))),
        cpus_per_gpu=_per_gpu(raw.get("cpus_per_tres")),
        prefer=str(raw.get("prefer") or ""),
    )


def _per_gpu(value: Any) -> int:
    """gres:gpu:2 / gres/gpu:2 (--mem-per-gpu, --cpus-per-gpu) -> 2; else 0."""
    m = re.search(r"gpu:([0-9]{1,12})$", str(value or ""))
    return int(m.group(1)) if m else 0


def _gpus_used(used: list[tuple[str | None, int]], gpu_type: str | None, text: str) -> int:
    """gres_used's gpu entry leaves out GPUs handed out as shards (every release;
    docs/admin-guide.md, shard set-up): those count as busy by their indices."""
    whole = sum(n for t, n in used if t in (gpu_type, None))
    by_shard = set(gres_indices(text, "shard"))
    if not by_shard:
        return whole
    return len(set(gres_indices(text, "gpu")) | by_shard) or whole


# Waiting or running: what squeue's job listing lists (slurm/cli/listing.py).
_ACTIVE = ACTIVE_STATES


def parse_jobs(
    doc: Mapping[str, Any], *, allow_newer: bool = False
) -> tuple[SlurmVersion, list[SlurmJob]]:
    """``squeue --json``, ``scontrol --json show jobs`` or slurmrestd /jobs -> jobs."""
    version = parse_version(doc, allow_newer=allow_newer)
    _errors(doc, "squeue")
    return version, [_job(raw, version) for raw in _get(doc, "jobs", "squeue", version)]


def _job(raw: Mapping[str, Any], version: SlurmVersion) -> SlurmJob:
    where = "squeue job"
    try:
        job_id = str(number(_get(raw, "job_id", where, version)))
        where = f"squeue job {job_id}"
        state, _ = job_state(_get(raw, "job_state", where, version))
        nodes = tuple(expand_hostlist(str(raw.get("nodes") or "")))
        req = gpu_gres(str(raw.get("tres_per_node") or ""))
        req_total = gpu_gres(str(raw.get("tres_per_job") or ""))
        details = raw.get("gres_detail") or []
        slices = _slices(nodes, details) if state != "PENDING" else ()
        part = str(_get(raw, "partition", where, version))
        user_id = raw.get("user_id")
        return SlurmJob(
            job_id=job_id,
            state=state,
            reason=str(raw.get("state_reason") or ""),
            comment=str(raw.get("comment") or ""),
            partitions=tuple(p for p in part.split(",") if p),
            nodes=nodes,
            gpu_request=req[0] if req else None,
            gpu_slices=slices,
            node_count=number(raw.get("node_count")),
            priority=number(_get(raw, "priority", where, version)),
            restarts=number(raw.get("restart_cnt")),
            submit_time=number(raw.get("submit_time")),
            start_time=number(raw.get("start_time")),
            # Only a finished job's end time is one (finish_time): a waiting or running
            # job's is an estimate the job listing cannot print (22.05 to 26.05: "NONE").
            end_time=0 if state in _ACTIVE else number(raw.get("end_time")),
            exit_code=exit_code(raw.get("exit_code")),
            exit_signal=exit_signal(raw.get("exit_code")),
            account=str(raw.get("account") or ""),
            user=str(raw.get("user_name") or ""),
            gpu_request_total=req_total[0] if req_total else None,
            shard_request=sum(n for _, n in shard_gres(str(raw.get("tres_per_node") or ""))),
            qos=str(raw.get("qos") or ""),
            user_id=None if user_id is None else number(user_id),
            eligible_time=max(0, number(raw.get("eligible_time"))),
            dependency=dependency_text(raw.get("dependency")),
            array_tasks=pending_tasks(raw),
            task_id=task_job_id(raw, ""),
            tasks=max(0, number(raw.get("tasks"))),
            tasks_per_node=max(0, number(raw.get("tasks_per_node"))),
            deadline=max(0, number(raw.get("deadline"))),
            array_max_tasks=max(0, number(raw.get("array_max_tasks"))),
            name=str(raw.get("name") or ""),
            needs=job_needs(raw),
            reservation=str(raw.get("resv_name") or ""),
            time_limit_min=time_limit(raw.get("time_limit")),
        )
    except ValueError as e:
        raise SlurmJsonError(f"{where}: {e} ({_where_version(version)})") from None


def _slices(nodes: Iterable[str], details: list[Any]) -> tuple[GpuSlice, ...]:
    """gres_detail holds one string per allocated node, in node-list order. Whole GPUs
    are kept by count, without their indices (GpuSlice.indices: shards only)."""
    out = []
    for node, detail in zip(nodes, details, strict=False):
        text = str(detail)
        for gpu_type, count in gpu_gres(text):
            if count:
                out.append(GpuSlice(node, gpu_type, count))
        shards = sum(n for _, n in shard_gres(text))
        if shards:
            # A job's shards on a node come from one GPU (all releases measured).
            idx = gres_indices(text, "shard")
            out.append(GpuSlice(node, None, max(1, len(idx)), idx, shards))
    return tuple(out)


__all__ = [
    "SlurmJsonError",
    "parse_jobs",
    "parse_nodes",
    "parse_version",
]

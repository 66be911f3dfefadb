"""All parsing of Slurm's JSON (``sinfo --json``, ``squeue --json``, slurmrestd).

Field shapes move between Slurm releases, so every read goes through a few
helpers that accept each known shape and fail with a message naming the field
and the version when a field is missing or unreadable:

* 22.05 (openapi/v0.0.38, verified here): ``job_state`` and node ``state`` are
  strings, numbers are plain ints, exit codes are raw wait statuses (99 << 8).
* 23.02+ (data_parser v0.0.39+, from the published schemas, NOT verified here):
  states are lists (``["PENDING", "REQUEUED"]``), numbers are objects
  ``{"set": true, "infinite": false, "number": 5}``, ``exit_code`` is an
  object with ``return_code``, and meta moved to ``meta.slurm``.

GPUs come from typed GRES: a node's ``gres`` (``gpu:v100:4``, maybe with
``(S:0-1)``), its ``gres_used`` (``gpu:v100:2(IDX:0-1)``) and a running job's
``gres_detail`` (one entry per allocated node, in node-list order). The
``gres/gpu`` TRES is absent unless AccountingStorageTRES names it, so it is not
relied on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from slurm_gavel.errors import InputError

OLDEST_SUPPORTED = (22, 5)
INFINITE = -1  # what `number()` returns for {"infinite": true}


class SlurmJsonError(InputError):
    """Slurm's JSON lacks a field or has a shape this parser does not know."""


@dataclass(frozen=True)
class SlurmVersion:
    major: int
    minor: int
    micro: int
    plugin: str  # e.g. "openapi/v0.0.38", "" when absent

    def __str__(self) -> str:
        return f"{self.major}.{self.minor:02d}.{self.micro}"


@dataclass(frozen=True)
class SlurmNode:
    name: str
    state: str  # base state, lower case: idle, mixed, allocated, down, ...
    flags: frozenset[str]  # upper case: DRAIN, NOT_RESPONDING, ...
    gpu_type: str | None  # None: no typed GPU (untyped GPUs have no place in Gavel)
    gpus: int
    gpus_used: int
    partitions: tuple[str, ...]
    reason: str = ""

    @property
    def drained(self) -> bool:
        return self.state in ("drained", "draining", "drain") or bool(
            self.flags & {"DRAIN", "DRAINING", "DRAINED", "FAIL", "MAINTENANCE", "REBOOT_ISSUED"}
        )

    @property
    def down(self) -> bool:
        return self.state in ("down", "future", "unknown", "error") or bool(
            self.flags & {"NOT_RESPONDING", "POWERED_DOWN", "POWER_DOWN", "POWERING_DOWN"}
        )


@dataclass(frozen=True)
class GpuSlice:
    node: str
    gpu_type: str | None
    gpus: int


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    state: str  # base state, upper case: PENDING, RUNNING, SPECIAL_EXIT, COMPLETED, ...
    flags: frozenset[str]  # the other entries of a list-shaped job_state
    reason: str
    comment: str
    partitions: tuple[str, ...]
    nodes: tuple[str, ...]  # allocated (running) nodes, expanded
    gpu_request: tuple[str | None, int] | None  # (type, GPUs per node) from tres_per_node
    gpu_slices: tuple[GpuSlice, ...]  # what it holds now, per node (running only)
    node_count: int
    priority: int
    restarts: int
    submit_time: int
    start_time: int
    end_time: int
    exit_code: int | None  # the process's exit code (not the wait status)
    account: str
    user: str

    @property
    def held(self) -> bool:
        return (
            self.priority == 0
            or self.reason.startswith("JobHeld")
            or self.state in ("SPECIAL_EXIT", "REQUEUE_HOLD")
        )


# --- shape helpers -------------------------------------------------------------------


def _get(obj: Mapping[str, Any], key: str, where: str, version: SlurmVersion | None) -> Any:
    if not isinstance(obj, Mapping) or key not in obj:
        v = f"Slurm {version} ({version.plugin})" if version else "this Slurm"
        raise SlurmJsonError(
            f"{where}: field {key!r} missing in the JSON of {v}; this parser knows "
            f"Slurm 22.05 (openapi v0.0.38) shapes; capture the output and extend "
            f"slurm_gavel/backends/slurm_json.py"
        )
    return obj[key]


def number(value: Any) -> int:
    """A plain int, or the 23.02+ {"set", "infinite", "number"} object; unset -> 0."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, Mapping):
        if value.get("infinite"):
            return INFINITE
        if not value.get("set", True):
            return 0
        return number(value.get("number", 0))
    if value is None:
        return 0
    raise ValueError(f"not a number: {value!r}")


def state_list(value: Any) -> list[str]:
    """A state string (22.05) or list (23.02+) -> upper-case entries, base first."""
    if isinstance(value, str):
        return [s for s in value.upper().split("+") if s]
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s.upper() for s in value]
    raise ValueError(f"not a state: {value!r}")


def exit_code(value: Any) -> int | None:
    """22.05: raw wait status (99 << 8); 23.02+: {"return_code": number, "status": [...]}."""
    if isinstance(value, Mapping):
        rc = value.get("return_code")
        return None if rc is None else number(rc)
    if value is None:
        return None
    raw = number(value)
    if raw & 0x7F:  # killed by a signal: no exit code
        return None
    return (raw >> 8) & 0xFF


_RANGE = re.compile(r"^(\d+)-(\d+)$")


def expand_hostlist(text: str) -> list[str]:
    """``v100-[1-2],k80-1`` -> ["v100-1", "v100-2", "k80-1"] (zero padding kept)."""
    out: list[str] = []
    for item in _split_top(text.strip()):
        m = re.fullmatch(r"([^\[\]]*)\[([^\]]+)\](.*)", item)
        if not m:
            out.append(item)
            continue
        prefix, ranges, suffix = m.groups()
        for r in ranges.split(","):
            rm = _RANGE.match(r)
            if rm:
                lo, hi = rm.groups()
                out.extend(
                    f"{prefix}{i:0{len(lo)}d}{x}"
                    for i in range(int(lo), int(hi) + 1)
                    for x in expand_hostlist(suffix) or [""]
                )
            else:
                out.extend(f"{prefix}{r}{x}" for x in expand_hostlist(suffix) or [""])
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas outside brackets."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        parts.append(cur)
    return [p for p in parts if p]


_GRES_ITEM = re.compile(r"^gpu(?::([^:(]+))?:(\d+)(?:\(.*\))?$")


def gpu_gres(text: str) -> list[tuple[str | None, int]]:
    """GPU entries of a GRES string: ``gpu:v100:4(S:0),nic:1`` -> [("v100", 4)]."""
    out: list[tuple[str | None, int]] = []
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = item.strip()
        if item.startswith("gres:"):
            item = item[len("gres:") :]
        if item == "gpu":
            out.append((None, 1))
            continue
        m = _GRES_ITEM.match(item)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


# --- documents -----------------------------------------------------------------------


def parse_version(doc: Mapping[str, Any]) -> SlurmVersion:
    """The Slurm release from ``meta``; refuses output it cannot date."""
    meta = doc.get("meta") if isinstance(doc, Mapping) else None
    if not isinstance(meta, Mapping):
        raise SlurmJsonError("Slurm JSON has no 'meta' object; is this sinfo/squeue --json output?")
    slurm = meta.get("Slurm") or meta.get("slurm") or {}
    plugin = meta.get("plugin") or {}
    plugin_name = str(plugin.get("type") or plugin.get("data_parser") or "")
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
    if (version.major, version.minor) < OLDEST_SUPPORTED:
        raise SlurmJsonError(
            f"Slurm {version} is older than 22.05, whose --json output slurm-gavel needs; "
            "upgrade Slurm"
        )
    return version


def _errors(doc: Mapping[str, Any], what: str) -> None:
    errs = doc.get("errors") or []
    if errs:
        first = errs[0]
        text = first
        if isinstance(first, Mapping):
            text = first.get("description") or first.get("error") or first
        raise SlurmJsonError(f"{what} reported an error: {text}")


def parse_nodes(doc: Mapping[str, Any]) -> tuple[SlurmVersion, list[SlurmNode]]:
    """``sinfo --json`` (or slurmrestd /nodes) -> nodes."""
    version = parse_version(doc)
    _errors(doc, "sinfo")
    nodes = []
    for raw in _get(doc, "nodes", "sinfo", version):
        name = str(_get(raw, "name", "sinfo node", version))
        where = f"sinfo node {name}"
        try:
            states = state_list(_get(raw, "state", where, version))
            flags = set(states[1:]) | set(state_list(raw.get("state_flags") or []))
            gpus = gpu_gres(str(_get(raw, "gres", where, version)))
            used = gpu_gres(str(raw.get("gres_used") or ""))
        except ValueError as e:
            raise SlurmJsonError(f"{where}: {e} (Slurm {version})") from None
        typed = [(t, n) for t, n in gpus if t]
        gpu_type = typed[0][0] if typed else None
        parts = raw.get("partitions") or []
        if isinstance(parts, str):
            parts = parts.split(",")
        nodes.append(
            SlurmNode(
                name=name,
                state=states[0].lower() if states else "unknown",
                flags=frozenset(flags),
                gpu_type=gpu_type,
                gpus=sum(n for t, n in typed if t == gpu_type),
                gpus_used=sum(n for t, n in used if t in (gpu_type, None)),
                partitions=tuple(str(p) for p in parts),
                reason=str(raw.get("reason") or ""),
            )
        )
    return version, nodes


def parse_jobs(doc: Mapping[str, Any]) -> tuple[SlurmVersion, list[SlurmJob]]:
    """``squeue --json`` (or slurmrestd /jobs) -> jobs."""
    version = parse_version(doc)
    _errors(doc, "squeue")
    return version, [_job(raw, version) for raw in _get(doc, "jobs", "squeue", version)]


def _job(raw: Mapping[str, Any], version: SlurmVersion) -> SlurmJob:
    job_id = str(number(_get(raw, "job_id", "squeue job", version)))
    where = f"squeue job {job_id}"
    try:
        states = state_list(_get(raw, "job_state", where, version))
        nodes = tuple(expand_hostlist(str(raw.get("nodes") or "")))
        req = gpu_gres(str(raw.get("tres_per_node") or ""))
        details = raw.get("gres_detail") or []
        slices = _slices(nodes, details) if states[:1] != ["PENDING"] else ()
        part = str(_get(raw, "partition", where, version))
        return SlurmJob(
            job_id=job_id,
            state=states[0] if states else "UNKNOWN",
            flags=frozenset(states[1:]),
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
            end_time=number(raw.get("end_time")),
            exit_code=exit_code(raw.get("exit_code")),
            account=str(raw.get("account") or ""),
            user=str(raw.get("user_name") or ""),
        )
    except ValueError as e:
        raise SlurmJsonError(f"{where}: {e} (Slurm {version})") from None


def _slices(nodes: Iterable[str], details: list[Any]) -> tuple[GpuSlice, ...]:
    """gres_detail holds one string per allocated node, in node-list order."""
    out = []
    for node, detail in zip(nodes, details, strict=False):
        for gpu_type, count in gpu_gres(str(detail)):
            if count:
                out.append(GpuSlice(node, gpu_type, count))
    return tuple(out)

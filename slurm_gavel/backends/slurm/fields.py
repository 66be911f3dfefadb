"""Values inside Slurm's JSON whose shape differs between releases.

Pure functions over one field each, shared by every record parser (slurm/from_json.py):
numbers (plain ints on 22.05, ``{"set", "infinite", "number"}`` objects on 23.02+),
states (``MIXED+DRAIN`` strings on 22.05, lists base first on 23.02+), exit codes
(raw wait status or an object), host lists and GPU GRES/TRES strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

INFINITE = -1  # what `number()` returns for {"infinite": true}


def number(value: Any) -> int:
    """A plain int, or the 23.02+ {"set", "infinite", "number"} object; unset -> 0.
    With +complex (24.11+): plain ints, null when unset, "Infinity" when infinite."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():  # 24.11's meta.slurm.version
        return int(value)
    if value == "Infinity":  # the data_parser flag +complex (slurm/releases.py)
        return INFINITE
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


# Job state flags that name the state in `squeue -o %T` (and in 22.05's job_state
# string) over the base state, in Slurm's own order (job_state_string()).
_STATE_NAMING_FLAGS = (
    "COMPLETING",
    "STAGE_OUT",
    "CONFIGURING",
    "RESIZING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "SPECIAL_EXIT",
    "STOPPED",
    "SIGNALING",
    "REVOKED",
    "RESV_DEL_HOLD",
)


def job_state(value: Any) -> tuple[str, frozenset[str]]:
    """(state as squeue names it, the other entries): ["PENDING", "SPECIAL_EXIT"]
    (24.11+) and "SPECIAL_EXIT" (22.05) are both the state SPECIAL_EXIT."""
    states = state_list(value)
    if not states:
        raise ValueError(f"empty state: {value!r}")
    named = next((f for f in _STATE_NAMING_FLAGS if f in states[1:]), states[0])
    return named, frozenset(s for s in states if s != named)


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


# gpu[:TYPE]:N, maybe with (S:0-1) or (IDX:0-1); a TRES request writes gres/gpu:TYPE:N
# (24.11+) or gres:gpu:TYPE:N (22.05), and a TRES count may use '=' (gres/gpu=2).
_GRES_ITEM = re.compile(r"^gpu(?::([^:=(]+))?[:=](\d+)(?:\(.*\))?$")


def gpu_gres(text: str) -> list[tuple[str | None, int]]:
    """GPU entries of a GRES/TRES string: ``gpu:v100:4(S:0),nic:1`` -> [("v100", 4)];
    ``gres/gpu:v100:1`` -> [("v100", 1)]."""
    out: list[tuple[str | None, int]] = []
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        if item == "gpu":
            out.append((None, 1))
            continue
        m = _GRES_ITEM.match(item)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


_SHARD_ITEM = re.compile(r"^shard(?::([^:=(]+))?[:=](\d+)(?:\(.*\))?$")


def shard_gres(text: str) -> list[tuple[str | None, int]]:
    """gres/shard entries of a GRES/TRES string: ``gpu:v100:2,shard:v100:4`` ->
    [("v100", 4)]; ``shard:1(IDX:0)`` -> [(None, 1)]; ``gres/shard:2`` -> [(None, 2)]."""
    out: list[tuple[str | None, int]] = []
    for item in re.split(r",(?![^()]*\))", text or ""):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
        m = _SHARD_ITEM.match(item)
        if m:
            out.append((m.group(1), int(m.group(2))))
    return out


# One node's allocation in a job's gres_detail or a node's gres_used: 22.05 writes
# shard:1(IDX:0) and gpu:v100:1(IDX:1); 24.11+ write whole GPUs the same way but shards
# as one used/total count per GPU of the node, shard:1(1/2,0/2) ('-' when none: 26.05).
_IDX = re.compile(r"\(IDX:([0-9,\-]+)\)$")
_PER_GPU = re.compile(r"\(((?:[0-9-]+/\d+,?)+)\)$")


def gres_indices(detail: str, name: str) -> tuple[int, ...]:
    """The GPU indices that one node's ``name`` (gpu or shard) allocation sits on:
    ``shard:1(IDX:0)`` and ``shard:1(1/2,0/2)`` -> (0,); ``gpu:v100:2(IDX:0-1)`` -> (0, 1).
    () when the string holds no such allocation or no index (IDX:N/A)."""
    out: set[int] = set()
    for item in re.split(r",(?![^()]*\))", detail or ""):
        item = item.strip()
        if item.split(":", 1)[0] != name:
            continue
        m = _IDX.search(item)
        if m:
            for part in m.group(1).split(","):
                lo, _, hi = part.partition("-")
                if lo.isdigit() and (not hi or hi.isdigit()):
                    out.update(range(int(lo), int(hi or lo) + 1))
            continue
        m = _PER_GPU.search(item)
        if m:
            for i, used in enumerate(p.split("/")[0] for p in m.group(1).split(",")):
                if used.isdigit() and int(used) > 0:
                    out.add(i)
    return tuple(sorted(out))

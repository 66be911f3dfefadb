"""Values Slurm writes whose shape differs between releases and between outputs.

Pure functions over one field each, shared by every record parser (slurm/from_json.py,
slurm/cli/jobs_from_text.py, and accounting/sacct.py and `report` for Slurm's
accounting): numbers (plain ints on 22.05, ``{"set", "infinite", "number"}`` objects
on 23.02+), states (``MIXED+DRAIN`` strings on 22.05, lists base first on 23.02+),
exit codes (raw wait status or an object), host lists, and GRES/TRES strings in every
shape Slurm writes them (JSON, squeue and sinfo text, sacct's AllocTRES): one reader,
:func:`gres_entries`, that the GPU and shard readers below filter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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


def exit_signal(value: Any) -> int | None:
    """The signal that ended the job's batch script, None when none did. 22.05: the low
    7 bits of the raw wait status; 23.02+: ``signal.id`` (unset: none)."""
    if isinstance(value, Mapping):
        sig = value.get("signal")
        if not isinstance(sig, Mapping):
            return None
        n = number(sig.get("id"))
        return n if 0 < n < 128 else None
    if value is None:
        return None
    raw = number(value)
    return (raw & 0x7F) or None


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


# --- GRES and TRES strings: the one reader of every shape Slurm writes them in ------
#
# Every Slurm output writes a generic resource (GRES) entry in one grammar:
# - a node's GRES and use (JSON gres, gres_used; sinfo -o %G): gpu:v100:4(S:0-1),shard:8
# - a job's allocation per node (gres_detail): gpu:v100:2(IDX:0-1), shard:1(1/2,0/2)
# - a TRES request (tres_per_node, tres_per_job...): gres/gpu:v100:2 (24.11+),
#   gres:gpu:v100:2 (22.05), gres/gpu=2
# - a TRES count (sacct's AllocTRES): cpu=4,gres/gpu=2,gres/gpu:v100=2
# - a TRES name in sacct's JSON: gpu:v100, its count beside it.
# That is [gres:|gres/]NAME[:TYPE]{:|=}COUNT[(DETAIL)], or a bare NAME (a request for
# one), entries split on the commas outside parentheses (a detail holds commas:
# (IDX:0,2)). An entry that does not follow it (mem=8G, (null), N/A, anything a user
# typed) is no entry: the readers skip it, they never guess. The backends
# (from_json.py, cli/jobs_from_text.py) and Slurm's accounting (accounting/sacct.py,
# `slurm-gavel report`'s sinfo) all read through gres_entries().


@dataclass(frozen=True)
class GresEntry:
    """One entry of a GRES/TRES string: ``gpu:v100:2(IDX:0-1)`` -> gpu, v100, 2."""

    name: str  # gpu, shard, mps, nic; in a TRES count also cpu, node, billing...
    type: str | None  # None: untyped (gpu:2)
    count: int | None  # None: a bare name, which a request reads as one
    detail: str = ""  # where it sits: "(IDX:0-1)", "(S:0)", "(1/2,0/2)"; "" for none


# A name or type never holds ':', '=' or '(' (Slurm splits on them), a name no '/'
# either (gres/ is a prefix; N/A is no name); a count is digits.
_NAME = r"([^:=(/]+)"
_TYPE = r"(?::([^:=(]+))?"
_ENTRY = re.compile(rf"^{_NAME}{_TYPE}[:=](\d+)(\(.*\))?$")
_BARE = re.compile(rf"^{_NAME}$")
_TRES_NAME = re.compile(rf"{_NAME}{_TYPE}")
_PREFIXES = ("gres:", "gres/")  # 22.05's TRES request, then 24.11+'s and every TRES count


def split_entries(text: str) -> list[str]:
    """The entries of a GRES/TRES string, stripped: split on the commas outside
    parentheses, so ``gpu:2(IDX:0,2),nic:1`` -> ["gpu:2(IDX:0,2)", "nic:1"]."""
    return [item.strip() for item in re.split(r",(?![^()]*\))", text or "")]


def _unprefixed(item: str) -> str:
    for prefix in _PREFIXES:
        if item.startswith(prefix):
            item = item[len(prefix) :]
    return item


def gres_entries(text: str) -> list[GresEntry]:
    """Every entry of a GRES/TRES string that follows the grammar, in order."""
    out: list[GresEntry] = []
    for item in split_entries(text):
        item = _unprefixed(item)
        m = _ENTRY.match(item)
        if m:
            name, gres_type, count, detail = m.groups()
            out.append(GresEntry(name, gres_type, int(count), detail or ""))
        elif _BARE.match(item):
            out.append(GresEntry(item, None, None))
    return out


def gpu_gres(text: str) -> list[tuple[str | None, int]]:
    """GPU entries of a GRES/TRES string: ``gpu:v100:4(S:0),nic:1`` -> [("v100", 4)];
    ``gres/gpu:v100:1`` -> [("v100", 1)]; a bare ``gpu`` -> [(None, 1)]."""
    return [
        (e.type, 1 if e.count is None else e.count) for e in gres_entries(text) if e.name == "gpu"
    ]


def shard_gres(text: str) -> list[tuple[str | None, int]]:
    """gres/shard entries of a GRES/TRES string: ``gpu:v100:2,shard:v100:4`` ->
    [("v100", 4)]; ``shard:1(IDX:0)`` -> [(None, 1)]; ``gres/shard:2`` -> [(None, 2)].
    A bare ``shard`` says no count: none is read."""
    return [
        (e.type, e.count) for e in gres_entries(text) if e.name == "shard" and e.count is not None
    ]


def gres_names(text: str) -> set[str]:
    """The GRES a TRES request names, its count readable or not: "gres/gpu:v100:2,
    gres/shard:1" -> {gpu, shard}; 22.05 writes gres:gpu:v100:2. Every comma splits
    here, inside parentheses too: a name is never missed, which is what a caller that
    refuses any request naming a GPU GRES needs (cli/jobs_from_text.py)."""
    return {re.split("[:=]", _unprefixed(item), maxsplit=1)[0] for item in (text or "").split(",")}


def gpu_counts(entries: Iterable[tuple[str | None, int]]) -> tuple[dict[str, int], int]:
    """(GPUs per type, all GPUs) of an allocation's GPU entries, as TRES counts them:
    ``gres/gpu=2,gres/gpu:v100=2`` -> ({"v100": 2}, 2). The untyped count is the total
    (the last one, if written twice); the total is at least the typed ones' sum (a
    site without the untyped TRES in AccountingStorageTRES)."""
    typed: dict[str, int] = {}
    total = 0
    for gpu_type, count in entries:
        if gpu_type is None:
            total = count
        else:
            typed[gpu_type] = typed.get(gpu_type, 0) + count
    return typed, max(total, sum(typed.values()))


def tres_gpus(text: str) -> tuple[dict[str, int], int]:
    """(GPUs per type, all GPUs) of a TRES count: sacct's AllocTRES
    ``billing=1,cpu=1,gres/gpu:v100=1,gres/gpu=1,node=1`` -> ({"v100": 1}, 1)."""
    return gpu_counts(
        (e.type, e.count) for e in gres_entries(text) if e.name == "gpu" and e.count is not None
    )


def tres_name(name: str) -> tuple[str, str | None] | None:
    """A TRES name of sacct's JSON, its count written beside it: ``gpu:v100`` ->
    ("gpu", "v100"), ``gpu`` -> ("gpu", None); None where it is not one."""
    m = _TRES_NAME.fullmatch(name)
    return (m.group(1), m.group(2)) if m else None


def typed_gpus(text: str) -> dict[str, int]:
    """GPUs per type of a node's GRES (``sinfo -o %G``): ``gpu:v100:4(S:0-1),shard:8``
    -> {"v100": 4}; untyped GPUs are not counted; a type written twice, its last."""
    return {
        e.type: e.count
        for e in gres_entries(text)
        if e.name == "gpu" and e.type is not None and e.count is not None
    }


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
    for item in split_entries(detail):
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


def dependency_text(value: Any) -> str:
    """A job's dependency as squeue prints it ("afterok:12(unfulfilled)"), "" when it
    has none: the JSON's "" or null, the listing's "(null)" (a dependency Slurm took
    is never that text: it checks the form at submit)."""
    text = "" if value is None else str(value).strip()
    return "" if text == "(null)" else text


def time_limit(value: Any) -> int | None:
    """A job's time_limit (minutes) -> minutes, None when unlimited or unset (22.05:
    null; 23.02+: {"infinite": true} or {"set": false}; +complex: "Infinity")."""
    if value is None:
        return None
    minutes = number(value)
    return None if minutes <= 0 else minutes


def time_limit_text(text: str) -> int | None:
    """squeue's TimeLimit text ("UNLIMITED", "10:00", "1-02:04:00", "NOT_SET") ->
    minutes, None when unlimited or unset (what time_limit makes of the JSON)."""
    text = text.strip()
    days = 0
    if "-" in text:
        head, _, text = text.partition("-")
        if not head.isdigit():
            return None
        days = int(head)
    parts = text.split(":")
    if not parts or not all(p.isdigit() for p in parts) or len(parts) > 3:
        return None
    values = [int(p) for p in parts]
    if len(values) == 3:
        h, m, s = values
    elif len(values) == 2 and days:
        h, m, s = values[0], values[1], 0
    elif len(values) == 2:
        h, m, s = 0, values[0], values[1]
    else:
        h, m, s = 0, values[0], 0
    minutes = days * 1440 + h * 60 + m + (1 if s else 0)
    return minutes or None

"""The moldable counts plugin's slot in the scheduler state's JSON (``plugins.
moldable_counts``): what each moldable job was measured doing at each count it ran at
(mold_round.MoldMemory.measured) and, under learned rows, its learned cells of the
counts it does not run at now (MoldMemory.stashed). Without them a restarted daemon
would weigh a job's counts on the prior again and forget the cells of its other
counts, and choose other counts than one that kept running (the differential tests,
tests/simulate/test_restart_replay.py). The rest of MoldMemory is derived (the molded
Job objects, the values per count, the joint LP's last answer) and is rebuilt.

The figures came from users' reports: a value that is not a finite rate in range is
dropped on load (that cell only), never trusted; so is a count that is not a whole
number of GPUs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from slurm_gavel.core.learned_rows.job_rows import Measured
from slurm_gavel.core.learned_rows.job_rows_doc import cell_from_json, cell_to_json, trusted_rate
from slurm_gavel.core.moldable.mold_round import MoldMemory
from slurm_gavel.domain.model import GpuType

NAME = "moldable_counts"  # the slot's key in the state JSON's "plugins"
FORMAT = 1
MAX_COUNT = 1024  # GPUs of one job (as job_rows_doc's scale factors)


def to_json(memory: MoldMemory) -> dict[str, Any] | None:
    """The slot; None when there is nothing to keep (the key is left out)."""
    jobs: dict[str, Any] = {}
    for j in sorted(memory.measured.keys() | memory.stashed.keys()):
        entry: dict[str, Any] = {}
        measured = memory.measured.get(j)
        if measured:
            entry["measured"] = {str(c): dict(cells) for c, cells in measured.items() if cells}
        stashed = memory.stashed.get(j)
        if stashed:
            entry["stashed"] = {
                str(c): {t: cell_to_json(m) for t, m in cells.items()}
                for c, cells in stashed.items()
                if cells
            }
        if entry:
            jobs[j] = entry
    return {"format": FORMAT, "jobs": jobs} if jobs else None


def from_json(doc: Any) -> MoldMemory:
    """The memory saved by to_json, its untrusted entries dropped (none: empty)."""
    memory = MoldMemory()
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        return memory
    jobs = doc.get("jobs")
    if not isinstance(jobs, Mapping):
        return memory
    for j, entry in jobs.items():
        if not isinstance(entry, Mapping):
            continue
        measured = _by_count(entry.get("measured"), trusted_rate)
        if measured:
            memory.measured[str(j)] = measured
        stashed = _by_count(entry.get("stashed"), cell_from_json)
        if stashed:
            memory.stashed[str(j)] = stashed
    return memory


V = TypeVar("V", float, Measured)


def _by_count(raw: Any, cell: Callable[[Any], V | None]) -> dict[int, dict[GpuType, V]]:
    """count -> GPU type -> cell(value), where the count is a whole number of GPUs and
    cell() trusts the value; anything else is left out."""
    out: dict[int, dict[GpuType, V]] = {}
    if not isinstance(raw, Mapping):
        return out
    for c, cells in raw.items():
        count = _count(c)
        if count is None or not isinstance(cells, Mapping):
            continue
        kept: dict[GpuType, V] = {}
        for t, v in cells.items():
            value = cell(v)
            if value is not None and isinstance(t, str):
                kept[t] = value
        if kept:
            out[count] = kept
    return out


def _count(text: Any) -> int | None:
    """A JSON key that is a count of GPUs: "1".."1024" written plainly, else None."""
    if not isinstance(text, str) or not text.isdecimal() or not text.isascii():
        return None
    if len(text) > 4 or text != str(int(text)):
        return None
    c = int(text)
    return c if 1 <= c <= MAX_COUNT else None

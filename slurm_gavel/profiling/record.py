"""The record `slurm-gavel profile` keeps beside its table: the set-up and every
measurement so far, rewritten atomically after each measurement, so that a failed
worker or Ctrl-C loses nothing and a rerun of the same command measures only the rest.

    TABLE.profile.json = {"format": "slurm-gavel-profile/1", "setup": {...},
                          "measurements": [{"job_type", "scale_factor", "partner",
                                            "steps_per_s", "steps",
                                            "partner_steps_per_s", "seconds"}, ...]}

A record is read as untrusted input (it may be damaged, or written by someone else):
every field is checked, and one that fails refuses the run and leaves the file as it
is, with a message that names the file and the fix.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_gavel.atomic import write_atomic
from slurm_gavel.profiling.profiler import Cell, Measurement, ProfileError

FORMAT = "slurm-gavel-profile/1"
MAX_BYTES = 16 << 20  # thousands of measurements fit in far less
FIELDS = {"job_type", "scale_factor", "partner", "steps_per_s", "steps"}
FIELDS |= {"partner_steps_per_s", "seconds"}
FIX = "move it aside to keep it, or give --fresh to discard it and measure everything again"


def record_path(table: Path) -> Path:
    return table.with_name(f"{table.stem}.profile.json")


@dataclass
class Record:
    path: Path
    setup: dict[str, Any]
    done: dict[Cell, Measurement] = field(default_factory=dict)
    seconds: dict[Cell, float] = field(default_factory=dict)  # wall time of each

    def add(self, m: Measurement, seconds: float) -> None:
        """Keep `m` and write the whole record atomically (old or new, never half)."""
        cell = Cell(m.job_type, m.scale_factor, m.partner)
        self.done[cell] = m
        self.seconds[cell] = seconds
        rows = [
            {
                "job_type": m.job_type,
                "scale_factor": m.scale_factor,
                "partner": m.partner,
                "steps_per_s": m.steps_per_s,
                "steps": m.steps,
                "partner_steps_per_s": m.partner_steps_per_s,
                "seconds": round(self.seconds[c], 3),
            }
            for c, m in self.done.items()
        ]
        doc = {"format": FORMAT, "setup": self.setup, "measurements": rows}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, (json.dumps(doc, indent=1) + "\n").encode(), mode=0o644)


def open_record(path: Path, setup: dict[str, Any], cells: list[Cell], fresh: bool) -> Record:
    """The record to continue: a new one when there is none (or `fresh`), else the
    existing one, which must be of the same set-up and hold only cells of `cells`."""
    if fresh or not (path.exists() or path.is_symlink()):
        return Record(path, setup)
    doc = _read(path)
    old = doc.get("setup")
    if not isinstance(old, dict):
        raise ProfileError(f"{path}: 'setup' is not an object; {FIX}")
    if old != setup:
        diff = "; ".join(
            [f"{k}: {_show(old.get(k))} there, {_show(v)} now" for k, v in setup.items()
             if old.get(k) != v]
            + [f"{_show(k)}: not a set-up field" for k in old if k not in setup]
        )  # fmt: skip
        raise ProfileError(
            f"{path} holds measurements of another set-up ({diff}): rerun with the options "
            f"that made it to measure the rest, give another --out, or {FIX}"
        )
    rec = Record(path, setup)
    wanted = set(cells)
    rows = doc.get("measurements")
    if not isinstance(rows, list):
        raise ProfileError(f"{path}: 'measurements' is not a list; {FIX}")
    for i, row in enumerate(rows):
        m, seconds = _measurement(row, f"{path}: measurement {i + 1}")
        cell = Cell(m.job_type, m.scale_factor, m.partner)
        if cell not in wanted:
            raise ProfileError(f"{path}: measurement {i + 1} ({cell.label()!r}) is not one "
                               f"this set-up measures; {FIX}")  # fmt: skip
        if cell in rec.done:
            raise ProfileError(f"{path}: measurement {i + 1} ({cell.label()!r}) appears "
                               f"twice; {FIX}")  # fmt: skip
        rec.done[cell], rec.seconds[cell] = m, seconds
    return rec


def _read(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ProfileError(f"cannot read {path}: {e.strerror or e}; {FIX}") from None
    if len(data) > MAX_BYTES:
        raise ProfileError(f"{path} is over {MAX_BYTES >> 20} MiB: not a profile record; {FIX}")
    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as e:
        raise ProfileError(f"{path} is not a profile record (damaged JSON: {e}); {FIX}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ProfileError(f'{path} is not a profile record (no "format": "{FORMAT}"); {FIX}')
    return doc


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number")


def _measurement(row: Any, where: str) -> tuple[Measurement, float]:
    if not isinstance(row, dict) or set(row) != FIELDS:
        raise ProfileError(f"{where}: expected an object with the fields {sorted(FIELDS)}; {FIX}")
    job_type, sf, partner = row["job_type"], row["scale_factor"], row["partner"]
    if not isinstance(job_type, str) or not (partner is None or isinstance(partner, str)):
        raise ProfileError(f"{where}: job_type and partner must be strings; {FIX}")
    if isinstance(sf, bool) or not isinstance(sf, int) or not 1 <= sf <= 1024:
        raise ProfileError(f"{where}: scale_factor {sf!r} is not a whole number 1-1024; {FIX}")
    steps = row["steps"]
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 0:
        raise ProfileError(f"{where}: steps {steps!r} is not a whole number >= 0; {FIX}")
    rate = _rate(row["steps_per_s"], f"{where}: steps_per_s")
    other = row["partner_steps_per_s"]
    if (partner is None) != (other is None):
        raise ProfileError(f"{where}: partner and partner_steps_per_s go together; {FIX}")
    other = None if other is None else _rate(other, f"{where}: partner_steps_per_s")
    seconds = _rate(row["seconds"], f"{where}: seconds")
    return Measurement(job_type, sf, rate, steps, partner, other), seconds


def _rate(value: Any, where: str) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value < 0:
        raise ProfileError(f"{where} {value!r} is not a finite number >= 0; {FIX}")
    return float(value)


def _show(value: Any) -> str:
    return "none" if value is None else json.dumps(value)

"""Throughput tables: steps/s per (job type, scale factor, GPU type), alone and co-located.

File format (JSON, documented in conf/THROUGHPUTS.md)::

    {"format": "slurm-gavel-throughputs/1",
     "source": "where the figures come from",
     "throughputs": {"<job type>": {"<scale factor>": {"<gpu type>": steps_per_s}}},
     "unconsolidated": {same shape: the job's GPUs spread over several nodes},
     "pairs": [{"a": "<job type>", "b": "<job type>", "scale_factor": 1,
                "throughput": {"<gpu type>": [a_steps_per_s, b_steps_per_s]}}],
     "notes": {"<job type>|<scale factor>|<gpu type>": "measured on ... / estimate ...",
               "pair|<a>|<b>|<scale factor>|<gpu type>": "measured ... / estimate: ..."}}

A note starting with ``estimate:`` marks a cell (alone or pair) as not measured.

GPU types and job types are data: a new type is a new key, nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from slurm_gavel.atomic import write_atomic
from slurm_gavel.domain.model import GpuType, Job, PairThroughput, ProblemJob
from slurm_gavel.errors import InputError

FORMAT = "slurm-gavel-throughputs/1"
DEFAULT_TABLE = "gavel-osdi2020.json"
# Gavel's table plus an h200 column measured on one H200 (the rest of the column
# estimated): slurm_gavel/data/measurements/. Not the default yet: a min_cost config
# must price every GPU type of its table (daemon/config_checks.py), so an h200 column
# in the default would refuse existing min_cost configs.
H200_TABLE = "gavel-osdi2020-h200.json"


class ThroughputError(InputError):
    """A throughput table is malformed or lacks an entry; the message names it and the fix."""


class UnknownJobType(ThroughputError):
    """The table has no such job type."""


class NoFiguresAtScale(ThroughputError):
    """The table has the job type, but not at that GPU count."""


def _cell_key(job_type: str, scale_factor: int, gpu: GpuType) -> str:
    return f"{job_type}|{scale_factor}|{gpu}"


def pair_note_key(a: str, b: str, scale_factor: int, gpu: GpuType) -> str:
    """The note key of a pair cell, in the orientation the table stores it."""
    return f"pair|{a}|{b}|{scale_factor}|{gpu}"


@dataclass
class ThroughputTable:
    # (job type, scale factor) -> {gpu type: steps/s}; 0 = cannot run there
    alone: dict[tuple[str, int], dict[GpuType, float]] = field(default_factory=dict)
    # same, when a multi-GPU job's GPUs are spread over several nodes
    unconsolidated: dict[tuple[str, int], dict[GpuType, float]] = field(default_factory=dict)
    # (a, b, scale factor) -> {gpu type: (a's, b's)}; stored in the order given
    pairs: dict[tuple[str, str, int], dict[GpuType, tuple[float, float]]] = field(
        default_factory=dict
    )
    source: str = ""
    notes: dict[str, str] = field(default_factory=dict)

    # ---- queries -------------------------------------------------------------------

    @property
    def gpu_types(self) -> list[GpuType]:
        seen: dict[GpuType, None] = {}
        for row in self.alone.values():
            for t in row:
                seen.setdefault(t, None)
        return list(seen)

    @property
    def job_types(self) -> list[str]:
        return list(dict.fromkeys(jt for jt, _ in self.alone))

    def scale_factors(self, job_type: str) -> list[int]:
        return sorted(sf for jt, sf in self.alone if jt == job_type)

    def has(self, job_type: str, scale_factor: int) -> bool:
        return (job_type, scale_factor) in self.alone

    def row(self, job_type: str, scale_factor: int) -> dict[GpuType, float]:
        """Steps/s on every GPU type for a job of this type and size."""
        try:
            return self.alone[(job_type, scale_factor)]
        except KeyError:
            if job_type not in self.job_types:
                raise UnknownJobType(
                    f"unknown job type '{job_type}'; known types: {', '.join(self.job_types)}"
                ) from None
            raise NoFiguresAtScale(
                f"job type '{job_type}' has no figures at scale factor {scale_factor}; "
                f"the table has {self.scale_factors(job_type)} (profile it or pick one of those)"
            ) from None

    def throughput(
        self, job_type: str, scale_factor: int, gpu: GpuType, *, consolidated: bool = True
    ) -> float:
        row = self.row(job_type, scale_factor)
        if not consolidated and scale_factor > 1:
            spread = self.unconsolidated.get((job_type, scale_factor), {})
            if gpu in spread:
                return spread[gpu]
        return row.get(gpu, 0.0)

    def pair(self, a: str, b: str, scale_factor: int, gpu: GpuType) -> tuple[float, float] | None:
        """(a's, b's) steps/s when sharing GPUs of `gpu`, or None if they cannot share.

        Published co-location data exists only at scale factor 1. For larger jobs
        the slowdown measured at scale factor 1 is applied to each job's own
        multi-GPU throughput: two 4-GPU jobs sharing 4 GPUs see on every GPU the
        interference two 1-GPU jobs see on one. That is an estimate and is
        reported as such by :meth:`pair_is_estimate`.
        """
        exact = self._pair_exact(a, b, scale_factor, gpu)
        if exact is not None:
            return exact if exact[0] > 0 or exact[1] > 0 else None
        if scale_factor == 1:
            return None
        base = self._pair_exact(a, b, 1, gpu)
        if base is None or (base[0] <= 0 and base[1] <= 0):
            return None
        try:
            alone_a1 = self.throughput(a, 1, gpu)
            alone_b1 = self.throughput(b, 1, gpu)
            alone_a = self.throughput(a, scale_factor, gpu)
            alone_b = self.throughput(b, scale_factor, gpu)
        except ThroughputError:
            return None
        if min(alone_a1, alone_b1, alone_a, alone_b) <= 0:
            return None
        return (alone_a * base[0] / alone_a1, alone_b * base[1] / alone_b1)

    def pair_is_estimate(self, a: str, b: str, scale_factor: int, gpu: GpuType) -> bool:
        """Not measured: derived from scale factor 1 (:meth:`pair`), or noted as an
        estimate (learned from paired jobs' progress reports: pair_cells.py)."""
        if self._pair_exact(a, b, scale_factor, gpu) is None:
            return True
        note = self.pair_note(a, b, scale_factor, gpu)
        return note is not None and note.startswith("estimate:")

    def pair_key(self, a: str, b: str, scale_factor: int) -> tuple[str, str, int] | None:
        """The key the table stores the pair of ``a`` and ``b`` under, None if neither
        orientation is there."""
        for key in ((a, b, scale_factor), (b, a, scale_factor)):
            if key in self.pairs:
                return key
        return None

    def pair_note(self, a: str, b: str, scale_factor: int, gpu: GpuType) -> str | None:
        key = self.pair_key(a, b, scale_factor) or (a, b, scale_factor)
        return self.notes.get(pair_note_key(*key, gpu))

    def _pair_exact(
        self, a: str, b: str, scale_factor: int, gpu: GpuType
    ) -> tuple[float, float] | None:
        row = self.pairs.get((a, b, scale_factor))
        if row is not None and gpu in row:
            return row[gpu]
        row = self.pairs.get((b, a, scale_factor))
        if row is not None and gpu in row:
            ta, tb = row[gpu]
            return (tb, ta)
        return None

    # ---- building policy inputs ------------------------------------------------------

    def problem_job(
        self,
        job: Job,
        gpu_types: Iterable[GpuType],
        *,
        row: Mapping[GpuType, float] | None = None,
        steps_remaining: float | None = None,
        time_since_start: float = 0.0,
        slo: float | None = None,
    ) -> ProblemJob:
        """The policy's view of ``job`` on these GPU types: its row of this table, or
        ``row`` when given (the scheduler's, with unmeasured cells filled:
        cluster_rows.py). A type missing from the row is 0 here."""
        if row is None:
            row = self.row(job.job_type, job.scale_factor)
        return ProblemJob(
            id=job.id,
            job_type=job.job_type,
            throughput={t: row.get(t, 0.0) for t in gpu_types},
            scale_factor=job.scale_factor,
            priority_weight=job.priority_weight,
            steps_remaining=job.total_steps if steps_remaining is None else steps_remaining,
            time_since_start=time_since_start,
            account=job.account,
            slo=slo,
        )

    def pair_throughputs(
        self, kinds: Iterable[tuple[str, int]], gpu_types: Iterable[GpuType]
    ) -> list[PairThroughput]:
        """Pair entries for every unordered pair of (job type, scale factor) kinds given."""
        uniq = sorted(set(kinds))
        types = list(gpu_types)
        out: list[PairThroughput] = []
        for i, (a, sfa) in enumerate(uniq):
            for b, sfb in uniq[i:]:
                if sfa != sfb:
                    continue
                per_type: dict[GpuType, tuple[float, float]] = {}
                for t in types:
                    v = self.pair(a, b, sfa, t)
                    if v is not None:
                        per_type[t] = v
                if per_type:
                    out.append(PairThroughput(a, b, sfa, per_type))
        return out

    # ---- files ---------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        def nested(d: dict[tuple[str, int], dict[GpuType, float]]) -> dict[str, Any]:
            out: dict[str, dict[str, dict[str, float]]] = {}
            for (jt, sf), row in d.items():
                out.setdefault(jt, {})[str(sf)] = dict(row)
            return out

        return {
            "format": FORMAT,
            "source": self.source,
            "units": "steps per second of one job on scale_factor GPUs of the type",
            "throughputs": nested(self.alone),
            "unconsolidated": nested(self.unconsolidated),
            "pairs": [
                {
                    "a": a,
                    "b": b,
                    "scale_factor": sf,
                    "throughput": {t: [v[0], v[1]] for t, v in row.items()},
                }
                for (a, b, sf), row in self.pairs.items()
            ],
            "notes": dict(self.notes),
        }

    def save(self, path: str | Path) -> None:
        """Write atomically (atomic.py): a crash never leaves half a table."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n"
        write_atomic(p, text.encode(), mode=0o644)  # tables are for everyone to read

    def set_note(self, job_type: str, scale_factor: int, gpu: GpuType, note: str) -> None:
        self.notes[_cell_key(job_type, scale_factor, gpu)] = note

    def note(self, job_type: str, scale_factor: int, gpu: GpuType) -> str | None:
        return self.notes.get(_cell_key(job_type, scale_factor, gpu))


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ThroughputError(f"{where}: expected a number, got {value!r}")
    if value < 0 or value == float("inf"):
        raise ThroughputError(f"{where}: {value!r} must be a finite number >= 0")
    return float(value)


def _nested(data: Any, where: str) -> dict[tuple[str, int], dict[GpuType, float]]:
    if not isinstance(data, dict):
        raise ThroughputError(f"{where}: expected an object of job types")
    out: dict[tuple[str, int], dict[GpuType, float]] = {}
    for jt, by_sf in data.items():
        if not isinstance(by_sf, dict):
            raise ThroughputError(f"{where}.{jt}: expected an object keyed by scale factor")
        for sf, row in by_sf.items():
            if not str(sf).isdigit() or int(sf) < 1:
                raise ThroughputError(
                    f"{where}.{jt}: scale factor key {sf!r} is not an integer >= 1"
                )
            if not isinstance(row, dict):
                raise ThroughputError(f"{where}.{jt}.{sf}: expected an object of GPU types")
            out[(jt, int(sf))] = {
                str(t): _positive(v, f"{where}.{jt}.{sf}.{t}") for t, v in row.items()
            }
    return out


def table_from_json(data: Any, origin: str = "table") -> ThroughputTable:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ThroughputError(
            f'{origin}: not a slurm-gavel throughput table (expected "format": "{FORMAT}")'
        )
    if "throughputs" not in data:
        raise ThroughputError(f"{origin}: missing key 'throughputs'")
    table = ThroughputTable(
        alone=_nested(data["throughputs"], f"{origin}: throughputs"),
        unconsolidated=_nested(data.get("unconsolidated") or {}, f"{origin}: unconsolidated"),
        source=str(data.get("source", "")),
        notes={str(k): str(v) for k, v in (data.get("notes") or {}).items()},
    )
    for i, p in enumerate(data.get("pairs") or []):
        where = f"{origin}: pairs[{i}]"
        if not isinstance(p, dict) or not {"a", "b", "throughput"} <= p.keys():
            raise ThroughputError(f"{where}: needs 'a', 'b' and 'throughput'")
        row: dict[GpuType, tuple[float, float]] = {}
        for t, v in p["throughput"].items():
            if not isinstance(v, list) or len(v) != 2:
                raise ThroughputError(f"{where}.throughput.{t}: expected [a, b]")
            row[str(t)] = (_positive(v[0], f"{where}.{t}[0]"), _positive(v[1], f"{where}.{t}[1]"))
        table.pairs[(str(p["a"]), str(p["b"]), int(p.get("scale_factor", 1)))] = row
    return table


def shipped_tables() -> list[str]:
    """The names of the tables shipped with the package (slurm_gavel/data/)."""
    data = resources.files("slurm_gavel.data")
    return sorted(f.name for f in data.iterdir() if f.name.endswith(".json"))


def load_table(path: str | Path | None = None) -> ThroughputTable:
    """Load a table file; None loads the default table shipped with the package, and the
    bare name of a shipped table (e.g. ``gavel-osdi2020-h200.json``) that one, unless a
    file of that name is in the current folder."""
    if path is None:
        path = DEFAULT_TABLE
        origin = f"(default) {DEFAULT_TABLE}"
    else:
        origin = f"(shipped) {path}"
    p = Path(path)
    if str(path) == p.name and not p.exists() and p.name in shipped_tables():
        text = resources.files("slurm_gavel.data").joinpath(p.name).read_text()
        return table_from_json(json.loads(text), origin)
    try:
        data = json.loads(p.read_text())
    except OSError as e:
        raise ThroughputError(f"{p}: cannot read the throughput table ({e.strerror})") from e
    except json.JSONDecodeError as e:
        raise ThroughputError(f"{p}: not valid JSON at line {e.lineno}: {e.msg}") from e
    return table_from_json(data, str(p))

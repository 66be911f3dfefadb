"""Past jobs from Slurm's accounting (`sacct`), for `trace from-sacct` and `report`.

`sacct --json` (Slurm >= 21.08) is read first; where it is missing, `sacct -P` with
a random field delimiter. Every run of a job is one :class:`SacctRun`: with
``--duplicates`` a requeued job (a Gavel preemption: exit 99, requeue-hold) has one
record per run, the earlier ones in state REQUEUED, each with its own start, end
and GPUs; its restarts are its runs minus one.

The JSON changed between releases; what this reads, seen in the captured output of
22.05, 24.11 and 26.05 (tests/data/sacct/): times are integers on all three
(other numbers of 24.11+ are ``{"set", "infinite", "number"}`` objects), ``state.current``
a string (22.05) or a list, base state first, then flags (24.11+: a requeued run is
``["PENDING", "REQUEUED"]``), the comment under ``comment.job``; the GPUs allocated
are the ``gres`` TRES named ``gpu:TYPE`` (slurm.conf must name them in
AccountingStorageTRES; without it no GPU type is recorded). Its numbers, states and
GRES/TRES are read as the backends read them (backends/slurm/fields.py), and sacct
runs through the backends' command runner (SlurmCommands: argument lists, a timeout,
retries while slurmdbd is unreachable).

Job comments are user text: they are kept as strings here and only ever parsed by
slurm_gavel.domain.comment_grammar's strict grammar.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from slurm_gavel.backends.slurm.cli.commands import CommandResult, SlurmCommands
from slurm_gavel.backends.slurm.fields import (
    gpu_counts,
    number,
    state_list,
    tres_gpus,
    tres_name,
)
from slurm_gavel.backends.slurm.slurm_errors import SlurmActionTimedOut, SlurmUnreachable
from slurm_gavel.errors import InputError

FIELDS = (
    "JobIDRaw",
    "JobName",
    "User",
    "Account",
    "Partition",
    "State",
    "Submit",
    "Start",
    "End",
    "ElapsedRaw",
    "AllocTRES",
    "Comment",
)  # fmt: skip Comment last: the only field users write


class SacctError(InputError):
    """sacct failed or printed something this module cannot read."""


@dataclass(frozen=True)
class SacctRun:
    """One run of one job (a requeued job has several), as sacct recorded it."""

    job_id: str
    name: str
    user: str
    account: str
    partition: str
    state: str  # COMPLETED, REQUEUED, FAILED, CANCELLED, RUNNING, PENDING...
    submit: float | None  # epoch seconds; a requeued run's is the requeue time
    start: float | None  # None: never started
    end: float | None
    elapsed: float
    comment: str
    gpus: Mapping[str, int] = field(default_factory=dict)  # GPU type -> count
    gpu_total: int = 0  # all GPUs, typed or not

    @property
    def gpu_type(self) -> str | None:
        """The one GPU type of the run; None for none or a mix."""
        return next(iter(self.gpus)) if len(self.gpus) == 1 else None


# --- sacct --json ------------------------------------------------------------------


def _number(value: Any) -> int | None:
    """fields.number of a value sacct wrote, None where it wrote none (null, unset,
    infinite) or something else: one odd value does not refuse the record."""
    if value is None or isinstance(value, bool) or _unset_or_infinite(value):
        return None
    try:
        return number(value)
    except ValueError:
        return None


def _unset_or_infinite(value: Any) -> bool:
    """What fields.number reads as 0 or INFINITE, which sacct means as no value."""
    if isinstance(value, Mapping):
        return not value.get("set", True) or bool(value.get("infinite"))
    return value == "Infinity"


def _epoch(value: Any) -> float | None:
    n = _number(value)
    return float(n) if n is not None and n > 0 else None  # 0 = not (yet) happened


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _state(value: Any) -> str:
    """state.current: a string (22.05) or a list, base state first (23.02+); a requeued
    run's is ["PENDING", "REQUEUED"], which sacct -P prints REQUEUED."""
    if isinstance(value, Mapping):
        value = value.get("current")
    try:
        states = state_list(value)
    except ValueError:
        return ""
    if not states:
        return ""
    return ("REQUEUED" if "REQUEUED" in states[1:] else states[0]).split(" ")[0]


def _json_gpus(tres: Any) -> tuple[dict[str, int], int]:
    """(GPUs per type, all GPUs) of tres.allocated: its gres TRES named gpu[:TYPE]."""
    gpus: list[tuple[str | None, int]] = []
    for item in tres if isinstance(tres, list) else []:
        if not isinstance(item, Mapping) or item.get("type") != "gres":
            continue
        name = tres_name(_text(item.get("name")))
        count = _number(item.get("count"))
        if name is None or name[0] != "gpu" or count is None or count <= 0:
            continue
        gpus.append((name[1], count))
    return gpu_counts(gpus)


def parse_json(doc: Any, origin: str = "sacct --json") -> list[SacctRun]:
    """The runs of a `sacct --json` document; raises SacctError naming the problem."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list):
        raise SacctError(f"{origin}: not sacct --json output (no 'jobs' list)")
    errors = [e for e in doc.get("errors") or [] if e]
    if errors:
        raise SacctError(f"{origin}: sacct reported errors: {json.dumps(errors)[:500]}")
    return [_json_run(raw) for raw in doc["jobs"] if isinstance(raw, Mapping)]


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _json_run(raw: Mapping[str, Any]) -> SacctRun:
    times = _mapping(raw.get("time"))
    comment = raw.get("comment")
    if isinstance(comment, Mapping):
        comment = comment.get("job")
    tres = _mapping(raw.get("tres"))
    gpus, total = _json_gpus(tres.get("allocated"))
    job_id = _number(raw.get("job_id"))
    return SacctRun(
        job_id=str(job_id) if job_id is not None else "?",
        name=_text(raw.get("name")),
        user=_text(raw.get("user")),
        account=_text(raw.get("account")),
        partition=_text(raw.get("partition")),
        state=_state(raw.get("state")),
        submit=_epoch(times.get("submission")),
        start=_epoch(times.get("start")),
        end=_epoch(times.get("end")),
        elapsed=float(_number(times.get("elapsed")) or 0),
        comment=_text(comment),
        gpus=gpus,
        gpu_total=total,
    )


# --- sacct -P ----------------------------------------------------------------------


def _parsable_time(text: str) -> float | None:
    if not text or text in ("Unknown", "None"):
        return None
    try:
        return time.mktime(time.strptime(text, "%Y-%m-%dT%H:%M:%S"))  # sacct prints local
    except ValueError:
        return None


def parse_parsable(text: str, delimiter: str = "|") -> tuple[list[SacctRun], int]:
    """Runs of `sacct -P -o FIELDS` output with its header line; also the number of
    lines that could not be read. A comment's newlines continue the previous record
    (Comment is its last field); a line with too few fields and no record before it
    is unreadable."""
    lines = text.splitlines()
    if not lines:
        return [], 0
    header = lines[0].split(delimiter)
    missing = [f for f in FIELDS if f not in header]
    if missing or header[-1] != "Comment":
        raise SacctError(
            f"sacct -P output lacks {', '.join(missing) or 'Comment as the last field'}; "
            f"run sacct -P -X -D -o {','.join(FIELDS)}"
        )
    rows: list[list[str]] = []
    bad = 0
    for line in lines[1:]:
        cells = line.split(delimiter, len(header) - 1)
        if len(cells) == len(header):
            rows.append(cells)
        elif rows:
            rows[-1][-1] += "\n" + line
        else:
            bad += 1
    runs = []
    for cells in rows:
        f = dict(zip(header, cells, strict=True))
        gpus, total = tres_gpus(f["AllocTRES"])
        runs.append(
            SacctRun(
                job_id=f["JobIDRaw"],
                name=f["JobName"],
                user=f["User"],
                account=f["Account"],
                partition=f["Partition"],
                state=f["State"].split(" ")[0],
                submit=_parsable_time(f["Submit"]),
                start=_parsable_time(f["Start"]),
                end=_parsable_time(f["End"]),
                elapsed=float(f["ElapsedRaw"]) if f["ElapsedRaw"].isdigit() else 0.0,
                comment=f["Comment"],
                gpus=gpus,
                gpu_total=total,
            )
        )
    return runs, bad


def is_json(text: str) -> bool:
    """Saved `sacct --json` output, not `sacct -P` (told apart by the first character)."""
    return text.lstrip().startswith("{")


def parse_text(text: str, origin: str) -> tuple[list[SacctRun], int]:
    """A saved `sacct --json` or `sacct -P` output."""
    if is_json(text):
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise SacctError(f"{origin}: not valid JSON ({e})") from None
        return parse_json(doc, origin), 0
    return parse_parsable(text)


# --- running sacct -----------------------------------------------------------------


def sacct_argv(since: str, until: str | None, partitions: Sequence[str]) -> list[str]:
    """Every user's jobs (-a), allocations only (-X), each run of a requeued job (-D)."""
    argv = ["sacct", "-a", "-X", "-D", "-S", since]
    if until:
        argv += ["-E", until]
    if partitions:
        argv += ["-r", ",".join(partitions)]
    return argv


def query(
    since: str,
    until: str | None = None,
    partitions: Iterable[str] = (),
    timeout: float = 300,
    commands: SlurmCommands | None = None,
) -> tuple[list[SacctRun], int, str]:
    """Run sacct (JSON, else -P); the runs, the unreadable lines, and which form.
    Through `commands` (default: a runner of its own with `timeout`): retried while
    slurmdbd is unreachable; a timeout is not (the same query would take as long)."""
    commands = commands or SlurmCommands(timeout=timeout)
    base = sacct_argv(since, until, list(partitions))
    res = _run(commands, [*base, "--json"])
    if res.returncode == 0 and is_json(res.stdout):
        try:
            return parse_json(json.loads(res.stdout)), 0, "json"
        except json.JSONDecodeError:
            pass  # an old sacct's --json that is not JSON: fall back
    # A delimiter no user can know when writing a comment: no forged records.
    delimiter = "|" + secrets.token_hex(8) + "|"
    res = _run(commands, [*base, "-P", "--delimiter", delimiter, "-o", ",".join(FIELDS)])
    if res.returncode != 0:
        raise SacctError(
            f"sacct failed ({res.returncode}): {res.stderr.strip()[:400]}; {_SLURMDBD_HINT}"
        )
    runs, bad = parse_parsable(res.stdout, delimiter)
    return runs, bad, "parsable"


_SLURMDBD_HINT = (
    "is slurmdbd running and AccountingStorageType=accounting_storage/slurmdbd in slurm.conf?"
)


def _run(commands: SlurmCommands, argv: list[str]) -> CommandResult:
    """sacct's output (counted as kind "sacct"); SacctError when it could not run or
    slurmdbd did not answer. Times print as -P's reader parses them (the runner's own
    SLURM_TIME_FORMAT is epoch seconds, for the job listing)."""
    if shutil.which(argv[0], path=commands.env.get("PATH")) is None:
        raise SacctError("sacct is not installed (Debian: slurm-client)")
    try:
        return commands.run("sacct", argv, env={"SLURM_TIME_FORMAT": "standard"})
    except SlurmActionTimedOut:
        raise SacctError(
            f"sacct took over {commands.timeout:.0f} s or lost slurmdbd's answer; "
            "narrow --since/--until"
        ) from None
    except SlurmUnreachable as e:
        # The runner's message names slurmctld (the backends' daemon); sacct's is slurmdbd.
        raise SacctError(
            f"sacct could not reach slurmdbd after {commands.retries + 1} tries "
            f"({e.last_error or e}); {_SLURMDBD_HINT}"
        ) from None


def by_job(runs: Iterable[SacctRun]) -> dict[str, list[SacctRun]]:
    """Each job's runs, in the order they ran."""
    jobs: dict[str, list[SacctRun]] = {}
    for run in runs:
        jobs.setdefault(run.job_id, []).append(run)
    for job_runs in jobs.values():
        job_runs.sort(key=lambda r: (r.start or r.submit or 0.0, r.end or 0.0))
    return jobs

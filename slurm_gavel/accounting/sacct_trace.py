"""A site's past GPU jobs (sacct) as a simulator trace (`slurm-gavel trace from-sacct`).

Pure: runs in, trace rows and skip counts out. One row per job that finished in a
state the admin keeps (default COMPLETED):

* arrival_time: its first submission, in seconds after the earliest kept job's;
* job_type: its ``gavel:`` comment (slurm_gavel.domain.comment_grammar's strict grammar: the
  comment is user text), else the first rule of the admin's mapping file that
  matches its name, user, account or partition;
* scale_factor: the GPUs of its runs (all runs must have the same count);
* total_steps: the work it did, sum over its runs of elapsed seconds x the
  throughput table's steps/s for that job type, GPU count and the run's GPU type
  (a job the daemon moved between types did work at each type's rate);
* priority_weight and slo: as its comment declares them (1 and none otherwise; the
  weight at most 1, the daemon's default cap on a user's weight);
* account: its Slurm account.

Anything else is skipped and counted by reason (`Skipped`), never guessed.
"""

from __future__ import annotations

import fnmatch
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from slurm_gavel.accounting.sacct import SacctRun, by_job
from slurm_gavel.domain.comment_grammar import (
    DEFAULT_MAX_USER_WEIGHT,
    ManagedCommentError,
    ManagedSpec,
    parse_comment,
)
from slurm_gavel.domain.model import Job
from slurm_gavel.domain.throughputs import ThroughputTable
from slurm_gavel.errors import InputError

MATCH_FIELDS = ("name", "user", "account", "partition")
DEFAULT_STATES = ("COMPLETED",)


class MappingError(InputError):
    """The admin's job-type mapping file is wrong."""


@dataclass(frozen=True)
class Rule:
    match: Mapping[str, str]  # field -> shell glob; all must match
    job_type: str

    def matches(self, run: SacctRun) -> bool:
        return all(fnmatch.fnmatchcase(getattr(run, k), v) for k, v in self.match.items())


def load_mapping(path: Path, table: ThroughputTable) -> list[Rule]:
    """A YAML list of ``{match: {name|user|account|partition: GLOB, ...}, type: T}``;
    the first rule that matches a job names its type."""
    import yaml

    from slurm_gavel.errors import read_utf8

    text = read_utf8(path, MappingError, unreadable="cannot read it ({strerror})", save_as="UTF-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise MappingError(f"{path}: not valid YAML ({e})") from None
    if not isinstance(data, list):
        raise MappingError(f"{path}: expected a list of rules (- match: {{name: GLOB}}, type: T)")
    rules = []
    for i, item in enumerate(data, 1):
        where = f"{path}: rule {i}"
        if not isinstance(item, dict) or set(item) != {"match", "type"}:
            raise MappingError(f"{where}: write exactly the keys 'match' and 'type'")
        match, job_type = item["match"], item["type"]
        if not isinstance(match, dict) or not match:
            raise MappingError(f"{where}: 'match' must map {'/'.join(MATCH_FIELDS)} to globs")
        unknown = [k for k in match if k not in MATCH_FIELDS]
        if unknown or not all(isinstance(v, str) for v in match.values()):
            raise MappingError(
                f"{where}: match on {', '.join(MATCH_FIELDS)} with string globs "
                f"(got {', '.join(map(str, unknown or match))})"
            )
        if job_type not in table.job_types:
            raise MappingError(
                f"{where}: type {job_type!r} is not in the throughput table "
                f"({', '.join(table.job_types)})"
            )
        rules.append(Rule(dict(match), job_type))
    return rules


@dataclass
class Skipped:
    """Why jobs were left out: reason -> count."""

    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, reason: str) -> None:
        self.reasons[reason] += 1

    @property
    def total(self) -> int:
        return sum(self.reasons.values())

    def lines(self) -> list[str]:
        return [f"{n:6d}  {why}" for why, n in self.reasons.most_common()]


def job_type_of(
    runs: Sequence[SacctRun], rules: Sequence[Rule], table: ThroughputTable
) -> tuple[ManagedSpec | None, str]:
    """(what the job declares, '') or (None, why not); a mapping rule's type is a
    declaration with only the type."""
    comment = runs[0].comment
    try:
        spec = parse_comment(comment, max_weight=None)
    except ManagedCommentError:
        return None, "gavel: comment breaks the grammar"
    if spec is not None:
        if spec.job_type not in table.job_types:
            return None, "job type not in the throughput table"
        return spec, ""
    for rule in rules:
        if rule.matches(runs[0]):
            return ManagedSpec(rule.job_type), ""
    return None, "no gavel: comment and no mapping rule matches"


def to_trace(
    runs: Iterable[SacctRun],
    table: ThroughputTable,
    rules: Sequence[Rule] = (),
    states: Sequence[str] = DEFAULT_STATES,
) -> tuple[list[Job], Skipped]:
    """The trace's jobs (sorted by arrival; simulate.traces.trace_csv writes them)
    and what was skipped, by reason."""
    skipped = Skipped()
    kept = [
        job
        for job_id, job_runs in by_job(runs).items()
        if (job := _job(job_id, job_runs, table, rules, states, skipped)) is not None
    ]
    kept.sort(key=lambda j: (j.arrival_time, _numeric(j.id)))
    origin = kept[0].arrival_time if kept else 0.0
    jobs = [replace(j, arrival_time=round(j.arrival_time - origin, 3)) for j in kept]
    return jobs, skipped


def _numeric(job_id: str) -> tuple[int, str]:
    return (int(job_id), "") if job_id.isdigit() else (0, job_id)


def _job(
    job_id: str,
    runs: list[SacctRun],
    table: ThroughputTable,
    rules: Sequence[Rule],
    states: Sequence[str],
    skipped: Skipped,
) -> Job | None:
    last = runs[-1]
    if last.state not in states:
        skipped.add(f"ended {last.state or 'in no state'} (kept: {','.join(states)})")
        return None
    if not any(r.gpu_total for r in runs):
        skipped.add("no GPUs")
        return None
    ran = [r for r in runs if r.start is not None and r.elapsed > 0]
    if not ran:
        skipped.add("never ran")
        return None
    if any(r.gpu_total == 0 for r in ran):
        skipped.add("a run without GPUs")
        return None
    if any(r.gpu_type is None or r.gpus[r.gpu_type] != r.gpu_total for r in ran):
        skipped.add("GPU type not recorded, or several types at once")
        return None
    counts = {r.gpu_total for r in ran}
    if len(counts) != 1:
        skipped.add("GPU count changed between runs")
        return None
    scale = counts.pop()
    spec, why = job_type_of(runs, rules, table)
    if spec is None:
        skipped.add(why)
        return None
    job_type = spec.job_type
    if not table.has(job_type, scale):
        skipped.add("throughput table has no figures at this GPU count")
        return None
    row = table.row(job_type, scale)
    if any(row.get(r.gpu_type or "", 0.0) <= 0 for r in ran):
        skipped.add("GPU type not in the throughput table")
        return None
    steps = sum(r.elapsed * row[r.gpu_type or ""] for r in ran)
    submits = [r.submit for r in runs if r.submit is not None]
    if not submits:
        skipped.add("no submit time")
        return None
    # The user's own weight (at most the default cap, as the daemon clamps it) and SLO
    # as declared; the admin's weights are the daemon's config, not part of a trace.
    # The work is what the job did, not what it declared.
    return Job(
        id=job_id,
        job_type=job_type,
        scale_factor=scale,
        priority_weight=min(spec.priority_weight, DEFAULT_MAX_USER_WEIGHT),
        total_steps=round(steps, 3),
        arrival_time=min(submits),
        account=last.account or None,
        slo=spec.slo,
    )

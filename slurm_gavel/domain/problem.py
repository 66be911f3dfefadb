"""The allocation problem JSON of docs/design.md §2.1: parsing, validation and the output form.

Validation errors are :class:`ProblemError` with a one-line message naming the
field and the fix; the CLI turns them into exit code 2.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from slurm_gavel.domain.field_checks import Checks
from slurm_gavel.domain.model import Allocation, PairThroughput, Problem, ProblemJob
from slurm_gavel.errors import InputError, read_utf8


class ProblemError(InputError):
    """The problem input is malformed; the message names the field and the fix."""


_check = Checks(ProblemError)


def _number(value: Any, where: str, *, minimum: float | None = 0.0) -> float:
    """Numbers in a problem are >= 0 unless said otherwise."""
    return _check.number(value, where, minimum=minimum)


def parse_problem(data: Any) -> Problem:
    """Validate a decoded problem JSON document and build a :class:`Problem`."""
    doc = _check.mapping(data, "problem")
    for key in ("cluster", "jobs"):
        if key not in doc:
            raise ProblemError(f"missing key '{key}': the problem needs 'cluster' and 'jobs'")
    cluster = _parse_cluster(doc["cluster"])
    raw_jobs = doc["jobs"]
    if not isinstance(raw_jobs, list):
        raise ProblemError("jobs: expected a list of job objects")
    if not raw_jobs:
        raise ProblemError("jobs: the list is empty; give at least one job to allocate")
    jobs: list[ProblemJob] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_jobs):
        job = _parse_job(raw, i, cluster)
        if job.id in seen:
            raise ProblemError(f"jobs[{i}] (id {job.id}): duplicate job id; ids must be unique")
        seen.add(job.id)
        jobs.append(job)
    pairs = [
        _parse_pair(raw, f"pair_throughputs[{i}]", cluster)
        for i, raw in enumerate(doc.get("pair_throughputs") or [])
    ]
    accounts = {
        str(k): _number(v, f"accounts.{k}")
        for k, v in _check.mapping(doc.get("accounts") or {}, "accounts").items()
    }
    for k, v in accounts.items():
        if v <= 0:
            raise ProblemError(f"accounts.{k}: weight must be > 0")
    prices = {
        str(k): _number(v, f"prices.{k}")
        for k, v in _check.mapping(doc.get("prices") or {}, "prices").items()
    }
    return Problem(cluster, tuple(jobs), tuple(pairs), accounts, prices)


def _parse_cluster(raw: Any) -> dict[str, int]:
    cluster: dict[str, int] = {}
    for t, n in _check.mapping(raw, "cluster").items():
        count = _number(n, f"cluster.{t}")
        if count != int(count):
            raise ProblemError(f"cluster.{t}: {n!r} is not a whole number of GPUs")
        cluster[str(t)] = int(count)
    if not cluster:
        raise ProblemError('cluster: no GPU types; give at least one, e.g. {"v100": 4}')
    return cluster


def _parse_job(raw: Any, i: int, cluster: dict[str, int]) -> ProblemJob:
    rj = _check.mapping(raw, f"jobs[{i}]")
    for key in ("id", "throughput"):
        if key not in rj:
            raise ProblemError(f"jobs[{i}]: missing key '{key}'")
    job_id = str(rj["id"])
    where = f"jobs[{i}] (id {job_id})"
    tput: dict[str, float] = {}
    for t, v in _check.mapping(rj["throughput"], f"{where}.throughput").items():
        if t not in cluster:
            known = ", ".join(cluster)
            raise ProblemError(
                f"{where}.throughput: unknown GPU type '{t}'; the cluster has {known}"
            )
        tput[t] = _number(v, f"{where}.throughput.{t}")
    for t in cluster:
        tput.setdefault(t, 0.0)  # an absent type means the job cannot run there
    if not any(v > 0 for v in tput.values()):
        raise ProblemError(f"{where}.throughput: zero on every GPU type; the job could never run")
    sf_raw = rj.get("scale_factor", 1)
    sf = _number(sf_raw, f"{where}.scale_factor", minimum=1)
    if sf != int(sf):
        raise ProblemError(f"{where}.scale_factor: {sf_raw!r} is not a whole number of GPUs")
    max_cap = max(cluster.values())
    if sf > max_cap:
        raise ProblemError(
            f"{where}.scale_factor: {int(sf)} GPUs is more than any type has "
            f"(largest: {max_cap}); lower it or add GPUs to 'cluster'"
        )
    weight = _number(rj.get("priority_weight", 1.0), f"{where}.priority_weight")
    if weight <= 0:
        raise ProblemError(f"{where}.priority_weight: must be > 0")
    steps = rj.get("steps_remaining")
    slo = rj.get("slo")
    return ProblemJob(
        id=job_id,
        job_type=str(rj.get("job_type", job_id)),
        throughput=tput,
        scale_factor=int(sf),
        priority_weight=weight,
        steps_remaining=None if steps is None else _number(steps, f"{where}.steps_remaining"),
        time_since_start=_number(rj.get("time_since_start", 0.0), f"{where}.time_since_start"),
        account=None if rj.get("account") is None else str(rj["account"]),
        slo=None if slo is None else _number(slo, f"{where}.slo"),
    )


def _parse_pair(raw: Any, where: str, cluster: dict[str, int]) -> PairThroughput:
    rp = _check.mapping(raw, where)
    for key in ("a", "b", "throughput"):
        if key not in rp:
            raise ProblemError(f"{where}: missing key '{key}'")
    per_type: dict[str, tuple[float, float]] = {}
    for t, v in _check.mapping(rp["throughput"], f"{where}.throughput").items():
        if t not in cluster:
            continue  # pair data for types this cluster lacks is harmless
        if not isinstance(v, list | tuple) or len(v) != 2:
            raise ProblemError(f"{where}.throughput.{t}: expected [a, b], got {v!r}")
        per_type[t] = (
            _number(v[0], f"{where}.throughput.{t}[0]"),
            _number(v[1], f"{where}.throughput.{t}[1]"),
        )
    sf = _number(rp.get("scale_factor", 1), f"{where}.scale_factor", minimum=1)
    return PairThroughput(str(rp["a"]), str(rp["b"]), int(sf), per_type)


def load_problem(path: str | Path) -> Problem:
    """Read and validate a problem file; every problem is a ProblemError naming the file."""
    p = Path(path)
    text = read_utf8(
        p,
        ProblemError,
        unreadable="cannot read the problem file ({strerror})",
        save_as="the problem as UTF-8 JSON",
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ProblemError(
            f"{p}: not valid JSON at line {e.lineno} column {e.colno}: {e.msg}"
        ) from e
    except RecursionError:
        raise ProblemError(f"{p}: JSON nested too deeply to read; flatten it") from None
    try:
        return parse_problem(data)
    except ProblemError as e:
        raise ProblemError(f"{p}: {e}") from e


def problem_to_json(problem: Problem) -> dict[str, Any]:
    """The inverse of :func:`parse_problem` (used to dump a round's problem)."""
    out: dict[str, Any] = {
        "cluster": dict(problem.cluster),
        "jobs": [
            {
                "id": j.id,
                "job_type": j.job_type,
                "throughput": dict(j.throughput),
                "scale_factor": j.scale_factor,
                "priority_weight": j.priority_weight,
                "steps_remaining": j.steps_remaining,
                "time_since_start": j.time_since_start,
                "account": j.account,
                "slo": j.slo,
            }
            for j in problem.jobs
        ],
    }
    if problem.pair_throughputs:
        out["pair_throughputs"] = [
            {
                "a": p.a,
                "b": p.b,
                "scale_factor": p.scale_factor,
                "throughput": {t: list(v) for t, v in p.throughput.items()},
            }
            for p in problem.pair_throughputs
        ]
    if problem.accounts:
        out["accounts"] = dict(problem.accounts)
    if problem.prices:
        out["prices"] = dict(problem.prices)
    return out


def allocation_to_json(alloc: Allocation) -> dict[str, Any]:
    """The `--json` output of `slurm-gavel allocate` (docs/design.md §2.1)."""
    return {
        "policy": alloc.policy,
        "allocation": {j: dict(row) for j, row in alloc.fractions.items()},
        "pair_allocation": [
            {"jobs": list(p.jobs), "allocation": dict(p.fractions)} for p in alloc.pairs
        ],
        "objective": alloc.objective,
        "solve_seconds": alloc.solve_seconds,
        "notes": list(alloc.notes),
    }

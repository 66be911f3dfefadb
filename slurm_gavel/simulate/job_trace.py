"""`simulate --trace-job ID`: one job's life, round by round, as JSON lines.

A summary says that a policy's makespan is 544 h; it does not say that one 8-GPU job
spent 415 h spread over three nodes at a ninth of its rate, or that a fill moved
between two GPU types every two rounds. Finding such things took throwaway scripts
against the engine's internals (EXPERIMENTS.md, "Two restart patterns"). This makes it
a flag: for each traced job, a line whenever what the scheduler decided for it
changes (its run's GPU type, nodes and count, its allocation's fractions, its
protection, its restart count), one when it arrives and one when it finishes. Reading
those lines next to the summary shows why a job finished when it did.

The component only reads what a round left behind (the scheduler's state, the
simulated cluster's per-job view); it changes nothing, so a traced run's summary is
the same as an untraced one's (tests/simulate/test_job_trace.py checks it).
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from slurm_gavel.core.scheduler_state import SchedulerState
from slurm_gavel.domain.cluster_model import JobPlacement
from slurm_gavel.domain.model import Job
from slurm_gavel.errors import InputError

H = 3600.0


def _hours(t: float | None) -> float | None:
    return None if t is None or not math.isfinite(t) else round(t / H, 4)


@dataclass
class JobTracer:
    """Collects the lines for the traced jobs of one simulation (one policy)."""

    ids: frozenset[str]
    policy: str
    knowledge: str
    lines: list[dict[str, Any]] = field(default_factory=list)
    _last: dict[str, tuple[Any, ...]] = field(default_factory=dict)

    def on_round(
        self,
        clock: float,
        state: SchedulerState,
        progress: Mapping[str, tuple[int, float]],
    ) -> None:
        """After a round: a line per traced, active job whose decision changed.
        ``progress``: job id -> (restarts so far, steps/s of its run, 0 while waiting)."""
        alloc = state.allocation
        for job_id in sorted(self.ids & progress.keys()):
            restarts, rate = progress[job_id]
            account = state.jobs.get(job_id)
            guard = state.plugins.restart_aware.get(job_id)
            fractions = {} if alloc is None else alloc.fractions.get(job_id, {})
            run = _run(state.placement.get(job_id))
            decision = (
                run,
                tuple(sorted((t, round(f, 4)) for t, f in fractions.items() if f > 5e-5)),
                restarts,
                None if guard is None else _hours(guard.protected_until),
            )
            if self._last.get(job_id) == decision:
                continue
            event = "arrived" if job_id not in self._last else "changed"
            self._last[job_id] = decision
            self.lines.append(
                {
                    "policy": self.policy,
                    "knowledge": self.knowledge,
                    "t_h": _hours(clock),
                    "job": job_id,
                    "event": event,
                    "running": run is not None,
                    "gpu_type": None if run is None else run[0],
                    "gpus": None if run is None else run[1],
                    "nodes": None if run is None else list(run[2]),
                    "consolidated": None if run is None else run[3],
                    "steps_per_s": round(rate, 4) if run is not None else None,
                    "allocation": dict(decision[1]),
                    "restarts": restarts,
                    "protected_until_h": decision[3],
                    "received_h": {}
                    if account is None
                    else {t: _hours(s) for t, s in sorted(account.received_s.items())},
                }
            )

    def on_completions(self, done: Iterable[tuple[str, float, int, float]]) -> None:
        """``done``: (job id, finish time, restarts, arrival time) of jobs that finished."""
        for job_id, finish, restarts, arrival in done:
            if job_id in self.ids:
                self.lines.append(
                    {
                        "policy": self.policy,
                        "knowledge": self.knowledge,
                        "t_h": _hours(finish),
                        "job": job_id,
                        "event": "finished",
                        "restarts": restarts,
                        "jct_h": _hours(finish - arrival),
                    }
                )


def _run(p: JobPlacement | None) -> tuple[str, int, tuple[str, ...], bool] | None:
    if p is None:
        return None
    nodes = tuple(f"{s.node}:{s.gpus}" for s in p.nodes)
    return (p.gpu_type, p.gpus, nodes, p.consolidated)


def traced_ids(asked: Sequence[str], jobs: Iterable[Job]) -> frozenset[str]:
    """The ``--trace-job`` ids, each checked against the trace: a typo would otherwise
    trace nothing and look like a job that never ran."""
    known = {j.id for j in jobs}
    missing = [i for i in asked if i not in known]
    if missing:
        some = ", ".join(sorted(known, key=lambda s: (len(s), s))[:5])
        raise InputError(
            f"--trace-job {', '.join(missing)}: no such job in the trace; give an id "
            f"from its job_id column (e.g. {some})"
        )
    return frozenset(asked)


def write_lines(dest: str, lines: Iterable[Mapping[str, Any]]) -> None:
    """JSON lines to stderr (``-``) or to the file ``dest`` (its folder created)."""
    text = "".join(json.dumps(line) + "\n" for line in lines)
    if dest == "-":
        sys.stderr.write(text)
        return
    path = Path(dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


__all__ = ["JobTracer", "traced_ids", "write_lines"]
